"""The HTML report of ``firsttoken bench``, opened in headless Chromium (Debian's ``chromium``).

Chromium runs the page's scripts, and the test reads back the DOM after them: every chart div must
hold the SVG plotly draws, and the browser's console must show no errors. A screenshot is saved
next to the report (its path is printed) for a human look.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from firsttoken.sim import LatencyModel, Simulator

from .test_bench import run_bench

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=15000",
)


def browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no chromium: scripts/test.sh installs Debian's (scripts/install_chromium.sh)")


def run_browser(*args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [browser(), *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )


def console_messages(stderr: str) -> list[str]:
    """Every console message and uncaught exception in Chromium's log.

    Chromium logs them all at INFO level whatever their kind, so the check is strict: the report
    writes nothing to the console, and neither should plotly on a good page.
    """
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, object]]]:
    base = dict(prefill_ms_per_1k_tokens=100, decode_tokens_per_s=300, jitter=0.3, output_tokens=24)
    models = {"quick": LatencyModel(queue_ms=40, **base), "steady": LatencyModel(queue_ms=120, **base)}
    out = tmp_path_factory.mktemp("report") / "run"
    prompts = out.with_name("prompts.txt")
    prompts.write_text("\n".join("word " * n for n in (20, 200, 600, 1200)))  # varied input lengths
    with Simulator(models=models, seed=5) as sim:
        result = run_bench(
            "--base-url", sim.openai_base_url, "--model", "quick", "--model", "steady", "--compare", "quick,steady",
            "--requests", "16", "--concurrency", "4", "--prompts", str(prompts), "--out", str(out), "--no-progress",
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    yield out.with_suffix(".html"), json.loads(out.with_suffix(".json").read_text())


def test_the_report_renders_every_chart_without_console_messages(report: tuple[Path, dict[str, object]]) -> None:
    html, _ = report
    page = html.read_text()
    assert "<script src=" not in page and "https://" not in page.split("<body>", 1)[1]  # nothing fetched
    result = run_browser("--dump-dom", html.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    charts = re.findall(r'<div class="chart[^"]*" id="([^"]+)"', dom)
    expected = {"cdf-ttft_s", "cdf-e2e_s", "ttft-input", "tps-time"}
    assert expected <= set(charts) and sum(c.startswith("waterfall") for c in charts) == 2, charts
    assert f'data-charts="{len(charts)}"' in dom  # the drawing script ran to its end
    for chart in charts:
        body = dom.split(f'id="{chart}"', 1)[1].split('<div class="chart', 1)[0]
        assert 'class="main-svg"' in body, f"{chart} was not drawn"
        assert "trace" in body  # plotly's trace groups: there is data on it
    for target in ("quick", "steady"):
        assert f"{target}: where the time went" in dom
    assert "Comparison (interleaved)" in dom and "TTFT p50: steady / quick" in dom
    assert console_messages(result.stderr) == []


def test_a_screenshot_of_the_report(report: tuple[Path, dict[str, object]]) -> None:
    html, _ = report
    shot = html.with_suffix(".png")
    result = run_browser(f"--screenshot={shot}", "--window-size=1280,3600", "--hide-scrollbars", html.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 50_000  # charts, not a blank page (a blank 1280x3600 PNG is a few KB)
    print(f"screenshot: {shot}")


def test_console_errors_are_caught(tmp_path: Path) -> None:
    """The check above can fail: a page with a script error is reported."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>console.error('boom'); undefinedFunction();</script></body></html>")
    result = run_browser("--dump-dom", page.as_uri())
    errors = console_messages(result.stderr)
    assert any("boom" in e for e in errors), result.stderr
    assert any("Uncaught ReferenceError: undefinedFunction" in e for e in errors), result.stderr


def test_a_report_from_any_recorded_spans(telemetry: Any, sim: Simulator, tmp_path: Path) -> None:
    """What ``firsttoken demo`` does: the same report from the spans an app recorded."""
    import openai

    from firsttoken.cli.bench_html import figures, write_html
    from firsttoken.cli.bench_out import document_from_spans

    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k")
    for model in ("a", "b", "a"):
        for _ in client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            max_tokens=5,
            stream_options={"include_usage": True},
        ):
            pass
    client.chat.completions.create(model="b", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    client.close()
    doc = document_from_spans(telemetry.spans(), tool="test")
    assert {n: s["n"] for n, s in doc["summaries"].items()} == {"openai a": 2, "openai b": 2}
    assert doc["summaries"]["openai a"]["quantiles"]["ttft_s"]["n"] == 2
    assert doc["summaries"]["openai b"]["quantiles"]["ttft_s"]["n"] == 1  # one of its calls was not streamed
    assert all(r["phases"] and r["ok"] for r in doc["requests"])
    ids = [f["id"] for f in figures(doc)]
    assert {"cdf-ttft_s", "cdf-e2e_s", "tps-time"} <= set(ids)
    assert "ttft-input" not in ids  # every prompt was "hi": one input length, nothing to plot against
    assert sum(i.startswith("waterfall") for i in ids) == 2
    write_html(str(tmp_path / "r.html"), doc)
    assert 'id="waterfall' in (tmp_path / "r.html").read_text()


def test_the_demo_ends_with_the_same_report(tmp_path: Path) -> None:
    import os
    import sys

    html = tmp_path / "demo.html"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-m", "firsttoken.cli", "demo", "--actions", "12", "--no-levers", "--html", str(html)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"\nHTML report (charts of every call above): {html}\n" in result.stdout
    browser_run = run_browser("--dump-dom", html.as_uri())
    dom = browser_run.stdout
    charts = re.findall(r'<div class="chart[^"]*" id="([^"]+)"', dom)
    assert {"cdf-ttft_s", "cdf-e2e_s"} <= set(charts)
    assert f'data-charts="{len(charts)}"' in dom
    assert dom.count('class="main-svg"') >= len(charts)
    assert "gpt-4o-mini" in dom  # calls grouped by provider and model
    assert console_messages(browser_run.stderr) == []
    # One colour per phase across every one of its charts (a waterfall per model), and what was measured.
    assert assert_one_colour_per_phase(drawn_charts(html, tmp_path)) >= 4
    facts = dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]*)</dd>", dom))
    assert {"date", "endpoints", "models", "max_tokens", "stream", "versions"} <= set(facts), facts
    assert "openai at 127.0.0.1:" in facts["endpoints"] and "anthropic at 127.0.0.1:" in facts["endpoints"]
    assert "anthropic " in facts["versions"] and "openai " in facts["versions"]


