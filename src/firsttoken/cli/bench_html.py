"""The HTML report of ``firsttoken bench``: one self-contained file with interactive charts.

The charts are drawn by plotly.js, inlined from the ``plotly`` package (``firsttoken[cli]``), so the
file opens offline and can be mailed around. Charts: TTFT and end-to-end CDFs per target, TTFT
against input length, output tokens/s over the run, and the phase waterfall of the median and the
p99 request of each target.
"""

from __future__ import annotations

import html
import json
from typing import Any

from .report import percentile


class ReportError(Exception):
    """The HTML report cannot be written (its chart library is missing)."""


def _plotly_js() -> str:
    try:
        from plotly.offline import get_plotlyjs  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        raise ReportError("the HTML report needs plotly: pip install 'plotly>=5.20' (firsttoken's cli extra)") from None
    return str(get_plotlyjs())


def _cdf(values: list[float]) -> tuple[list[float], list[float]]:
    ordered = sorted(values)
    n = len(ordered)
    return [v * 1000 for v in ordered], [(i + 1) / n for i in range(n)]


def _nearest(requests: list[dict[str, Any]], q: float) -> dict[str, Any] | None:
    done = [r for r in requests if r.get("ok") and r.get("e2e_s") is not None]
    if not done:
        return None
    target = percentile([r["e2e_s"] for r in done], q)
    assert target is not None
    return min(done, key=lambda r: abs(r["e2e_s"] - target))


