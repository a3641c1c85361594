"""Issue 18 items 3 and 4 on a running node: latency histograms at /metrics (optionally
behind ``metrics_token``), the Grafana dashboard names only exported metrics, JSON logs,
and one published event's ingest, commit and attempt spans share a trace."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from api_support import Api, RecordingReceiver, assert_problem, eventually, running_node
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from regionsync.adapters.jsonlog import JsonFormatter
from regionsync.runtime.telemetry import METRIC_NAMES

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


async def _deliver_one(api: Api, tenant: str, receiver: RecordingReceiver) -> str:
    c = api.client
    ep = (await c.post(f"/v1/tenants/{tenant}/endpoints", json={"url": receiver.url("m")})).json()
    receiver.secrets["m"] = ep["secret"]
    resp = await c.post(
        f"/v1/tenants/{tenant}/events", json={"event_type": "a.b", "payload": {"n": 1}}
    )
    assert resp.status_code == 202, resp.text

    async def arrived() -> bool:
        return len(receiver.of("m")) >= 1

    await eventually(arrived)
    return resp.json()["id"]


def _families(text: str) -> dict[str, set[str]]:
    """family name -> sample names, from Prometheus text."""
    return {f.name: {s.name for s in f.samples} for f in text_string_to_metric_families(text)}


def _count(families_text: str, family: str, **labels: str) -> float:
    for f in text_string_to_metric_families(families_text):
        if f.name == family:
            return sum(
                s.value
                for s in f.samples
                if s.name == family + "_count"
                and all(s.labels.get(k) == v for k, v in labels.items())
            )
    return 0.0


async def test_latency_histograms_are_observed(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    await _deliver_one(api, tenant, receiver)

    async def attempted() -> bool:
        text = (await api.client.get("/metrics")).text
        return _count(text, "regionsync_attempt_latency_seconds", outcome="succeeded") >= 1

    await eventually(attempted)
    text = (await api.client.get("/metrics")).text
    assert set(METRIC_NAMES) <= set(_families(text))
    assert _count(text, "regionsync_publish_latency_seconds", path="publish") == 1
    assert _count(text, "regionsync_commit_latency_seconds") >= 2  # endpoint, event, ...


async def test_dashboard_names_only_exported_metrics(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    await _deliver_one(api, tenant, receiver)
    families = _families((await api.client.get("/metrics")).text)
    samples = set().union(*families.values())
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]] + [
        v["query"] for v in dash["templating"]["list"] if v["type"] == "query"
    ]
    names = {n for e in exprs for n in re.findall(r"\bregionsync_[a-z_]+", e)}
    assert set(METRIC_NAMES) <= {_strip(n) for n in names}  # every histogram has a panel
    for name in sorted(names):
        assert name in samples or _strip(name) in families, f"{name} is not exported"


def _strip(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


async def test_metrics_token(tmp_path: Path) -> None:
    token = "metrics-token-0123456789"
    async with running_node(tmp_path, metrics_token=token) as api:
        assert_problem(await api.client.get("/metrics"), 401, "authorization")
        bad = {"authorization": "Bearer nope-nope-nope-nope"}
        assert_problem(await api.client.get("/metrics", headers=bad), 401, "authorization")
        odd = {"authorization": "Bearer \u00e9t\u00e9".encode("latin-1")}
        assert_problem(await api.client.get("/metrics", headers=odd), 401, "authorization")
        ok = await api.client.get("/metrics", headers={"authorization": f"Bearer {token}"})
        assert ok.status_code == 200 and "regionsync_backlog" in ok.text
        assert (await api.client.get("/healthz")).status_code == 200  # probes stay open


def test_json_log_lines_carry_ids() -> None:
    fmt = JsonFormatter("us-east-1")
    rec = logging.LogRecord("regionsync.delivery", logging.ERROR, __file__, 1, "x %s", ("y",), None)
    rec.delivery_id, rec.event_id = "dlv_1", "evt_1"
    line = json.loads(fmt.format(rec))
    assert line["message"] == "x y" and line["level"] == "error" and line["region"] == "us-east-1"
    assert (line["delivery_id"], line["event_id"]) == ("dlv_1", "evt_1")
    assert line["ts"].endswith("Z") and "endpoint_id" not in line


async def test_spans_of_one_event_share_a_trace(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    api.node.telemetry.use_tracer_provider(provider)
    try:
        event_id = await _deliver_one(api, tenant, receiver)

        async def attempt_exported() -> bool:
            return any(s.name == "regionsync.attempt" for s in exporter.get_finished_spans())

        await eventually(attempt_exported)
    finally:
        api.node.telemetry.use_tracer_provider(None)
    mine = [
        s
        for s in exporter.get_finished_spans()
        if (s.attributes or {}).get("regionsync.event_id") == event_id
    ]
    by_name = {s.name: s for s in mine}
    assert set(by_name) == {"regionsync.ingest", "regionsync.commit", "regionsync.attempt"}
    ingest = by_name["regionsync.ingest"]
    assert {s.context.trace_id for s in mine} == {ingest.context.trace_id}
    assert by_name["regionsync.commit"].parent.span_id == ingest.context.span_id
    assert by_name["regionsync.attempt"].parent.span_id == ingest.context.span_id
    assert by_name["regionsync.attempt"].attributes["http.response.status_code"] == 204
