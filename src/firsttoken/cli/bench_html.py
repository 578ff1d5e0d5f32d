"""The HTML report of ``firsttoken bench``: one self-contained file with interactive charts.

The charts are drawn by plotly.js, inlined from the ``plotly`` package (``firsttoken[cli]``), so the
file opens offline and can be mailed around. Charts: TTFT and end-to-end CDFs per target, TTFT
against input length, output tokens/s over the run, and the phase waterfall of the median and the
p99 request of each target.
"""

from __future__ import annotations

import html
import json
import time
from typing import Any

from ..charts import ReportError, phase_colour, phase_order, plotly_js
from .bench_out import at_percentile, document_from_spans, verdict


def _cdf(values: list[float]) -> tuple[list[float], list[float]]:
    ordered = sorted(values)
    n = len(ordered)
    return [v * 1000 for v in ordered], [(i + 1) / n for i in range(n)]


def _nearest(requests: list[dict[str, Any]], q: float) -> dict[str, Any] | None:
    """The request at the ``q``-th percentile, picked as the terminal report picks its median."""
    done = [r for r in requests if r.get("ok") and r.get("e2e_s") is not None]
    return at_percentile(sorted(done, key=lambda r: (r["e2e_s"], r["seq"])), q)  # type: ignore[no-any-return]


TARGET_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
"""One colour per target (plotly's own ten), the same in every chart of a report."""


