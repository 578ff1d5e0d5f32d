"""Figures of a ``benchmarks/scale.py`` run, as PNG files in docs/img/ (needs matplotlib).

python benchmarks/scale.py --plot benchmarks/out/scale-<stamp>.json
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

IMG = Path(__file__).resolve().parent.parent / "docs" / "img"
COLOURS = {
    "bare": "#7f7f7f",
    "otel_sdk": "#bcbd22",
    "firsttoken_own": "#9ecae1",
    "firsttoken": "#1f77b4",
    "firsttoken_lean": "#17becf",
    "otel_genai": "#ff7f0e",
    "openllmetry": "#d62728",
    "openai_v2": "#9467bd",
}


def _med(rows: list[dict[str, Any]], key: Any) -> float:
    return statistics.median(key(r) for r in rows)


def plot(*paths: Path) -> None:
    """The figures of one run, or of several runs' rows together (the first run's commit)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.loads(p.read_text()) for p in paths]
    rows = [r for d in runs for r in d["rows"] if "failed" not in r]
    meta = runs[0]["meta"]
    loads = [r["load"] for r in rows]
    note = f"commit {meta['commit']}, {meta['start']} UTC, load average {min(loads):.1f}-{max(loads):.1f}"
    IMG.mkdir(parents=True, exist_ok=True)
    made = []

    lag = [r for r in rows if r["part"] == "lag"]
    if lag:
        variants = list(dict.fromkeys(r["variant"] for r in lag))
        concs = sorted({r["concurrency"] for r in lag})
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
        panels = (
            ("GC collections per 1000 calls", lambda r: r["gc_collections"] * 1000 / r["calls"]),
            ("GC time per 1000 calls (ms)", lambda r: r["gc_time_ms"] * 1000 / r["calls"]),
            ("loop lag p99 (ms)", lambda r: r["lag_p99_ms"]),
        )
        width = 0.8 / len(variants)
        for ax, (title, key) in zip(axes, panels, strict=True):
            for i, v in enumerate(variants):
                ys = []
                for c in concs:
                    rs = [r for r in lag if r["variant"] == v and r["concurrency"] == c]
                    ys.append(_med(rs, key) if rs else 0.0)
                ax.bar([j + i * width for j in range(len(concs))], ys, width, label=v, color=COLOURS.get(v))
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(concs))], [f"{c} streams" for c in concs])
            ax.set_title(title)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"asyncio app, concurrent streamed calls (median over runs); {note}", fontsize=10)
        fig.tight_layout()
        out = IMG / "scale-lag-gc.png"
        fig.savefig(out, dpi=90)
        made.append(out)

    card = [r for r in rows if r["part"] == "cardinality" and r["classes"] == 1]
    if card:
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
        panels = (
            ("Prometheus series", lambda r: r["prometheus_series"]),
            ("OTLP bytes per export", lambda r: r["bytes"]),
            ("instructions per export (millions)", lambda r: (r.get("instructions") or 0) / 1e6),
        )
        for ax, (title, key) in zip(axes, panels, strict=True):
            for v in dict.fromkeys(r["variant"] for r in card):
                rs = sorted((r for r in card if r["variant"] == v), key=lambda r: r["models"])
                ax.plot([r["models"] for r in rs], [key(r) for r in rs], marker="o", label=v, color=COLOURS.get(v))
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("models (x 2 providers)")
            ax.set_title(title)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"metric export after one streamed call per model and provider; {note}", fontsize=10)
        fig.tight_layout()
        out = IMG / "scale-cardinality.png"
        fig.savefig(out, dpi=90)
        made.append(out)

    thr = [r for r in rows if r["part"] == "throughput"]
    if thr:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        concs = sorted({r["concurrency"] for r in thr})
        panels = (("calls/s, client on one core (wall)", "calls_per_s"), ("calls per CPU-second", "calls_per_cpu_s"))
        for ax, (title, name) in zip(axes, panels, strict=True):
            for v in dict.fromkeys(r["variant"] for r in thr):
                xs, ys = [], []
                for c in concs:
                    got = [r[name] for r in thr if r["variant"] == v and r["concurrency"] == c]
                    if got:
                        xs.append(c)
                        ys.append(statistics.median(got))
                ax.plot(xs, ys, marker="o", label=v, color=COLOURS.get(v))
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrent streams (30 chunks each)")
            ax.set_title(title)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"throughput ceiling; {note}", fontsize=10)
        fig.tight_layout()
        out = IMG / "scale-throughput.png"
        fig.savefig(out, dpi=90)
        made.append(out)
    for p in made:
        print(f"wrote {p}")
