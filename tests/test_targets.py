"""One source of targets: `firsttoken stack generate|check` and the app's ``targets`` setting.

A checkout is copied (the files generation reads and writes), a target is moved in its
prometheus/slos.yml, and the installed command regenerates everything; the Collector's policy, the
SLO rules, the target rules, the dashboards, the package's defaults and the app's tail decision all
follow the one edit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import openai
import pytest

import firsttoken
from firsttoken import semconv as sc
from firsttoken import tail
from firsttoken import targets as tg
from firsttoken.sim import Simulator

from .conftest import Telemetry

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("prometheus", "collector-config", "grafana/dashboards", "src/firsttoken/_targets.py")
MESSAGES: Any = [{"role": "user", "content": "hi"}]
STALL = {"x-firsttoken-sim-fault": "stall;after_chunks=1;seconds=0.3"}


def stack(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The installed `firsttoken stack` command (the console script's module, in this interpreter)."""
    cmd = [sys.executable, "-m", "firsttoken", "stack", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in COPIED:
        source, target = ROOT / name, tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy(source, target)
    return tmp_path


def test_the_committed_files_are_what_slos_yml_generates() -> None:
    """The test command's check: one line on success."""
    result = stack("check", "--root", ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1 and "up to date" in result.stdout, result.stdout
    assert tg.SHIPPED.ttft == tg.read(ROOT / tg.SOURCE)[tg.TTFT], "the package ships the checkout's targets"


def test_one_edit_moves_the_collector_the_rules_the_dashboards_and_the_app(
    checkout: Path, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = checkout / tg.SOURCE
    text = source.read_text()
    edits = {"ttft_p95: { default: 2, interactive: 1,": "ttft_p95: { default: 2, interactive: 0.25,",
             "ttft_p99: { default: 5, interactive: 2.5,": "ttft_p99: { default: 5, interactive: 0.5,"}  # fmt: skip
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    source.write_text(text)
    stale = stack("check", "--root", checkout)
    assert stale.returncode == 1 and "out of date" in stale.stderr and stale.stderr.count("\n") == 1, stale.stderr

    generated = stack("generate", "--root", checkout)
    assert generated.returncode == 0, generated.stderr
    assert generated.stdout.count("\n") == 1 and "rewrote" in generated.stdout
    assert stack("check", "--root", checkout).returncode == 0

    # The Collector keeps the interactive calls over the new p95 target.
    slow_first_token = f'["{sc.FT_TIME_TO_FIRST_TOKEN}"] > 0.25'
    for config in ("collector-config/otelcol.yaml", "collector-config/scale-out/sampler.yaml"):
        assert f'== "interactive" and span.attributes{slow_first_token}' in (checkout / config).read_text()
    # The SLO counts interactive calls within the new p99 target as good; the target series moved.
    recording = (checkout / "prometheus/rules/slo-recording.yml").read_text()
    interactive_ttft = [r for r in recording.split("- record:") if "slo: ttft\n" in r and "interactive" in r]
    assert any('le=\\"0.5\\"' in r or 'le="0.5"' in r for r in interactive_ttft)
    assert not any('le="2.5"' in r for r in interactive_ttft)
    rules = (checkout / "prometheus/rules/targets.yml").read_text()
    assert "expr: vector(0.25)\n        labels: { firsttoken_traffic_class: interactive }" in rules
    # The dashboards' interactive stats check the new bounds.
    overview = json.dumps(json.loads((checkout / "grafana/dashboards/llm-latency-overview.json").read_text()))
    assert 'firsttoken_traffic_class=\\"interactive\\", le=\\"0.25\\"' in overview
    assert 'firsttoken_traffic_class=\\"interactive\\", le=\\"0.5\\"' in overview
    # The package's defaults (what a build of this checkout ships).
    assert '"interactive": 0.25' in (checkout / "src/firsttoken/_targets.py").read_text()

    # The app, pointed at the file, calls a 300 ms first token slow for interactive (over 0.25 s);
    # with the shipped targets (1 s) the same call is not (test_tail.py).
    monkeypatch.setenv("FIRSTTOKEN_TARGETS", str(source))
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        with firsttoken.traffic_class("interactive"):
            for _ in range(stream_calls := 2 * tail.MIN_CALLS):
                _stream(client)
            _stream(client, extra_headers=STALL)
    finally:
        firsttoken.uninstrument()
    calls = t.calls()
    assert len(calls) == stream_calls + 1
    assert calls[-1].attributes[sc.FT_TIME_TO_FIRST_TOKEN] >= 0.25  # type: ignore[index,operator]
    assert t.children(calls[-1]), "over the interactive target of the file: a waterfall"
    assert not any(t.children(c) for c in calls[:-1])


def _stream(client: openai.OpenAI, **kwargs: Any) -> None:
    for _ in client.chat.completions.create(model="m", messages=MESSAGES, stream=True, **kwargs):
        pass


def test_a_bad_value_is_one_line_naming_the_valid_bounds(checkout: Path) -> None:
    source = checkout / tg.SOURCE
    text = (
        source.read_text()
        .replace("interactive: 2.5,", "interactive: 3,")
        .replace("interactive: 20.48,", "interactive: 20,")
    )
    source.write_text(text)
    for action in ("check", "generate"):
        result = stack(action, "--root", checkout)
        assert result.returncode == 1
        lines = result.stderr.splitlines()
        assert len(lines) == 2, result.stderr
        assert "targets.ttft_p99.interactive = 3 is not a bucket bound" in lines[0]
        assert "valid (seconds): 0.001, 0.005," in lines[0] and "2, 2.5, 5, 7.5, 10, 20" in lines[0]
        assert "targets.e2e_p99.interactive = 20 is not a bucket bound" in lines[1]
        assert "10.24, 20.48, 40.96" in lines[1] and "81.92" not in lines[1]
    assert (checkout / "prometheus/rules/targets.yml").read_text() == (
        ROOT / "prometheus/rules/targets.yml"
    ).read_text()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "cannot read it"),
        ("targets: { ttft_p95: { default: 3 } }", "ttft_p95.default = 3 is not a bucket bound"),
        ("targets: [", "cannot read it"),
        ("slos: []", "no targets: section"),
    ],
)
def test_a_bad_targets_file_is_one_warning_and_the_shipped_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None, said: str
) -> None:
    path = tmp_path / "slos.yml"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv("FIRSTTOKEN_TARGETS", str(path))
    t = Telemetry()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        mine = [str(w.message) for w in caught if issubclass(w.category, firsttoken.FirstTokenWarning)]
        assert len(mine) == 1 and said in mine[0] and "FIRSTTOKEN_TARGETS" in mine[0], mine
        assert "using the package's default targets" in mine[0]
    finally:
        firsttoken.uninstrument()


def test_outside_a_checkout_the_command_says_where_it_looked(tmp_path: Path) -> None:
    result = stack("check", "--root", tmp_path)
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert f"no prometheus/slos.yml in {tmp_path}" in result.stderr