def figures(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Plotly figure specs (data + layout) from a bench document."""
    by_target: dict[str, list[dict[str, Any]]] = {}
    for r in document.get("requests", []):
        if not r.get("warmup"):
            by_target.setdefault(r["target"], []).append(r)
    figs: list[dict[str, Any]] = []
    colour = {name: TARGET_COLOURS[i % len(TARGET_COLOURS)] for i, name in enumerate(by_target)}
    for metric, title in (("ttft_s", "Time to first token"), ("e2e_s", "API end-to-end")):
        traces = []
        for name, reqs in by_target.items():
            vals = [r[metric] for r in reqs if r.get("ok") and r.get(metric) is not None]
            if vals:
                x, y = _cdf(vals)
                traces.append(
                    {
                        "type": "scatter",
                        "mode": "lines",
                        "name": name,
                        "x": x,
                        "y": y,
                        "line": {"shape": "hv", "color": colour[name]},
                    }
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
                traces.append(
                    {
                        "type": "scatter",
                        "mode": "markers",
                        "name": name,
                        "x": xs,
                        "y": ys,
                        "marker": {"color": colour[name]},
                    }
                )
        if len({x for t in traces for x in t["x"]}) < 2:
            continue  # every point at one x (synthetic prompts of one length): a chart that shows nothing
        if traces:
            layout = {"title": {"text": title}, "xaxis": {"title": {"text": x_title}}}
            layout["yaxis"] = {"title": {"text": y_title}}
            figs.append({"id": fig_id, "data": traces, "layout": layout})
    for name, reqs in by_target.items():
        rows = [(label, r) for label, q in (("p99", 99), ("median", 50)) if (r := _nearest(reqs, q)) is not None]
        seen = {p["phase"] for _, r in rows for p in r.get("phases", [])}
        phase_names = sorted(seen, key=lambda p: (phase_order(p), p))
        traces = []
        for phase in phase_names:
            ys, xs, bases = [], [], []
            for label, r in rows:
                for p in r.get("phases", []):
                    if p["phase"] == phase:
                        ys.append(f"{label} #{r['seq']}")
                        xs.append(p["duration_s"] * 1000)
                        bases.append(p["start_s"] * 1000)
            traces.append(
                {
                    "type": "bar",
                    "orientation": "h",
                    "name": phase,
                    "x": xs,
                    "y": ys,
                    "base": bases,
                    "marker": {"color": phase_colour(phase)},
                    "hovertemplate": f"{phase}: %{{x:.1f}} ms from %{{base:.1f}} ms<extra></extra>",
                }
            )
        if traces:
            # The legend goes under the chart, in rows, so that no phase hides behind a scrollbar.
            legend_rows = -(-len(traces) // 6)
            figs.append(
                {
                    "id": f"waterfall-{len(figs)}",
                    "data": traces,
                    "layout": {
                        "title": {"text": f"{name}: where the time went (median and p99 request)"},
                        "barmode": "overlay",
                        "xaxis": {"title": {"text": "ms since the call started"}},
                        "legend": {
                            "orientation": "h",
                            "traceorder": "normal",
                            "yref": "container",
                            "y": 0,
                            "yanchor": "bottom",
                        },
                        "height": 320 + 24 * legend_rows,
                        "margin": {"b": 70 + 24 * legend_rows},
                    },
                }
            )
    return figs


COLUMNS: tuple[tuple[str, str, str, float, str], ...] = (
    # (summary metric, header, unit, scale, format)
    ("ttft_s", "TTFT", "ms", 1000.0, "{:.1f}"),
    ("tpot_s", "TPOT", "ms", 1000.0, "{:.2f}"),
    ("e2e_s", "API end-to-end", "ms", 1000.0, "{:.1f}"),
)
SETUP_NOTE = (
    "set-up: the share of the calls' API end-to-end time spent getting a connection (waiting for a pooled one, "
    "DNS, TCP, TLS); near 0 when connections are reused."
)


def _table(document: dict[str, Any]) -> str:
    head = [
        "target",
        "calls",
        "failed",
        "retries",
        "cache hit (% of input tokens)",
        "set-up (% of end-to-end)",
        *(f"{label} p{q} ({unit})" for _, label, unit, _, _ in COLUMNS for q in (50, 95, 99)),
        "output tokens/s p50",
    ]
    rows = ["<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for name, s in document.get("summaries", {}).items():

        def cell(metric: str, q: int, scale: float, fmt: str, s: dict[str, Any] = s) -> str:
            v = s["quantiles"].get(metric, {}).get(f"p{q}")
            return "-" if v is None else fmt.format(v * scale)

        hit = s.get("cache_hit_ratio")
        setup = s.get("connection_setup_share")
        cells = [
            html.escape(name),
            str(s["n"]),
            str(sum(s["errors"].values())),
            str(s["retries"]),
            "-" if hit is None else f"{hit:.0%}",
            "-" if setup is None else f"{setup:.1%}",
            *(cell(m, q, scale, fmt) for m, _, _, scale, fmt in COLUMNS for q in (50, 95, 99)),
            cell("tokens_per_s", 50, 1.0, "{:.0f}"),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    notes = [
        "Percentiles are of the calls that succeeded; failed calls are counted apart. "
        "TPOT: time per output token, after the first. ",
        SETUP_NOTE,
    ]
    return "<table>" + "".join(rows) + "</table>" + f'<p class="note">{html.escape("".join(notes))}</p>'


def _when(epoch_s: Any) -> str | None:
    if not isinstance(epoch_s, (int, float)):
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))


def facts(document: dict[str, Any]) -> list[tuple[str, str]]:
    """What was measured, where and with what: the report's header, from a bench run's settings or from the
    recorded calls (``firsttoken demo``)."""
    out: list[tuple[str, str]] = []
    when = _when(document.get("started"))
    if when:
        out.append(("date", when))
    targets = document.get("targets") or {}
    if targets:
        out.append(
            (
                "endpoints",
                "; ".join(
                    f"{n}: {t.get('api')} {t.get('model')} at {t.get('base_url') or 'the SDK default'}"
                    for n, t in targets.items()
                ),
            )
        )
    elif document.get("endpoints"):
        out.append(("endpoints", "; ".join(document["endpoints"])))
    models = sorted({name.split(" ", 1)[-1] for name in document.get("summaries", {})})
    if models and not targets:
        out.append(("models", ", ".join(models)))
    settings = document.get("settings") or {}
    if settings:
        if settings.get("rate"):
            load = f"open loop, {settings['rate']:g} requests/s"
        else:
            load = f"closed loop, concurrency {settings.get('concurrency') or 4}"
        if settings.get("duration"):
            load += f", for {settings['duration']:g} s"
        elif settings.get("requests"):
            load += f", {settings['requests']} requests per target"
        out.append(("load", load))
        out.append(("max_tokens", str(settings.get("max_tokens"))))
        out.append(("stream", "streamed" if settings.get("stream") else "not streamed"))
        prompts = settings.get("prompts")
        out.append(("prompts", f"from {prompts}" if prompts else f"synthetic, {settings.get('input_tokens')} tokens"))
    else:
        limits = document.get("max_tokens") or []
        if len(limits) > 4:
            out.append(("max_tokens", f"{min(limits)} to {max(limits)} ({len(limits)} values)"))
        elif limits:
            out.append(("max_tokens", ", ".join(str(v) for v in limits)))
        streamed = document.get("streamed") or {}
        if streamed:
            out.append(("stream", ", ".join(f"{n} {k}" for k, n in streamed.items() if n)))
    versions = document.get("versions") or {}
    if versions:
        out.append(("versions", ", ".join(f"{k} {v}" for k, v in versions.items())))
    return out


def _facts_html(document: dict[str, Any]) -> str:
    rows = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in facts(document))
    return f'<dl class="facts">{rows}</dl>' if rows else ""


def _extras(document: dict[str, Any]) -> str:
    """The comparison and race tables, when the run had them."""
    out = []
    rows = document.get("compare") or []
    if rows:
        cells = ["<tr><th>metric</th><th>ratio</th><th>95% interval</th><th>verdict</th></tr>"]
        for r in rows:
            metric = "TTFT" if r["metric"] == "ttft_s" else "end-to-end"
            name = html.escape(f"{metric} p{r['quantile']}: {r['a']} / {r['b']}")
            cells.append(
                f"<tr><td>{name}</td><td>{r['ratio']:.2f}</td><td>{r['low']:.2f} - {r['high']:.2f}</td>"
                f'<td class="verdict">{html.escape(verdict(r))}</td></tr>'
            )
        out.append(
            "<h2>Comparison (interleaved)</h2><table>"
            + "".join(cells)
            + '</table><p class="note">Ratio of the two targets\' percentiles, with a 95% bootstrap interval; '
            "slower or faster only when the whole interval is past 1.</p>"
        )
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
.note {{ color: #555; font-size: 0.9em; max-width: 1100px; }}
dl.facts {{ display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; max-width: 1100px; }}
dl.facts dt {{ font-weight: 600; }}
dl.facts dd {{ margin: 0; }}
</style>
<script>{plotly_js()}</script>
</head><body>
<h1>{html.escape(title)}</h1>
<p>Every number was recorded by firsttoken's instrumentation of the SDK calls (the same numbers it exports).</p>
{_facts_html(document)}
{note}
{_table(document)}
{_extras(document)}
{divs}
<script type="application/json" id="figures">{data}</script>
<script>
const figures = JSON.parse(document.getElementById("figures").textContent);
for (const f of figures) {{
  const layout = Object.assign({{}}, f.layout);
  layout.margin = Object.assign({{t: 60}}, f.layout.margin || {{}});
  // Titles start at the left, clear of plotly's toolbar at the top right.
  layout.title = Object.assign({{x: 0, xanchor: "left"}}, f.layout.title);
  Plotly.newPlot(f.id, f.data, layout, {{responsive: true, displaylogo: false}});
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
    try:
        write_html(path, document_from_spans(spans, tool=title), title=title)
    except ReportError as exc:
        return f"No HTML report: {exc}."
    except OSError as exc:
        return f"No HTML report: cannot write {path}: {exc.strerror}."
    return f"HTML report (charts of every call above): {path}"
