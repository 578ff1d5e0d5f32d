"""The instruments are a table (firsttoken.instruments.INSTRUMENTS); docs/metrics.md says the same."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider

from firsttoken import instruments
from firsttoken.actions import AppRecorder
from firsttoken.config import load
from firsttoken.recorder import Recorder

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `([a-z_.]+)` \| (histogram|counter) \| `([^`]+)` \|", re.M)


def test_docs_metrics_md_lists_every_instrument_with_its_kind_and_unit() -> None:
    documented = {name: (kind, unit) for name, kind, unit in ROW.findall(DOC.read_text())}
    declared = {row.name: (row.kind, row.unit) for row in instruments.INSTRUMENTS}
    assert documented == declared


def test_the_recorders_make_one_instrument_per_row() -> None:
    """The Recorder makes the rows of calls, its AppRecorder those of actions and phases; none twice."""
    owners = {instruments.CALL: Recorder, instruments.APP: AppRecorder}
    assert {row.recorder for row in instruments.INSTRUMENTS} == set(owners)
    for row in instruments.INSTRUMENTS:
        assert f"_{row.attr}" in typing.get_type_hints(owners[row.recorder]), row.name
        for other in set(owners) - {row.recorder}:
            assert f"_{row.attr}" not in typing.get_type_hints(owners[other]), row.name
    rows = {row.name for row in instruments.INSTRUMENTS}
    assert len(rows) == len(instruments.INSTRUMENTS), "one row per metric"
    for chunk_metrics in (False, True):
        settings = load(capture_content=None, options={"chunk_metrics": chunk_metrics})
        recorder = Recorder(None, MeterProvider().get_meter("t"), settings)  # type: ignore[arg-type]
        made_by = {instruments.CALL: recorder, instruments.APP: recorder.actions}
        for row in instruments.INSTRUMENTS:
            made = getattr(made_by[row.recorder], f"_{row.attr}")
            assert (made is None) == (row.opt_in is not None and not chunk_metrics), row.name
