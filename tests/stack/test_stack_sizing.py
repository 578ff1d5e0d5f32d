"""benchmarks/collector_sizing.py cannot rot: its machinery (the demo recorded through a sink, the
pre-encoded requests with fresh ids, the generator, the real Collector 0.159 with the shipped
scale-out/sampler.yaml, its own counters) run at one low rate, and its numbers are sane.

About 12 s on an idle machine: the demo's recording of 3 user actions (~5 s) and one sampler point
(2.5 s of traffic, then the sampler's decisions, 1 s after each trace's root here).
"""

from __future__ import annotations

import importlib.util
import pickle
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from stack_tools import ROOT, binary


def sizing() -> ModuleType:
    path = ROOT / "benchmarks" / "collector_sizing.py"
    spec = importlib.util.spec_from_file_location("firsttoken_collector_sizing", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_sizing_benchmark_accounts_for_every_call_at_a_low_rate() -> None:
    binary("otelcol")
    cs = sizing()
    recording = cs.record(actions=3)
    shape = cs.describe(recording)
    # firsttoken's call spans carry dozens of attributes each; the metric export has points.
    assert shape["attributes_per_call_span"] > 20, shape
    assert shape["metric_points_per_export"] and shape["metric_points_per_export"][-1] > 0, shape

    temps = cs.templates(recording, 10, 2)
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    first, again = (ExportTraceServiceRequest.FromString(cs.fresh(temps[0])) for _ in range(2))
    spans = [s for rs in first.resource_spans for ss in rs.scope_spans for s in ss.spans]
    spans_again = [s for rs in again.resource_spans for ss in rs.scope_spans for s in ss.spans]
    roots = {s.span_id: s.trace_id for s in spans if not s.parent_span_id}
    assert len(roots) == 10 and len(set(roots.values())) == 10, "one trace per call"
    for span in spans:
        if span.parent_span_id:  # a call's child spans stay in its trace, under its span
            assert roots[span.parent_span_id] == span.trace_id
    assert not {s.trace_id for s in spans} & {s.trace_id for s in spans_again}, "fresh trace ids per send"

    with tempfile.TemporaryDirectory(prefix="firsttoken-sizing-test-") as tmpdir:
        tmp = Path(tmpdir)
        template_file = tmp / "templates.pickle"
        template_file.write_bytes(pickle.dumps(temps))
        # Decided 1 s after a trace's root instead of the shipped 5 s, to keep the test short.
        quick = ("processors::tail_sampling::decision_wait_after_root_received: 1s",)
        r = cs.point("sampler", 1, 100, 2.0, 0.5, 10, template_file, tmp, overrides=quick)
    calls = r["generator"]["sent"]
    assert calls == 250, r["generator"]  # 2.5 s at 100 calls/s, all acknowledged
    # Every call reached the sampler as one new trace and was decided: kept or not, none dropped early.
    assert r["new_traces"] == calls, r
    assert r["sampled_traces"] + r["not_sampled_traces"] == calls, r
    assert r["dropped_too_early"] == r["refused_spans"] == r["failed_spans"] == r["enqueue_failed_spans"] == 0, r
    assert r["traces_held_at_end"] == 0, r
    # The baseline keeps about 10 % and the errors and slow calls more; not all.
    assert 0 < r["sampled_traces"] < calls, r
    assert r["received_spans"] >= calls and r["exported_spans"] > 0, r
    assert r["sustained"], r
    # Sane resource figures: the Collector used some CPU, not more than the core it is pinned to.
    assert 0 < r["collector_cpu_share"] <= 1.05, r
    assert 20 * 2**20 < r["rss_bytes"] < 2 * 2**30, r
