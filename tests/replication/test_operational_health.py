"""Endpoint health events across three regions (issue 43): one event per transition of
the cluster's replicated health, not one per region; never ``endpoint.recovered``
without a success. Every region delivers the events it accepted to one receiver, so
each judges the endpoint from its own attempts and the registry."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from memnodes import eventually, make_node

from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.core.operational import operational_event_id
from regionsync.core.retry import AttemptOutcome, OutcomeKind
from regionsync.runtime.node import Node
from regionsync.runtime.ports import OutboundRequest

FAST = {"failover_after_s": 5.0, "heartbeat_s": 0.2, "custody_interval_s": 0.05}
OPS = {"operational_webhooks": {"tenant": "ops"}}
RETRY = {"failure_threshold": 3, "probe_initial_s": 0.05, "probe_max_s": 0.1}
DOWN = "https://down.example/hook"


@dataclass
class Receivers:
    """The receivers every region's sender reaches: hosts in ``down`` answer 503."""

    down: set[str] = field(default_factory=set)
    hits: list[tuple[str, OutboundRequest]] = field(default_factory=list)  # (region, request)

    def sender(self, region: str) -> ScriptedSender:
        return ScriptedSender(self, region)

    def ops(self, event_type: str | None = None) -> list[OutboundRequest]:
        return [r for _, r in self.hits if urlsplit(r.url).hostname == "ops.example"
                and event_type in (None, r.headers.get("webhook-event-type"))]  # fmt: skip

    def attempts(self, region: str) -> int:
        return sum(1 for g, r in self.hits if g == region and r.url == DOWN)


@dataclass
class ScriptedSender:
    receivers: Receivers
    region: str

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        self.receivers.hits.append((self.region, request))
        if urlsplit(request.url).hostname in self.receivers.down:
            return AttemptOutcome(OutcomeKind.FAILED, status_code=503, reason="http_503")
        return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)


async def _cluster(
    net: MemoryNetwork, started: list[Node], receivers: Receivers, slow: str = ""
) -> tuple[list[Node], str]:
    """Regions a, b, c with the operations tenant and acme's endpoint at DOWN; the
    region ``slow`` retries every 0.5 s, the others every 0.05 s."""
    regions, nodes = ["a", "b", "c"], []
    for r in regions:
        retry = {**RETRY, "retry_schedule_s": [0.5 if r == slow else 0.05] * 400}
        nodes.append(make_node(net, r, [p for p in regions if p != r],
                               extra={**OPS, "delivery": retry},
                               sender=receivers.sender(r), **FAST))  # fmt: skip
    for n in nodes:
        await n.start()
        started.append(n)
    a = nodes[0]
    await a.registry_ops.create_tenant("ops", "Ops")
    await a.registry_ops.create_endpoint(
        "ops", {"url": "https://ops.example/hook", "event_types": ["endpoint.*"]}
    )
    await a.registry_ops.create_tenant("acme", "Acme")
    ep = await a.registry_ops.create_endpoint("acme", {"url": DOWN})
    await eventually(lambda: all(n.catalog.registry.endpoint(ep.id) is not None and
                                 len(n.catalog.registry.endpoints("ops")) == 1
                                 for n in nodes))  # fmt: skip
    return nodes, ep.id


async def _publish(node: Node) -> None:
    await node.ingest.publish("acme", "x", b"{}", None)


def _state(nodes: list[Node], eid: str, state: str) -> bool:
    return all(
        (v := n.catalog.registry.endpoint(eid)) is not None and v.state == state for n in nodes
    )


async def _settled(nodes: list[Node], receivers: Receivers) -> None:
    """Every operational event queued is published and delivered once to ops.example."""

    def done() -> bool:
        queued = sum(len(n.ops._queue) for n in nodes)
        published = sum(sum(n.ops.counts.values()) for n in nodes)
        return queued == 0 and len(receivers.ops()) == published

    await eventually(done, timeout_s=20)


def _payloads(receivers: Receivers, event_type: str) -> list[dict]:
    return [json.loads(r.body) for r in receivers.ops(event_type)]


async def test_a_receiver_failing_throughout_is_one_failing_and_no_recovered(
    net: MemoryNetwork, started: list[Node]
) -> None:
    receivers = Receivers(down={"down.example"})
    nodes, eid = await _cluster(net, started, receivers, slow="b")
    a, b, c = nodes
    # b fails once (active, below the threshold), then a turns the endpoint failing
    await _publish(b)
    await eventually(lambda: receivers.attempts("b") >= 1)
    await _publish(a)
    await eventually(lambda: _state(nodes, eid, "failing"), timeout_s=15)
    await _publish(c)
    # b's and c's next failures meet a failing registry (before issue 43, b's answered
    # endpoint.recovered with trigger "failure", then endpoint.failing again)
    await eventually(lambda: receivers.attempts("b") >= 4 and receivers.attempts("c") >= 5,
                     timeout_s=15)  # fmt: skip
    await _settled(nodes, receivers)
    failing = receivers.ops("endpoint.failing")
    assert len(failing) == 1, _payloads(receivers, "endpoint.failing")
    assert receivers.ops("endpoint.recovered") == []
    (p,) = _payloads(receivers, "endpoint.failing")
    assert p["endpoint"] == eid and p["tenant"] == "acme" and p["from"] == "active"
    assert failing[0].headers["webhook-id"] == operational_event_id(p["transition"])
    # every other region saw the same transition under the same id, and left it to p's
    # region, the endpoint's reporter
    seen = {n.region: set(n.health_reports.unreported) for n in nodes}
    assert seen[p["region"]] == set()
    assert all(s == {p["transition"]} for r, s in seen.items() if r != p["region"])
    assert _state(nodes, eid, "failing")


