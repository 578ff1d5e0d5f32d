"""The instruments are a table (firsttoken.instruments.INSTRUMENTS); docs/metrics.md says the same."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider

from firsttoken import instruments
from firsttoken.config import load
from firsttoken.recorder import Recorder

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `([a-z_.]+)` \| (histogram|counter) \| `([^`]+)` \|", re.M)


def test_docs_metrics_md_lists_every_instrument_with_its_kind_and_unit() -> None:
    documented = {name: (kind, unit) for name, kind, unit in ROW.findall(DOC.read_text())}
    declared = {row.name: (row.kind, row.unit) for row in instruments.INSTRUMENTS}
    assert documented == declared


def test_the_recorder_makes_one_instrument_per_row() -> None:
    hints = typing.get_type_hints(Recorder)
    assert {f"_{row.attr}" for row in instruments.INSTRUMENTS} <= set(hints)
    rows = {row.name for row in instruments.INSTRUMENTS}
    assert len(rows) == len(instruments.INSTRUMENTS), "one row per metric"
    for chunk_metrics in (False, True):
        settings = load(capture_content=None, options={"chunk_metrics": chunk_metrics})
        recorder = Recorder(None, MeterProvider().get_meter("t"), settings)  # type: ignore[arg-type]
        for row in instruments.INSTRUMENTS:
            made = getattr(recorder, f"_{row.attr}")
            assert (made is None) == (row.opt_in is not None and not chunk_metrics), row.name