# -- what the charts and the header show (issue: one colour per phase; say what was measured) ------------

PROBE = """
<script>
// Test-only: what plotly drew, after it drew it: each chart's traces with the colours it used.
const drawn = [...document.querySelectorAll(".chart")].map((div) => ({
  id: div.id,
  traces: (div._fullData || []).map((t) => ({name: t.name, colour: (t.marker || {}).color})),
  scrollbar: [...div.querySelectorAll(".legend .scrollbar")].some((s) => Number(s.getAttribute("height")) > 0),
}));
document.body.dataset.drawn = JSON.stringify(drawn);
</script>
"""


def drawn_charts(report_html: Path, tmp_path: Path) -> list[dict[str, Any]]:
    """The report as Chromium drew it: per chart, each trace's name and the colour plotly used for it."""
    probed = tmp_path / f"probed-{report_html.name}"
    probed.write_text(report_html.read_text().replace("</body>", PROBE + "</body>"))
    result = run_browser("--dump-dom", probed.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    match = re.search(r'data-drawn="([^"]*)"', result.stdout)
    assert match, "the probe did not run"
    import html as html_module

    drawn: list[dict[str, Any]] = json.loads(html_module.unescape(match.group(1)))
    return drawn


def assert_one_colour_per_phase(charts: list[dict[str, Any]]) -> int:
    """Every phase has its palette colour in every waterfall; within a chart no two phases share one."""
    from firsttoken.charts import PHASE_COLOURS, phase_colour

    waterfalls = [c for c in charts if c["id"].startswith("waterfall")]
    assert waterfalls
    for chart in waterfalls:
        colours = {t["name"]: t["colour"] for t in chart["traces"]}
        assert colours == {name: phase_colour(name) for name in colours}, chart["id"]
        assert len(set(colours.values())) == len(colours), f"{chart['id']}: two phases share a colour {colours}"
        order = [t["name"] for t in chart["traces"]]
        assert order == sorted(order, key=list(PHASE_COLOURS).index), f"{chart['id']}: not in phase order"
        assert not chart["scrollbar"], f"{chart['id']}: its legend hides phases behind a scrollbar"
    return len(waterfalls)


def test_every_waterfall_gives_each_phase_its_own_colour(
    report: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    html, _ = report
    assert assert_one_colour_per_phase(drawn_charts(html, tmp_path)) == 2


def test_the_report_says_what_was_measured(report: tuple[Path, dict[str, object]]) -> None:
    html, document = report
    dom = run_browser("--dump-dom", html.as_uri()).stdout
    facts = dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]*)</dd>", dom))
    assert {"date", "endpoints", "load", "max_tokens", "stream", "prompts", "versions"} <= set(facts), facts
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", facts["date"])
    assert "quick: openai quick at http://127.0.0.1:" in facts["endpoints"]
    assert facts["load"] == "closed loop, concurrency 4, 16 requests per target"
    assert facts["max_tokens"] == "128" and facts["stream"] == "streamed"
    assert "firsttoken " in facts["versions"] and "openai " in facts["versions"]
    for header in ("TTFT p50 (ms)", "TTFT p99 (ms)", "TPOT p50 (ms)", "API end-to-end p95 (ms)", "output tokens/s p50"):
        assert f"<th>{header}</th>" in dom, header
    assert "set-up: the share of the calls" in dom  # the column is explained
    verdicts = re.findall(r'<td class="verdict">([^<]+)</td>', dom)
    assert len(verdicts) == len(document["compare"]) == 4  # type: ignore[arg-type]
    assert set(verdicts) <= {"steady slower", "steady faster", "no clear difference"}
    assert "steady slower" in verdicts  # 120 against 40 ms of queue: TTFT p50 is clearly slower


def test_a_chart_whose_x_never_varies_is_left_out(tmp_path: Path) -> None:
    """Synthetic prompts all have one length: TTFT against input length would be a column of dots at one x."""
    out = tmp_path / "same"
    with Simulator(seed=3) as sim:
        result = run_bench(
            "--base-url", sim.openai_base_url, "--model", "gpt-4o-mini", "--requests", "6", "--concurrency", "2",
            "--out", str(out), "--no-progress",
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    page = out.with_suffix(".html").read_text()
    assert 'id="ttft-input"' not in page
    assert 'id="tps-time"' in page and 'id="cdf-ttft_s"' in page