async def test_flapping_receiver_one_event_per_transition(
    net: MemoryNetwork, started: list[Node]
) -> None:
    receivers = Receivers(down={"down.example"})
    nodes, eid = await _cluster(net, started, receivers)
    want: list[str] = []
    for _ in range(2):  # down, up, down, up
        receivers.down.add("down.example")
        for n in nodes:
            await _publish(n)
        await eventually(lambda: _state(nodes, eid, "failing"), timeout_s=15)
        want.append("endpoint.failing")
        receivers.down.clear()
        await eventually(lambda: _state(nodes, eid, "active"), timeout_s=15)
        want.append("endpoint.recovered")
        # every region has delivered all it accepted: each saw the receiver healthy
        await eventually(lambda: all(not n.queue.tenant_backlog for n in nodes), timeout_s=15)
        await _settled(nodes, receivers)
        got = [json.loads(r.body) for r in receivers.ops()]
        assert [p["type"] for p in got] == want, got
    hits = receivers.ops()
    ids = [r.headers["webhook-id"] for r in hits]
    assert len(set(ids)) == 4  # four transitions, four events, each sent once
    payloads = [json.loads(r.body) for r in hits]
    assert len({p["transition"] for p in payloads}) == 4
    assert len({p["region"] for p in payloads}) == 1  # the endpoint's one reporter
    recovered = [p for p in payloads if p["type"] == "endpoint.recovered"]
    assert all(p["trigger"] == "success" and p["from"] == "failing" for p in recovered)


async def test_next_attempt_at_read_elsewhere_is_null_once_it_has_passed(
    net: MemoryNetwork, started: list[Node]
) -> None:
    """Issue 43: a region that does not deliver a pending delivery showed its replicated
    schedule in the past (the custodian's attempt due, in flight or held by a probe):
    null then, with ``custodian`` naming the region whose schedule it is."""
    from regionsync.adapters.routes.common import delivery_json
    from regionsync.core.envelope import rfc3339_ms

    receivers = Receivers(down={"down.example"})
    retry = {"retry_schedule_s": [1.0] * 5, "failure_threshold": 100}
    a, b = (make_node(net, r, [p], extra={"delivery": retry}, sender=receivers.sender(r),
                      failover_after_s=60.0, heartbeat_s=0.2)
            for r, p in (("a", "b"), ("b", "a")))  # fmt: skip
    for n in (a, b):
        await n.start()
        started.append(n)
    await a.registry_ops.create_tenant("acme", "Acme")
    await a.registry_ops.create_endpoint("acme", {"url": DOWN})
    event, _ = await a.ingest.publish("acme", "x", b"{}", None)

    async def first_outcome_in_b() -> bool:
        ds = await b.store.deliveries_of_event(event.id)
        return len(ds) == 1 and ds[0].attempts >= 1

    await eventually(first_outcome_in_b)
    net.partition("a", "b")  # b keeps the schedule it last heard; a stays the custodian
    (d,) = await b.store.deliveries_of_event(event.id)
    assert d.next_attempt_at_ms is not None
    shown = delivery_json(b, d)
    if b.cluster_clock.wall_ms() < d.next_attempt_at_ms:  # ahead: the schedule as replicated
        assert shown["next_attempt_at"] == rfc3339_ms(d.next_attempt_at_ms)
    await eventually(lambda: b.cluster_clock.wall_ms() > d.next_attempt_at_ms, timeout_s=5)
    shown = delivery_json(b, d)
    assert shown["status"] == "pending" and shown["custodian"] == "a"
    assert shown["next_attempt_at"] is None


async def test_an_event_id_held_is_not_published_again_in_any_region(
    net: MemoryNetwork, started: list[Node]
) -> None:
    """The dedupe on our side: a transition's event (an id every region derives alike)
    is published once; a region holding it, accepted there or replicated, skips it."""
    a, b = (make_node(net, r, [p], extra=OPS, **FAST) for r, p in (("a", "b"), ("b", "a")))
    for n in (a, b):
        await n.start()
        started.append(n)
    await a.registry_ops.create_tenant("ops", "Ops")
    await eventually(lambda: b.catalog.registry.has_tenant("ops"))
    event_id = operational_event_id("tr_TEST")
    payload = {"type": "endpoint.failing", "transition": "tr_TEST"}
    first = await a.ingest.publish_internal("ops", "endpoint.failing", payload, event_id)
    assert first is not None and first.id == event_id
    assert await a.ingest.publish_internal("ops", "endpoint.failing", payload, event_id) is None

    async def replicated() -> bool:
        return await b.store.get_event(event_id) is not None

    await eventually(replicated)
    assert await b.ingest.publish_internal("ops", "endpoint.failing", payload, event_id) is None
    assert await b.ingest.publish_internal("ops", "endpoint.failing", payload) is not None
