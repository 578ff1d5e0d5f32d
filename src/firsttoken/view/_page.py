"""The viewer's page: one HTML document with plotly.js inlined (no build step, nothing fetched from
elsewhere); its script polls the viewer's JSON API and redraws."""

from __future__ import annotations

import html

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>firsttoken view</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.2em 2em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 0.3em; }
h2 { font-size: 1.1em; margin: 1.2em 0 0.4em; }
.bar { display: flex; gap: 1.2em; align-items: center; flex-wrap: wrap; color: #444; }
table { border-collapse: collapse; font-size: 0.82em; }
td, th { border: 1px solid #ddd; padding: 0.2em 0.45em; text-align: right; white-space: nowrap; }
td:first-child, th:first-child { text-align: left; }
tr.pick { cursor: pointer; }
tr.pick:hover { background: #eef4ff; }
tr.chosen { background: #dde9ff; }
.failed { color: #b00; }
.note { color: #666; font-size: 0.85em; }
#over-time { width: 100%; max-width: 1200px; height: 320px; }
#waterfall { width: 100%; max-width: 1100px; height: 260px; }
.cols { display: flex; gap: 2em; flex-wrap: wrap; align-items: flex-start; }
#attrs td { text-align: left; white-space: normal; max-width: 46em; word-break: break-all; }
</style>
<script>__PLOTLY__</script>
</head><body>
<h1>firsttoken view</h1>
<div class="bar">
  <span>Receiving OTLP/HTTP at <code>__ENDPOINT__</code></span>
  <label>window <select id="window">
    <option value="300">5 min</option><option value="900" selected>15 min</option>
    <option value="3600">1 h</option><option value="21600">6 h</option>
    <option value="86400">24 h</option><option value="604800">7 days</option></select></label>
  <label>by <select id="group"><option>model</option><option>provider</option>
    <option value="traffic_class">traffic class</option><option value="service">app</option></select></label>
  <label>slowest by <select id="metric"><option value="e2e">end-to-end</option>
    <option value="ttft">TTFT</option><option value="tpot">TPOT</option></select></label>
  <span id="stored" class="note"></span>
</div>
<h2>LLM calls</h2>
<table id="summary"></table>
<p class="note">Percentiles are of successful calls (ms); failed calls are counted apart. TPOT: time per output
token after the first. Cache hit: cached share of the input tokens.</p>
<h2>User actions (application end-to-end)</h2>
<table id="actions"></table>
<h2>Over time</h2>
<div id="over-time"></div>
<h2>Slowest calls <span class="note">(click one for its waterfall)</span></h2>
<table id="slowest"></table>
<h2>Failed calls <span class="note">(the latest; click one to open it)</span></h2>
<table id="errors"></table>
<div id="detail" hidden>
  <h2 id="detail-title"></h2>
  <div id="waterfall"></div>
  <p id="waterfall-note" class="note"></p>
  <div class="cols">
    <div><h2>The user action around it</h2><div id="action"></div></div>
    <div><h2>Attributes</h2><table id="attrs"></table></div>
  </div>
</div>
<script>
const $ = (id) => document.getElementById(id);
const ms = (s) => (s === null || s === undefined) ? "-" : (s * 1000).toFixed(s < 0.1 ? 2 : 1);
const pct = (x) => (x === null || x === undefined) ? "-" : (100 * x).toFixed(0) + "%";
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
let chosen = null;

function query() {
  return `window=${$("window").value}&group=${$("group").value}&metric=${$("metric").value}`;
}

function summaryTable(rows, windowS) {
  const head = ["", "calls", "failed", "calls/s", "cache hit"];
  for (const m of ["TTFT", "TPOT", "end-to-end"]) for (const q of [50, 95, 99]) head.push(`${m} p${q}`);
  let out = "<tr>" + head.map((h) => `<th>${h}</th>`).join("") + "</tr>";
  for (const r of rows) {
    const cells = [esc(r.key), r.calls, r.failed ? `<span class="failed">${r.failed}</span>` : 0,
      (r.calls / windowS).toFixed(2), pct(r.cache_hit)];
    for (const m of ["ttft", "tpot", "e2e"]) for (const q of [50, 95, 99]) cells.push(ms(r[`${m}_p${q}`]));
    out += "<tr>" + cells.map((c) => `<td>${c}</td>`).join("") + "</tr>";
  }
  $("summary").innerHTML = rows.length ? out : "<tr><td>No calls in this window yet.</td></tr>";
}

function actionsTable(rows) {
  let out = "<tr><th>action</th><th>count</th><th>failed</th><th>p50</th><th>p95</th><th>p99</th></tr>";
  for (const r of rows) {
    out += `<tr><td>${esc(r.key)}</td><td>${r.actions}</td><td>${r.failed}</td>` +
      `<td>${ms(r.p50)}</td><td>${ms(r.p95)}</td><td>${ms(r.p99)}</td></tr>`;
  }
  $("actions").innerHTML = rows.length ? out : "<tr><td>No firsttoken.action() spans in this window.</td></tr>";
}

// One colour per group, the same for its TTFT line and its calls/s bars (plotly's own ten, in order).
const GROUP_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
  "#bcbd22", "#17becf"];

// An axis from 0 with round ticks (1, 2 or 5 times a power of ten), about four of them.
function niceAxis(max) {
  if (!(max > 0)) max = 1;
  const raw = max / 4, power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
  return {range: [0, Math.ceil(max * 1.05 / step) * step], dtick: step, tick0: 0, tickmode: "linear"};
}

function overTime(series) {
  const traces = [], groups = Object.entries(series.groups);
  const x = series.t_ms.map((t) => new Date(t));
  let ttftMax = 0;
  const stacked = series.t_ms.map(() => 0);
  groups.forEach(([key, g], n) => {
    const colour = GROUP_COLOURS[n % GROUP_COLOURS.length];
    const ttft = g.ttft_p95.map((v) => v === null ? null : v * 1000);
    for (const v of ttft) if (v !== null) ttftMax = Math.max(ttftMax, v);
    g.calls_per_s.forEach((v, i) => { stacked[i] += v; });
    traces.push({type: "scatter", mode: "lines+markers", name: `${key} TTFT p95`, connectgaps: false, x, y: ttft,
      line: {color: colour}, marker: {color: colour}, legendgroup: key});
    traces.push({type: "bar", name: `${key} calls/s`, yaxis: "y2", opacity: 0.3, x, y: g.calls_per_s,
      marker: {color: colour}, legendgroup: key});
  });
  const plot = $("over-time");
  plot.dataset.empty = groups.length ? "" : "yes";
  if (!groups.length) {
    Plotly.react(plot, [], {margin: {t: 10}, xaxis: {visible: false}, yaxis: {visible: false},
      annotations: [{text: "No calls in this window yet.", showarrow: false, xref: "paper", yref: "paper",
        x: 0.5, y: 0.5, font: {size: 15, color: "#666"}}]}, {responsive: true, displaylogo: false});
    return;
  }
  // The top margin keeps plotly's toolbar above the plot, off the highest tick.
  Plotly.react(plot, traces, {margin: {t: 40, r: 60}, barmode: "stack",
    xaxis: {range: [new Date(series.t_ms[0] - series.bucket_s * 500),
      new Date(series.t_ms.at(-1) + series.bucket_s * 500)]},
    yaxis: {title: {text: "TTFT p95 (ms)"}, ...niceAxis(ttftMax)},
    yaxis2: {title: {text: "calls/s"}, overlaying: "y", side: "right", showgrid: false,
      ...niceAxis(Math.max(...stacked))},
    legend: {orientation: "h", y: -0.2}}, {responsive: true, displaylogo: false});
}

function slowestTable(rows) {
  let out = "<tr><th>when</th><th>app</th><th>provider</th><th>model</th><th>class</th>" +
    "<th>TTFT</th><th>TPOT</th><th>end-to-end</th><th>end</th></tr>";
  for (const r of rows) {
    const cls = "pick" + (r.span_id === chosen ? " chosen" : "");
    out += `<tr class="${cls}" data-span="${r.span_id}"><td>${new Date(r.start_ns / 1e6).toLocaleTimeString()}</td>` +
      `<td>${esc(r.service)}</td><td>${esc(r.provider)}</td><td>${esc(r.model)}</td>` +
      `<td>${esc(r.traffic_class ?? "-")}</td><td>${ms(r.ttft)}</td><td>${ms(r.tpot)}</td><td>${ms(r.e2e)}</td>` +
      `<td class="${r.failed ? "failed" : ""}">${esc(r.end_reason ?? "-")}</td></tr>`;
  }
  $("slowest").innerHTML = rows.length ? out : "<tr><td>No calls in this window yet.</td></tr>";
  for (const tr of document.querySelectorAll("#slowest tr.pick")) tr.onclick = () => show(tr.dataset.span);
}

function errorsTable(rows) {
  let out = "<tr><th>when</th><th>app</th><th>provider</th><th>model</th><th>error type</th><th>status</th>" +
    "<th>message</th><th>end-to-end</th></tr>";
  for (const r of rows) {
    const cls = "pick" + (r.span_id === chosen ? " chosen" : "");
    out += `<tr class="${cls}" data-span="${r.span_id}"><td>${new Date(r.start_ns / 1e6).toLocaleTimeString()}</td>` +
      `<td>${esc(r.service)}</td><td>${esc(r.provider)}</td><td>${esc(r.model)}</td>` +
      `<td class="failed">${esc(r.error_type ?? "-")}</td><td>${esc(r.status ?? "-")}</td>` +
      `<td>${esc(r.message ?? "-")}</td><td>${ms(r.e2e)}</td></tr>`;
  }
  $("errors").innerHTML = rows.length ? out : "<tr><td>No failed calls in this window.</td></tr>";
  for (const tr of document.querySelectorAll("#errors tr.pick")) tr.onclick = () => show(tr.dataset.span);
}

function attrValue(k, v, seconds) {
  if (seconds.includes(k) && typeof v === "number") return `${ms(v)} ms`;
  return typeof v === "object" ? JSON.stringify(v) : v;
}

async function show(spanId) {
  chosen = spanId;
  history.replaceState(null, "", `#call=${spanId}`);  // a link to this very call
  const call = await (await fetch(`api/call?span_id=${spanId}`)).json();
  $("detail").hidden = false;
  $("detail-title").textContent = `${call.name}: ${ms(call.e2e)} ms end-to-end` +
    (call.ttft !== null ? `, TTFT ${ms(call.ttft)} ms` : "") + ` (${call.service})`;
  const named = new Set();  // a phase met again (each attempt of a retried call has its own) is one legend entry
  const traces = call.phases.map((p) => ({type: "bar", orientation: "h", name: p.phase, y: ["call"],
    x: [p.duration_s * 1000], base: [p.start_s * 1000], marker: {color: p.colour},
    legendgroup: p.phase, showlegend: !named.has(p.phase) && named.add(p.phase) !== undefined,
    hovertemplate: `${p.phase}: %{x:.1f} ms from %{base:.1f} ms<extra></extra>`}));
  Plotly.react("waterfall", traces, {barmode: "overlay", margin: {t: 10, b: 90},
    xaxis: {title: {text: "ms since the call started"}},
    legend: {orientation: "h", traceorder: "normal", yref: "container", y: 0, yanchor: "bottom"}},
    {responsive: true, displaylogo: false});
  $("waterfall").dataset.phases = JSON.stringify(call.phases.map((p) => [p.phase, p.colour]));
  $("waterfall-note").textContent = call.phases_from === "spans" ? "" :
    "No phase spans were sampled for this call: its phases are drawn end to end from the phase durations " +
    "every call span carries (firsttoken.phase_duration.*).";
  $("attrs").innerHTML = Object.entries(call.attrs).sort().map(([k, v]) =>
    `<tr><td>${esc(k)}</td><td>${esc(attrValue(k, v, call.seconds))}</td></tr>`).join("");
  const a = call.action;
  $("action").innerHTML = a === null ? "<p class='note'>This call ran outside any firsttoken.action().</p>" :
    `<p><b>${esc(a.name)}</b>: ${ms(a.duration_s)} ms, ${a.calls.length} LLM call(s)</p><table>` +
    "<tr><th>starts at</th><th>model</th><th>TTFT</th><th>end-to-end</th></tr>" +
    a.calls.map((c) => `<tr class="pick${c.span_id === spanId ? " chosen" : ""}" data-span="${c.span_id}">` +
      `<td>+${ms(c.offset_s)} ms</td><td>${esc(c.model)}</td><td>${ms(c.ttft)}</td>` +
      `<td>${ms(c.e2e)}</td></tr>`).join("") +
    "</table>";
  for (const tr of document.querySelectorAll("#action tr.pick")) tr.onclick = () => show(tr.dataset.span);
  document.body.dataset.shown = spanId;
}

async function refresh() {
  const data = await (await fetch(`api/overview?${query()}`)).json();
  $("stored").textContent = `${data.stored} calls stored`;
  summaryTable(data.summary, Number($("window").value));
  actionsTable(data.actions);
  overTime(data.series);
  slowestTable(data.slowest);
  errorsTable(data.errors);
  document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
}
for (const id of ["window", "group", "metric"]) $(id).onchange = refresh;
const linked = location.hash.match(/call=([0-9a-f]{16})/);
if (linked) show(linked[1]);
refresh();
setInterval(refresh, 2000);
</script>
</body></html>
"""


def render(plotly_js: str, endpoint: str) -> bytes:
    page = _PAGE.replace("__ENDPOINT__", html.escape(endpoint)).replace("__PLOTLY__", plotly_js)
    return page.encode()
