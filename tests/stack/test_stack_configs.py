"""Collector, compose, Tempo and Grafana provisioning, checked structurally (Docker cannot run here).

No otelcol binary can be had on this machine (docs/stack.md), so `otelcol validate` is replaced by
what it would catch that matters here: every pipeline component is defined and used, component
types are the 2026 (v0.159) names, memory_limiter comes first, metrics are never tail-sampled or
routed by trace id, and every host:port one file names is served by the file it points at.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from stack_tools import DATASOURCES, ROOT, generator, load_yaml, need, run, selectors, shipped_exprs, targets

from firsttoken import semconv as sc

COLLECTOR = ROOT / "collector-config"
SINGLE = COLLECTOR / "otelcol.yaml"
ROUTER = COLLECTOR / "scale-out" / "router.yaml"
SAMPLER = COLLECTOR / "scale-out" / "sampler.yaml"
COLLECTOR_CONFIGS = [SINGLE, ROUTER, SAMPLER]
COMPOSE = ROOT / "docker-compose.yml"
COMPOSE_JAEGER = ROOT / "docker-compose.jaeger.yml"
JAEGER = ROOT / "jaeger" / "jaeger.yaml"
JAEGER_OVERLAY = COLLECTOR / "otelcol-jaeger.yaml"
THANOS_RECEIVE_OVERLAY = COLLECTOR / "otelcol-thanos-receive.yaml"
# Overlays merged onto otelcol.yaml (--config=otelcol.yaml --config=<overlay>): not complete alone.
COLLECTOR_OVERLAYS = [JAEGER_OVERLAY, THANOS_RECEIVE_OVERLAY]
TEMPO = ROOT / "grafana" / "tempo" / "tempo.yaml"

# Component type names of collector-contrib v0.159 after the 2026 lower_snake_case renames.
CURRENT_TYPES = {
    "receivers": {"otlp"},
    "processors": {"memory_limiter", "tail_sampling", "batch", "transform"},
    "exporters": {"otlp_grpc", "otlp_http", "load_balancing", "prometheus_remote_write", "prometheus", "debug"},
    "extensions": {"health_check"},
    "connectors": {"span_metrics"},
}
# Deprecated aliases: they still load (with a warning) but will go.
OLD_NAMES = {"otlphttp", "loadbalancing", "prometheusremotewrite", "spanmetrics", "memorylimiter", "tailsampling"}
COLLECTOR_IMAGE = "otel/opentelemetry-collector-contrib:0.159.0"


def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE)


def kind(component_id: str) -> str:
    return component_id.split("/")[0]


def host_port(endpoint: str) -> tuple[str, int]:
    if "://" not in endpoint:
        endpoint = "tcp://" + endpoint
    url = urlparse(endpoint)
    assert url.hostname and url.port, endpoint
    return url.hostname, url.port


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: p.name)
def test_collector_pipelines_are_complete_and_current(path: Path) -> None:
    config = load_yaml(path)
    service = config["service"]
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for name, pipeline in service["pipelines"].items():
        signal = name.split("/")[0]
        assert signal in ("traces", "metrics", "logs"), name
        assert pipeline["receivers"] and pipeline["exporters"], name
        for section in used:
            for component in pipeline.get(section, []):
                assert component in (config.get(section) or {}), f"{path.name}: {name} uses undefined {component}"
                used[section].add(component)
        processors = pipeline.get("processors", [])
        assert processors and processors[0] == "memory_limiter", f"{path.name}: {name}: memory_limiter must be first"
        if signal == "metrics":
            # Every call counts: metrics are never sampled and never routed by trace id.
            assert not {kind(p) for p in processors} & {"tail_sampling", "probabilistic_sampler"}, name
            assert "load_balancing" not in {kind(e) for e in pipeline["exporters"]}, name
    for section, ids in used.items():
        assert set(config.get(section) or {}) == ids, f"{path.name}: defined but unused {section}"
    assert set(service["extensions"]) == set(config["extensions"])
    for section in CURRENT_TYPES:
        for component in config.get(section) or {}:
            assert kind(component) not in OLD_NAMES, f"{path.name}: deprecated name {component}"
            assert kind(component) in CURRENT_TYPES[section], f"{path.name}: unknown {section[:-1]} {component}"
    assert host_port(config["extensions"]["health_check"]["endpoint"])[1] == 13133
    header = path.read_text().split("\n\n")[0]
    assert COLLECTOR_IMAGE in header, f"{path.name}: the header should name the pinned image"


def test_tail_sampling_policies_are_generated_from_the_targets() -> None:
    """Both configs hold exactly what firsttoken stack generate writes from the targets of slos.yml."""
    sampling = generator("sampling")
    for path in (SINGLE, SAMPLER):
        text = path.read_text()
        assert sampling.rewrite(text, targets()) == text, f"run firsttoken stack generate: {path.name} differs"
    assert load_yaml(SAMPLER)["processors"]["tail_sampling"] == load_yaml(SINGLE)["processors"]["tail_sampling"]
    # The attributes the policies read are the ones firsttoken sets on its call span.
    assert sampling.TRAFFIC_CLASS == sc.FT_TRAFFIC_CLASS
    assert sampling.TIME_TO_FIRST_TOKEN == sc.FT_TIME_TO_FIRST_TOKEN
    assert sampling.TIME_PER_OUTPUT_TOKEN == sc.FT_TIME_PER_OUTPUT_TOKEN


def test_tail_sampling_waits_long_enough_and_keeps_a_baseline() -> None:
    single = load_yaml(SINGLE)["processors"]["tail_sampling"]
    wait = int(single["decision_wait"].rstrip("s"))
    assert wait >= 120, "decision_wait must outlast the longest streamed generation"
    assert int(single["decision_wait_after_root_received"].rstrip("s")) < wait
    baseline = [p for p in single["policies"] if p["type"] == "probabilistic"]
    assert len(baseline) == 1 and 0 < baseline[0]["probabilistic"]["sampling_percentage"] < 100


# -- a small model of the tail sampler, for the policy types and OTTL conditions the generator writes --

_CLAUSE = re.compile(r'span\.attributes\["([^"]+)"\] (==|!=|>) ("[^"]*"|nil|[0-9.]+)')
Span = dict[str, Any]  # attributes, plus "_status" and "_start"/"_end" (seconds)


def ottl_matches(condition: str, span: Span) -> bool:
    for clause in condition.split(" and "):
        match = _CLAUSE.fullmatch(clause)
        assert match, f"the model does not read {clause!r}"
        key, op, literal = match.groups()
        value = span.get(key)
        expected: Any = None if literal == "nil" else literal.strip('"') if literal.startswith('"') else float(literal)
        if op == "==" and value != expected:
            return False
        if op == "!=" and value == expected:
            return False
        if op == ">" and not (isinstance(value, (int, float)) and value > expected):
            return False
    return True


def keeps(policy: dict[str, Any], trace: list[Span]) -> bool:
    kind = policy["type"]
    if kind == "status_code":
        return any(s.get("_status") in policy["status_code"]["status_codes"] for s in trace)
    if kind == "ottl_condition":
        config = policy["ottl_condition"]
        assert set(config) == {"error_mode", "span"} and config["error_mode"] == "ignore"
        return any(ottl_matches(c, s) for c in config["span"] for s in trace)
    if kind == "latency":
        duration = max(s["_end"] for s in trace) - min(s["_start"] for s in trace)
        return duration * 1000 > policy["latency"]["threshold_ms"]
    if kind == "and":
        return all(keeps(p, trace) for p in policy["and"]["and_sub_policy"])
    raise AssertionError(f"the model does not know policy type {kind}")


def kept_by(trace: list[Span]) -> list[str]:
    """The non-baseline policies that keep this trace."""
    policies = load_yaml(SINGLE)["processors"]["tail_sampling"]["policies"]
    return [p["name"] for p in policies if p["type"] != "probabilistic" and keeps(p, trace)]


def call_trace(traffic_class: str | None, *, duration: float, ttft: float | None = None) -> list[Span]:
    """A call span as firsttoken records it (a TTFT only when streamed), with a phase child span."""
    call: Span = {sc.GEN_AI_OPERATION_NAME: "chat", "_status": "UNSET", "_start": 100.0, "_end": 100.0 + duration}
    if traffic_class is not None:
        call[sc.FT_TRAFFIC_CLASS] = traffic_class
    if ttft is not None:
        call[sc.FT_TIME_TO_FIRST_TOKEN] = ttft
        call[sc.FT_TIME_PER_OUTPUT_TOKEN] = 0.02
    child: Span = {sc.FT_PHASE: "server_wait", "_start": 100.01, "_end": 100.0 + duration / 2}
    return [call, child]


def classes_to_try() -> list[str | None]:
    listed = {c for by_class in targets().values() for c in by_class if c}
    return [*sorted(listed), "reports", None]  # "reports": a class targets.yml does not list


def target_of(record: str, traffic_class: str | None) -> float:
    by_class = targets()[record]
    return by_class.get(traffic_class or "", by_class[""])


@pytest.mark.parametrize("traffic_class", classes_to_try(), ids=str)
def test_every_call_over_a_target_keeps_its_trace(traffic_class: str | None) -> None:
    """Streamed TTFT over the class's p95 target, any call over its end-to-end target: kept.

    Just under the targets nothing but the baseline keeps it (the sampler follows the targets,
    not a looser or stricter number of its own).
    """
    ttft_target = min(target_of(r, traffic_class) for r in targets() if "ttft" in r)
    e2e_target = target_of("llm:target:e2e_p99_seconds", traffic_class)
    assert ttft_target == target_of("llm:target:ttft_p95_seconds", traffic_class)
    over, under = 1.01, 0.99
    assert kept_by(call_trace(traffic_class, duration=ttft_target * over + 1, ttft=ttft_target * over))
    assert not kept_by(call_trace(traffic_class, duration=ttft_target * under + 1, ttft=ttft_target * under))
    # Non-streamed (no TTFT attribute), and streamed with a quick first token.
    assert kept_by(call_trace(traffic_class, duration=e2e_target * over))
    assert kept_by(call_trace(traffic_class, duration=e2e_target * over, ttft=0.2))
    assert not kept_by(call_trace(traffic_class, duration=e2e_target * under))
    assert not kept_by(call_trace(traffic_class, duration=e2e_target * under, ttft=0.2))
    # Errors are always kept.
    failed = call_trace(traffic_class, duration=0.1)
    failed[0]["_status"] = "ERROR"
    assert kept_by(failed) == ["errors"]


def test_scale_out_routes_traces_by_trace_id_to_the_samplers() -> None:
    router = load_yaml(ROUTER)
    sampler = load_yaml(SAMPLER)
    lb = router["exporters"]["load_balancing"]
    assert lb["routing_key"] == "traceID"
    assert router["service"]["pipelines"]["traces"]["exporters"] == ["load_balancing"]
    assert "tail_sampling" not in router.get("processors", {}), "the routing tier is stateless"
    port = lb["resolver"]["dns"]["port"]
    assert host_port(sampler["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])[1] == port
    assert set(sampler["service"]["pipelines"]) == {"traces"}
    assert router["exporters"]["otlp_http/prometheus"] == load_yaml(SINGLE)["exporters"]["otlp_http/prometheus"]
    assert sampler["exporters"]["otlp_grpc/tempo"] == load_yaml(SINGLE)["exporters"]["otlp_grpc/tempo"]


def test_compose_images_are_pinned() -> None:
    services = compose()["services"]
    for name, service in services.items():
        image = service["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and re.fullmatch(r"v?\d+\.\d+(\.\d+)?(-[a-z0-9]+)*", tag), f"{name}: unpinned image {image}"
    assert services["otelcol"]["image"] == COLLECTOR_IMAGE


def test_compose_mounts_exist_and_commands_point_at_them() -> None:
    services = compose()["services"]
    named = set(compose().get("volumes", {}))
    mounts: dict[str, dict[str, Path]] = {}
    for name, service in services.items():
        mounts[name] = {}
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            if source in named:
                continue
            path = (ROOT / source).resolve()
            assert path.exists(), f"{name}: {source} does not exist"
            mounts[name][target] = path
    assert mounts["otelcol"]["/etc/otelcol/config.yaml"] == SINGLE
    assert "--config=/etc/otelcol/config.yaml" in services["otelcol"]["command"]
    prom = services["prometheus"]["command"]
    assert "--web.enable-otlp-receiver" in prom and "--enable-feature=exemplar-storage" in prom
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom
    assert mounts["prometheus"]["/etc/prometheus/rules"] == ROOT / "prometheus" / "rules"
    assert load_yaml(ROOT / "prometheus" / "prometheus.yml")["rule_files"] == ["rules/*.yml"]
    assert "-config.file=/etc/tempo/tempo.yaml" in services["tempo"]["command"]
    assert mounts["tempo"]["/etc/tempo/tempo.yaml"] == TEMPO
    am = services["alertmanager"]
    assert mounts["alertmanager"]["/etc/alertmanager/alertmanager.yml"] == (
        ROOT / "prometheus" / "alertmanager" / "alertmanager.yml"
    )
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in am["command"]
    # Grafana: provisioning and the dashboards folder the provider reads.
    provider = load_yaml(ROOT / "grafana" / "provisioning" / "dashboards" / "dashboards.yaml")["providers"][0]
    dash_dir = provider["options"]["path"]
    assert mounts["grafana"][dash_dir] == ROOT / "grafana" / "dashboards"
    assert mounts["grafana"]["/etc/grafana/provisioning"] == ROOT / "grafana" / "provisioning"
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(dash_dir + "/") and (ROOT / "grafana" / "dashboards" / Path(home).name).exists()
    # The load generator: the package installed from this checkout, the demo in continuous mode.
    loadgen = services["loadgen"]
    assert {"/src/pyproject.toml", "/src/src"} <= set(mounts["loadgen"])
    script = " ".join(loadgen["command"])
    assert "[all]" in script and "firsttoken demo --continuous" in script


def published(service: dict[str, Any]) -> dict[int, int]:
    """container port -> host port."""
    out = {}
    for mapping in service.get("ports", []):
        parts = str(mapping).split(":")
        assert parts[0] == "127.0.0.1", f"{mapping}: publish on loopback only"
        out[int(parts[-1])] = int(parts[-2])
    return out


def test_ports_line_up_across_compose_collector_prometheus_tempo_and_grafana() -> None:
    services = compose()["services"]
    collector = load_yaml(SINGLE)
    tempo = load_yaml(TEMPO)
    prometheus = load_yaml(ROOT / "prometheus" / "prometheus.yml")
    # Apps (and the load generator) reach the collector's OTLP receivers.
    grpc = host_port(collector["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])
    http = host_port(collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"])
    assert grpc[0] == http[0] == "0.0.0.0"
    assert {grpc[1], http[1], 13133} <= set(published(services["otelcol"]))
    env = services["loadgen"]["environment"]
    assert host_port(env["OTEL_EXPORTER_OTLP_ENDPOINT"]) == ("otelcol", http[1])
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    # Collector -> Tempo and Prometheus.
    tempo_grpc = host_port(tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])
    assert host_port(collector["exporters"]["otlp_grpc/tempo"]["endpoint"]) == ("tempo", tempo_grpc[1])
    prom_url = urlparse(collector["exporters"]["otlp_http/prometheus"]["metrics_endpoint"])
    assert (prom_url.hostname, prom_url.port, prom_url.path) == ("prometheus", 9090, "/api/v1/otlp/v1/metrics")
    assert 9090 in published(services["prometheus"])
    # Prometheus scrapes the collector's own telemetry and alerts to Alertmanager.
    telemetry = collector["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    targets = {t for job in prometheus["scrape_configs"] for sc_ in job["static_configs"] for t in sc_["targets"]}
    assert f"otelcol:{telemetry['port']}" in targets
    am_targets = prometheus["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am_targets == ["alertmanager:9093"] and 9093 in published(services["alertmanager"])
    # Grafana's datasources point at the services on their ports.
    ds = {d["uid"]: d for d in load_yaml(DATASOURCES)["datasources"]}
    assert host_port(ds["prometheus"]["url"]) == ("prometheus", 9090)
    assert host_port(ds["tempo"]["url"]) == ("tempo", tempo["server"]["http_listen_port"])
    assert host_port(ds["alertmanager"]["url"]) == ("alertmanager", 9093)
    assert tempo["server"]["http_listen_port"] in published(services["tempo"])
    assert 3000 in published(services["grafana"])


def test_datasources_link_exemplars_to_tempo_and_traces_to_metrics() -> None:
    ds = {d["uid"]: d for d in load_yaml(DATASOURCES)["datasources"]}
    assert {ds[u]["type"] for u in ds} == {"prometheus", "tempo", "jaeger", "alertmanager"}
    links = ds["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    # Prometheus' OTLP receiver stores the exemplar's trace id under the label trace_id. Tempo by
    # datasource; Jaeger by a URL (a datasource link would be a TraceQL query Jaeger ignores; what the
    # URL opens is checked against the real Jaeger in test_stack_real.py).
    assert [(link["name"], link.get("datasourceUid")) for link in links] == [("trace_id", "tempo"), ("trace_id", None)]
    assert links[1]["url"].startswith("/explore?") and "$${__value.raw}" in links[1]["url"]
    t2m = ds["tempo"]["jsonData"]["tracesToMetrics"]
    assert t2m["datasourceUid"] == "prometheus"
    assert {t["key"] for t in t2m["tags"]} <= {sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_PROVIDER_NAME}
    # From a Jaeger span, the same metrics as from a Tempo span.
    assert ds["jaeger"]["jsonData"]["tracesToMetrics"] == t2m
    assert ds["prometheus"]["jsonData"]["alertmanagerUid"] == "alertmanager"


def test_the_jaeger_override_wires_the_collector_jaeger_and_grafana() -> None:
    """docker-compose.jaeger.yml: the Collector runs the shipped config plus the Jaeger overlay, which
    sends the same tail-sampled traces to Tempo and to Jaeger's OTLP port; Grafana's Jaeger datasource
    points at Jaeger's query port; the image is the Jaeger scripts/stack/build.sh builds."""
    override = load_yaml(COMPOSE_JAEGER)["services"]
    jaeger = load_yaml(JAEGER)
    assert override["jaeger"]["image"] == "jaegertracing/jaeger:2.13.0"
    assert "./jaeger/jaeger.yaml:/etc/jaeger/config.yaml:ro" in override["jaeger"]["volumes"]
    assert override["jaeger"]["command"] == ["--config=/etc/jaeger/config.yaml"]
    base_command = compose()["services"]["otelcol"]["command"]
    assert override["otelcol"]["command"] == [*base_command, "--config=/etc/otelcol/jaeger.yaml"]
    assert "./collector-config/otelcol-jaeger.yaml:/etc/otelcol/jaeger.yaml:ro" in override["otelcol"]["volumes"]
    overlay = load_yaml(JAEGER_OVERLAY)
    single = load_yaml(SINGLE)
    # The overlay's list replaces the single config's: it must keep Tempo's exporter first.
    assert overlay["service"]["pipelines"]["traces"]["exporters"] == [
        *single["service"]["pipelines"]["traces"]["exporters"],
        "otlp_grpc/jaeger",
    ]
    otlp_port = host_port(jaeger["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])[1]
    assert host_port(overlay["exporters"]["otlp_grpc/jaeger"]["endpoint"]) == ("jaeger", otlp_port)
    query_port = host_port(jaeger["extensions"]["jaeger_query"]["http"]["endpoint"])[1]
    ds = {d["uid"]: d for d in load_yaml(DATASOURCES)["datasources"]}
    assert host_port(ds["jaeger"]["url"]) == ("jaeger", query_port)
    assert query_port in published(override["jaeger"])
    # One storage backend, the one the exporter writes and the query extension reads.
    (backend,) = jaeger["extensions"]["jaeger_storage"]["backends"]
    assert jaeger["exporters"]["jaeger_storage_exporter"]["trace_storage"] == backend
    assert jaeger["extensions"]["jaeger_query"]["storage"]["traces"] == backend


def test_the_thanos_receive_overlay_sets_every_scope_label_the_shipped_queries_select() -> None:
    """otelcol-thanos-receive.yaml: the metrics pipeline keeps otelcol.yaml's receivers and
    memory_limiter, adds the transform, and exports to Receive's OTLP path only; the transform sets each
    otel_scope_* label a shipped query selects (tests/stack/test_stack_thanos_receive.py runs it)."""
    overlay = load_yaml(THANOS_RECEIVE_OVERLAY)
    single = load_yaml(SINGLE)["service"]["pipelines"]["metrics"]
    metrics = overlay["service"]["pipelines"]["metrics"]
    assert metrics["receivers"] == single["receivers"]
    assert metrics["processors"] == [*single["processors"], "transform/otel_scope"]
    assert metrics["exporters"] == ["otlp_http/thanos_receive"]
    url = urlparse(overlay["exporters"]["otlp_http/thanos_receive"]["metrics_endpoint"])
    assert (url.port, url.path) == (19291, "/api/v1/otlp")
    (block,) = overlay["processors"]["transform/otel_scope"]["metric_statements"]
    assert block["context"] == "datapoint"
    set_labels = {m for s in block["statements"] for m in re.findall(r'datapoint\.attributes\["(otel_scope_\w+)"\]', s)}
    selected = {label for _, expr in shipped_exprs() for _, ms in selectors(expr) for label, _, _ in ms}
    scope_selected = {label for label in selected if label.startswith("otel_scope_")}
    assert scope_selected, "no shipped query selects the scope: is this overlay still needed?"
    assert scope_selected <= set_labels == {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}


def test_stated_image_tags_match_compose() -> None:
    """The pinned tags named in file headers and docs are the ones compose runs."""
    images = {s["image"] for s in compose()["services"].values()}
    images |= {s["image"] for s in load_yaml(COMPOSE_JAEGER)["services"].values() if "image" in s}
    texts = {
        "prometheus.yml": (ROOT / "prometheus" / "prometheus.yml").read_text(),
        "alertmanager.yml": (ROOT / "prometheus" / "alertmanager" / "alertmanager.yml").read_text(),
        "tempo.yaml": TEMPO.read_text(),
        "docs/stack.md": (ROOT / "docs" / "stack.md").read_text(),
    }
    for name, text in texts.items():
        for stated in re.findall(r"\b((?:[\w.-]+/)?[\w.-]+/[\w.-]+:v?\d+\.\d+\.\d+)", text):
            assert stated in images, f"{name} names {stated}, compose runs {sorted(images)}"
    for image in images - {compose()["services"]["loadgen"]["image"]}:
        assert image in texts["docs/stack.md"], f"docs/stack.md does not state {image}"


# -- every shipped config against the upstream source at the pinned tags (tests/stack/upstream/) --

UPSTREAM = ROOT / "tests" / "stack" / "upstream"
TEMPO_KEYS = UPSTREAM / "tempo-v3.0.3.yaml"
COLLECTOR_KEYS = UPSTREAM / "otelcol-contrib-0.159.0.yaml"
PROMETHEUS_KEYS = UPSTREAM / "prometheus-v3.14.0.yaml"
IMAGES = UPSTREAM / "images.yaml"
CHECKED_SECTION = "## Checked against upstream"


def images() -> dict[str, dict[str, Any]]:
    facts: dict[str, dict[str, Any]] = load_yaml(IMAGES)["images"]
    return facts


def test_every_image_tag_was_read_upstream() -> None:
    """A bumped image tag fails here until its upstream files are read again and the lists updated."""
    running = {s["image"] for s in compose()["services"].values()}
    assert set(images()) == running, "tests/stack/upstream/images.yaml does not describe the images compose runs"
    schemas = {
        load_yaml(TEMPO_KEYS)["tag"],
        load_yaml(COLLECTOR_KEYS)["image"],
        load_yaml(PROMETHEUS_KEYS)["prometheus"]["image"],
        load_yaml(PROMETHEUS_KEYS)["alertmanager"]["image"],
    }
    assert schemas <= running, f"key lists read for images compose does not run: {schemas - running}"
    text = (ROOT / "docs" / "stack.md").read_text()
    assert CHECKED_SECTION in text
    section = text.split(CHECKED_SECTION, 1)[1].split("\n## ", 1)[0]
    stated = set(re.findall(r"`((?:[\w.-]+/)*[\w.-]+:v?\d[\w.-]*)`", section))
    assert stated == running, (
        f"docs/stack.md ({CHECKED_SECTION}) lists {sorted(stated)}, compose runs {sorted(running)}"
    )


def unknown_keys(config: Any, schema: Any, where: str = "") -> Iterator[str]:
    """Where `config` leaves the key tree `schema` (the format of tests/stack/upstream/tempo-*.yaml)."""
    if schema == "any":
        return
    if schema == "scalar":
        if isinstance(config, dict) or (isinstance(config, list) and any(isinstance(i, (dict, list)) for i in config)):
            yield f"{where}: a value is expected"
        return
    if schema == "struct":
        yield f"{where}: the keys of this struct were not read upstream"
        return
    if not isinstance(config, dict):
        yield f"{where}: a mapping is expected"
        return
    for key, value in config.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in schema:
            yield f"{path}: no such key"
        else:
            yield from unknown_keys(value, schema[key], path)


def test_tempo_config_loads_under_tempo_3s_strict_loader() -> None:
    schema = load_yaml(TEMPO_KEYS)
    assert compose()["services"]["tempo"]["image"] == schema["tag"]
    assert list(unknown_keys(load_yaml(TEMPO), schema["keys"])) == []
    # What Tempo 2 accepted and Tempo 3 refuses is caught.
    old = {"compactor": {"compaction": {"block_retention": "72h"}}}
    assert list(unknown_keys(old, schema["keys"])) == ["compactor: no such key"]
    assert list(unknown_keys({"storage": {"trace": {"wal": {"path": "/x", "encoding": "snappy"}}}}, schema["keys"]))
    # Tempo reads only -config.file from the command line here (cmd/tempo/main.go).
    args = compose()["services"]["tempo"]["command"]
    assert [a.split("=")[0] for a in args] == ["-config.file"]


def key_paths(node: Any, prefix: str = "") -> set[str]:
    """Dotted key paths down to values; `[]` for the items of a list of mappings."""
    if isinstance(node, dict):
        if not node:
            return {prefix}
        paths: set[str] = set()
        for key, value in node.items():
            paths |= key_paths(value, f"{prefix}.{key}" if prefix else str(key))
        return paths
    if isinstance(node, list) and any(isinstance(item, dict) for item in node):
        return set().union(*(key_paths(item, prefix + "[]") for item in node))
    return {prefix}


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS + COLLECTOR_OVERLAYS, ids=lambda p: p.name)
def test_collector_keys_exist_upstream(path: Path) -> None:
    known = load_yaml(COLLECTOR_KEYS)
    config = load_yaml(path)
    for section in ("receivers", "processors", "exporters", "extensions"):
        for component, body in (config.get(section) or {}).items():
            allowed = known["core"].get(section, {}).get(kind(component)) or known["contrib"].get(section, {}).get(
                kind(component)
            )
            assert allowed, f"{path.name}: {section} {component}: its keys were not read upstream"
            unknown = key_paths(body) - set(allowed)
            assert not unknown, f"{path.name}: {component}: keys not found upstream: {sorted(unknown)}"
    service = {re.sub(r"^pipelines\.[^.]+\.", "pipelines.*.", p) for p in key_paths(config["service"])}
    assert service <= set(known["core"]["service"]), sorted(service - set(known["core"]["service"]))
    command = compose()["services"]["otelcol"]["command"]
    assert {a.lstrip("-").split("=")[0] for a in command} <= set(known["core"]["flags"])


def test_prometheus_keys_and_flags_exist_upstream() -> None:
    known = load_yaml(PROMETHEUS_KEYS)
    config = load_yaml(ROOT / "prometheus" / "prometheus.yml")

    def check(node: dict[str, Any], schema: Any, where: str) -> None:
        if schema == "promtool":  # checked by test_stack_rules.py's promtool check config
            return
        if isinstance(schema, list):
            assert set(node) <= set(schema), f"{where}: not in Prometheus 3: {sorted(set(node) - set(schema))}"
            return
        for key, value in node.items():
            assert key in schema, f"{where}{key}: not in Prometheus 3"
            check(value, schema[key], f"{where}{key}.")

    check(config, known["prometheus"]["keys"], "")
    assert config["otlp"]["translation_strategy"] in known["prometheus"]["translation_strategies"]
    # The OTLPConfig fields of Go type bool: YAML must give true or false, not a string.
    for key in set(config["otlp"]) & set(known["prometheus"]["booleans"]):
        assert isinstance(config["otlp"][key], bool), f"otlp.{key} is a boolean"
    for service, name in (("prometheus", "prometheus"), ("alertmanager", "alertmanager")):
        args = compose()["services"][service]["command"]
        flags = {a.lstrip("-").split("=")[0] for a in args}
        assert flags <= set(known[name]["flags"]), f"{service}: unknown flags {flags - set(known[name]['flags'])}"
        assert compose()["services"][service]["image"] == known[name]["image"]
    features = {a.split("=", 1)[1] for a in compose()["services"]["prometheus"]["command"] if "enable-feature" in a}
    assert features <= set(known["prometheus"]["features"])


_DURATION = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def seconds(duration: str) -> int:
    """A Prometheus duration of one unit (``28d``, ``30d``, ``6h``) in seconds."""
    match = re.fullmatch(r"(\d+)([mhdwy])", duration)
    assert match, f"not a one-unit Prometheus duration: {duration!r}"
    return int(match[1]) * _DURATION[match[2]]


def test_compose_prometheus_keeps_the_whole_slo_window() -> None:
    """Prometheus keeps 15 days unless told otherwise: the 28-day SLO budget and burn rates would
    silently average only what is left. Compose's retention must cover the window slos.yml sets."""
    window = load_yaml(ROOT / "prometheus" / "slos.yml")["window"]
    retention = [
        a.split("=", 1)[1]
        for a in compose()["services"]["prometheus"]["command"]
        if a.startswith("--storage.tsdb.retention.time=")
    ]
    assert retention, "docker-compose.yml's prometheus keeps the default 15 days: set --storage.tsdb.retention.time"
    assert seconds(retention[0]) >= seconds(window), f"retention {retention[0]} < the SLO window {window}"


def program_of(service: dict[str, Any], facts: dict[str, Any]) -> str | None:
    """The program a service's container starts."""
    entrypoint = service.get("entrypoint")
    if entrypoint:
        return str(entrypoint[0] if isinstance(entrypoint, list) else entrypoint.split()[0])
    if facts.get("entrypoint"):
        return str(facts["entrypoint"])
    command = service.get("command")
    return str(command[0] if isinstance(command, list) else command.split()[0]) if command else None


def has(facts: dict[str, Any], program: str) -> bool:
    return program in facts["executables"] or any(Path(e).name == program for e in facts["executables"])


def test_no_service_needs_what_its_image_lacks() -> None:
    """A shell, a healthcheck command, a one-shot's program, a writable volume: the image has them."""
    for name, service in compose()["services"].items():
        facts = images()[service["image"]]
        program = program_of(service, facts)
        assert program and has(facts, program), f"{name}: {service['image']} has no {program}"
        if Path(program).name in ("sh", "bash"):
            assert facts["shell"], f"{name}: {service['image']} has no shell"
        healthcheck = service.get("healthcheck", {}).get("test")
        if healthcheck:
            if isinstance(healthcheck, str) or healthcheck[0] == "CMD-SHELL":
                assert facts["shell"], f"{name}: a CMD-SHELL healthcheck, but {service['image']} has no shell"
            else:
                assert healthcheck[0] == "CMD" and has(facts, healthcheck[1]), f"{name}: no {healthcheck[1]}"
        user = str(service.get("user", facts["user"]))
        named = set(compose().get("volumes") or {})
        for volume in service.get("volumes", []):
            source, target, *mode = volume.split(":")
            if source in named and "ro" not in mode and user not in ("root", "0"):
                assert target in facts.get("owned", []), f"{name}: {target} is not writable by {user}"


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {dep: spec.get("condition", "service_started") for dep, spec in deps.items()}


def test_every_depends_on_chain_can_complete() -> None:
    services = compose()["services"]
    for name, service in services.items():
        for dep, condition in depends_on(service).items():
            assert dep in services, f"{name} depends on {dep}, which is not a service"
            target = services[dep]
            if condition == "service_completed_successfully":
                assert target.get("restart", "no") in ("no", "on-failure"), f"{dep} is not a one-shot job"
            elif condition == "service_healthy":
                assert target.get("healthcheck", {}).get("test"), (
                    f"{name} waits for {dep} to be healthy: no healthcheck"
                )
            else:
                assert condition == "service_started", f"{name}: {condition}"
    # No cycle: every service gets a start-up step.
    step: dict[str, int] = {}
    while len(step) < len(services):
        ready = {
            n: 1 + max((step[d] for d in depends_on(s)), default=-1)
            for n, s in services.items()
            if n not in step and all(d in step for d in depends_on(s))
        }
        assert ready, f"depends_on cycle among {sorted(set(services) - set(step))}"
        step.update(ready)


def test_docker_compose_validates_the_file(tmp_path: Path) -> None:
    """Debian's docker-compose (1.29) checks the file against its Compose schema (without `name:`, newer)."""
    binary = need("docker-compose")
    text = COMPOSE.read_text()
    assert re.search(r"^name: firsttoken$", text, re.M)
    copy = tmp_path / "docker-compose.yml"
    copy.write_text(re.sub(r"^name: .*\n", "", text, flags=re.M))
    result = run([binary, "--project-directory", str(ROOT), "-f", str(copy), "config", "-q"])
    assert result.returncode == 0, result.stdout + result.stderr
    # With the Jaeger override merged over it.
    result = run([binary, "--project-directory", str(ROOT), "-f", str(copy), "-f", str(COMPOSE_JAEGER), "config", "-q"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_interval_for_export_scrape_and_grafana() -> None:
    """The apps' export interval, Prometheus' scrape interval and Grafana's timeInterval agree (15 s)."""
    env = compose()["services"]["loadgen"]["environment"]
    export_ms = int(env["OTEL_METRIC_EXPORT_INTERVAL"])
    scrape = load_yaml(ROOT / "prometheus" / "prometheus.yml")["global"]["scrape_interval"]
    ds = {d["uid"]: d for d in load_yaml(DATASOURCES)["datasources"]}
    assert f"{export_ms // 1000}s" == scrape == ds["prometheus"]["jsonData"]["timeInterval"] == "15s"
    # The dashboards (firsttoken.stack.dashboards) may pin their own minimum interval: the same one.
    for dashboard in (ROOT / "grafana" / "dashboards").glob("*.json"):
        pinned = set(re.findall(r'"(?:timeInterval|interval)": "(\d+[smh])"', dashboard.read_text()))
        assert pinned <= {"15s"}, f"{dashboard.name}: {pinned}"


# The component each module of collector-config/builder.yaml provides (checked against the built
# Collector's `components` in test_stack_real.py).
BUILDER_COMPONENTS = {
    "healthcheckextension": ("extensions", "health_check"),
    "otlpreceiver": ("receivers", "otlp"),
    "memorylimiterprocessor": ("processors", "memory_limiter"),
    "tailsamplingprocessor": ("processors", "tail_sampling"),
    "transformprocessor": ("processors", "transform"),
    "otlpexporter": ("exporters", "otlp_grpc"),
    "otlphttpexporter": ("exporters", "otlp_http"),
    "loadbalancingexporter": ("exporters", "load_balancing"),
}


def builder_components() -> set[tuple[str, str]]:
    manifest = load_yaml(COLLECTOR / "builder.yaml")
    out = set()
    for kind in ("extensions", "receivers", "processors", "exporters"):
        for entry in manifest.get(kind, []):
            module = entry["gomod"].split()[0].rsplit("/", 1)[1]
            assert module in BUILDER_COMPONENTS, f"builder.yaml: {module} is not in BUILDER_COMPONENTS"
            assert BUILDER_COMPONENTS[module][0] == kind, module
            out.add(BUILDER_COMPONENTS[module])
    return out


def test_the_collector_manifest_has_exactly_the_components_the_configs_use() -> None:
    used = set()
    for path in COLLECTOR_CONFIGS + COLLECTOR_OVERLAYS:
        config = load_yaml(path)
        for kind in ("extensions", "receivers", "processors", "exporters"):
            used |= {(kind, name.split("/")[0]) for name in config.get(kind) or {}}
    built = builder_components()
    assert used <= built, f"used by a shipped config but not in collector-config/builder.yaml: {used - built}"
    assert built <= used, f"in collector-config/builder.yaml but used by no shipped config: {built - used}"


def test_the_collector_manifest_is_at_the_compose_image_version() -> None:
    version = COLLECTOR_IMAGE.rsplit(":", 1)[1]
    manifest = load_yaml(COLLECTOR / "builder.yaml")
    assert manifest["dist"]["version"] == version
    minor = int(version.split(".")[1])
    for kind in ("extensions", "receivers", "processors", "exporters", "providers"):
        for entry in manifest.get(kind, []):
            module, at = entry["gomod"].split()
            # Core and contrib components are v0.<minor>; the stable confmap modules v1.<minor - 94>.
            assert at in (f"v{version}", f"v1.{minor - 94}.0"), f"{module} {at}"
    providers = {e["gomod"].split()[0].rsplit("/", 1)[1] for e in manifest["providers"]}
    assert providers == {"envprovider", "fileprovider", "yamlprovider"}