def figures(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Plotly figure specs (data + layout) from a bench document."""
    by_target: dict[str, list[dict[str, Any]]] = {}
    for r in document.get("requests", []):
        if not r.get("warmup"):
            by_target.setdefault(r["target"], []).append(r)
    figs: list[dict[str, Any]] = []
    for metric, title in (("ttft_s", "Time to first token"), ("e2e_s", "API end-to-end")):
        traces = []
        for name, reqs in by_target.items():
            vals = [r[metric] for r in reqs if r.get("ok") and r.get(metric) is not None]
            if vals:
                x, y = _cdf(vals)
                traces.append(
                    {"type": "scatter", "mode": "lines", "name": name, "x": x, "y": y, "line": {"shape": "hv"}}
                )
        if traces:
            figs.append(
                {
                    "id": f"cdf-{metric}",
                    "data": traces,
                    "layout": {
                        "title": {"text": f"{title}: CDF per target"},
                        "xaxis": {"title": {"text": "ms"}},
                        "yaxis": {"title": {"text": "fraction of requests"}, "range": [0, 1.02]},
                    },
                }
            )
    points = {
        "ttft-input": (
            "TTFT against input length",
            "input tokens",
            "TTFT ms",
            lambda r: (r["input_tokens"], r["ttft_s"] * 1000) if r.get("ttft_s") and r.get("input_tokens") else None,
        ),
        "tps-time": (
            "Output tokens/s over the run (each request, at its end)",
            "seconds since the start of the run",
            "output tokens/s",
            lambda r: (r["start_s"] + (r["e2e_s"] or 0), r["tokens_per_s"]) if r.get("tokens_per_s") else None,
        ),
    }
    for fig_id, (title, x_title, y_title, point) in points.items():
        traces = []
        for name, reqs in by_target.items():
            pts = sorted(p for p in map(point, reqs) if p is not None)
            if pts:
                xs, ys = [p[0] for p in pts], [p[1] for p in pts]
                traces.append({"type": "scatter", "mode": "markers", "name": name, "x": xs, "y": ys})
        if traces:
            layout = {"title": {"text": title}, "xaxis": {"title": {"text": x_title}}}
            layout["yaxis"] = {"title": {"text": y_title}}
            figs.append({"id": fig_id, "data": traces, "layout": layout})
    for name, reqs in by_target.items():
        rows = [(label, _nearest(reqs, q)) for label, q in (("p99", 99), ("median", 50))]
        traces = []
        phase_names: list[str] = []
        for _, r in rows:
            if r is None:
                continue
            for p in r.get("phases", []):
                if p["phase"] not in phase_names:
                    phase_names.append(p["phase"])
        for phase in phase_names:
            ys, xs, bases = [], [], []
            for label, r in rows:
                if r is None:
                    continue
                for p in r.get("phases", []):
                    if p["phase"] == phase:
                        ys.append(f"{label} #{r['seq']}")
                        xs.append(p["duration_s"] * 1000)
                        bases.append(p["start_s"] * 1000)
            traces.append({"type": "bar", "orientation": "h", "name": phase, "x": xs, "y": ys, "base": bases})
        if traces:
            figs.append(
                {
                    "id": f"waterfall-{len(figs)}",
                    "data": traces,
                    "layout": {
                        "title": {"text": f"{name}: where the time went (median and p99 request)"},
                        "barmode": "overlay",
                        "xaxis": {"title": {"text": "ms since the call started"}},
                        "height": 300,
                    },
                }
            )
    return figs


def _table(document: dict[str, Any]) -> str:
    head = "<tr><th>target</th><th>n</th><th>errors</th><th>retries</th><th>cache hit</th><th>set-up</th>"
    head += "".join(f"<th>{m} p{q}</th>" for m in ("TTFT", "e2e") for q in (50, 95, 99)) + "</tr>"
    rows = [head]
    for name, s in document.get("summaries", {}).items():

        def ms(metric: str, q: int, s: dict[str, Any] = s) -> str:
            v = s["quantiles"][metric].get(f"p{q}")
            return "-" if v is None else f"{v * 1000:.1f}"

        hit = s.get("cache_hit_ratio")
        setup = s.get("connection_setup_share")
        cells = [
            html.escape(name),
            str(s["n"]),
            str(sum(s["errors"].values())),
            str(s["retries"]),
            "-" if hit is None else f"{hit:.0%}",
            "-" if setup is None else f"{setup:.1%}",
            *(ms(m, q) for m in ("ttft_s", "e2e_s") for q in (50, 95, 99)),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


def _extras(document: dict[str, Any]) -> str:
    """The comparison and race tables, when the run had them."""
    out = []
    rows = document.get("compare") or []
    if rows:
        cells = ["<tr><th>metric</th><th>ratio</th><th>95% interval</th></tr>"]
        for r in rows:
            metric = "TTFT" if r["metric"] == "ttft_s" else "end-to-end"
            name = html.escape(f"{metric} p{r['quantile']}: {r['a']} / {r['b']}")
            cells.append(f"<tr><td>{name}</td><td>{r['ratio']:.2f}</td><td>{r['low']:.2f} - {r['high']:.2f}</td></tr>")
        out.append("<h2>Comparison (interleaved)</h2><table>" + "".join(cells) + "</table>")
    race = document.get("race")
    if race:
        cells = ["<tr><th>contender</th><th>wins</th><th>share</th></tr>"]
        for name, wins in race["wins"].items():
            share = race["win_share"].get(name)
            shown = "-" if share is None else f"{share:.0%}"
            cells.append(f"<tr><td>{html.escape(name)}</td><td>{wins}</td><td>{shown}</td></tr>")
        wasted = race.get("wasted_share")
        out.append(
            f"<h2>Race {html.escape(race['label'])}</h2><table>{''.join(cells)}</table>"
            f"<p>Wasted by the cancelled losers: {race['wasted_input_tokens']} input and "
            f"{race['wasted_output_tokens']} output tokens ({'-' if wasted is None else f'{wasted:.0%}'} of all).</p>"
        )
    return "\n".join(out)


def render(document: dict[str, Any], *, title: str = "firsttoken bench") -> str:
    figs = figures(document)
    data = json.dumps(figs).replace("</", "<\\/")
    divs = "\n".join(f'<div class="chart" id="{f["id"]}"></div>' for f in figs)
    error = document.get("error")
    note = f'<p class="error">Stopped early: {html.escape(str(error))}</p>' if error else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
.chart {{ width: 100%; max-width: 1100px; height: 420px; margin: 1em 0; }}
.error {{ color: #a00; }}
</style>
<script>{_plotly_js()}</script>
</head><body>
<h1>{html.escape(title)}</h1>
<p>Every number was recorded by firsttoken's instrumentation of the SDK calls (the same numbers it exports).</p>
{note}
{_table(document)}
{_extras(document)}
{divs}
<script type="application/json" id="figures">{data}</script>
<script>
const figures = JSON.parse(document.getElementById("figures").textContent);
for (const f of figures) {{
  Plotly.newPlot(f.id, f.data, Object.assign({{margin: {{t: 50}}}}, f.layout), {{responsive: true}});
}}
document.body.dataset.charts = String(figures.length);
</script>
</body></html>
"""


def write_html(path: str, document: dict[str, Any], *, title: str = "firsttoken bench") -> None:
    text = render(document, title=title)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_spans_report(spans: Any, path: str, *, title: str) -> str:
    """The report of any recorded calls (``firsttoken demo``); returns the line to print."""
    from .bench_out import document_from_spans

    try:
        write_html(path, document_from_spans(spans, tool=title), title=title)
    except ReportError as exc:
        return f"No HTML report: {exc}."
    except OSError as exc:
        return f"No HTML report: cannot write {path}: {exc.strerror}."
    return f"HTML report (charts of every call above): {path}"
