"""Issue 15 item 2: any region answers for the attempts of a delivery it has replicated
(with the request headers each sent), and says which region delivers it (the custodian)."""

from __future__ import annotations

import asyncio

import pytest
from memnodes import eventually, make_node

from regionsync.core.custody import CustodyRecord
from regionsync.core.retry import AttemptOutcome, OutcomeKind
from regionsync.runtime.ports import OutboundRequest


async def test_attempts_replicate_to_every_region_with_the_custodian(net, started) -> None:
    names = ["a", "b", "c"]
    nodes = [make_node(net, n, [p for p in names if p != n]) for n in names]
    for n in nodes:
        await n.start()
        started.append(n)
    a, b, c = nodes
    await a.registry_ops.create_tenant("acme", "Acme")
    ep = await a.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
    event, _ = await a.ingest.publish("acme", "t", b"{}", None)

    async def delivered_in_a() -> bool:
        ds = await a.store.deliveries_of_event(event.id)
        return len(ds) == 1 and ds[0].status.value == "delivered"

    await eventually(delivered_in_a)
    (d,) = await a.store.deliveries_of_event(event.id)
    want = await a.store.attempts_of(d.id)
    assert [(x.region, x.n, x.status_code, x.error) for x in want] == [("a", 1, 204, None)]
    # with the request headers it sent (issue 15), compared whole in every region below
    sent = dict(line.split(": ", 1) for line in want[0].request_headers.split("\n"))
    assert sent["webhook-id"] == event.id and sent["webhook-timestamp"].isdigit()
    assert sent["webhook-signature"].startswith("v1,")

    for other in (b, c):

        async def has_attempts(node=other) -> bool:
            return await node.store.attempts_of(d.id) == want

        await eventually(has_attempts)
        (theirs,) = await other.store.attempts_of(d.id)
        assert theirs.request_headers == want[0].request_headers != ""
        got = await other.recovery.delivery("acme", d.id)
        assert got.status.value == "delivered" and other.custody.custodian(got) == "a"
        # and in the endpoint's attempt log of that region
        rows, _ = await other.recovery.attempts_page("acme", ep.id, None, None, None, 10)
        assert rows == want

    # once a's custody record hands its deliveries to b and c, every region names the
    # rendezvous winner for the endpoint as the custodian
    rec = CustodyRecord(("b", "c"), b.clock.wall_ms(), "b")
    async with b.writer.lock:
        stamp = b.writer.stamp()
        b.writer.commit_local(
            "registry", stamp, b.catalog.registry.set_custody("a", rec, b.writer.actor, stamp)
        )
    winner = rec.custodian("a", ep.id)
    assert winner in ("b", "c")
    for node in nodes:
        await eventually(lambda node=node: node.custody.custodian(d) == winner)


@pytest.mark.parametrize("retried_in", ["a", "b"])
async def test_an_attempt_of_a_superseded_generation_replicates(net, started, retried_in) -> None:
    """Issue 38 kind 4: a request sent before a retry (in its region or another, whose
    new generation arrived first) superseded its generation is an attempt row in every
    region, beside the new generation's."""

    class SlowFirst:
        def __init__(self) -> None:
            self.gate, self.sent = asyncio.Event(), 0

        async def send(self, request: OutboundRequest) -> AttemptOutcome:
            self.sent += 1
            if self.sent == 1:
                await self.gate.wait()
                return AttemptOutcome(OutcomeKind.FAILED, status_code=503)
            return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)

    a, b = make_node(net, "a", ["b"]), make_node(net, "b", ["a"])
    sender = a.delivery.sender = SlowFirst()
    for n in (a, b):
        await n.start()
        started.append(n)
    await a.registry_ops.create_tenant("acme", "Acme")
    ep = await a.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
    event, _ = await a.ingest.publish("acme", "t", b"{}", None)
    (d,) = await a.store.deliveries_of_event(event.id)
    await eventually(lambda: sender.sent == 1)
    if retried_in == "a":
        await a.recovery.retry_delivery("acme", d.id)
    else:
        await eventually(lambda: b.catalog.registry.endpoint(ep.id, "acme") is not None)
        await b.recovery.retry_delivery("acme", d.id)

        async def superseded_in_a() -> bool:
            row = await a.store.get_delivery(d.id)
            return row is not None and row.generation == 1

        await eventually(superseded_in_a)
    sender.gate.set()

    want = [(0, 1, 503, "a"), (1, 1, 204, retried_in)]

    async def logged(node) -> bool:  # type: ignore[no-untyped-def]
        rows = await node.store.attempts_of(d.id)
        return sorted((x.generation, x.n, x.status_code, x.region) for x in rows) == want

    for node in (a, b):
        await eventually(lambda node=node: logged(node))
        rows, _ = await node.recovery.attempts_page("acme", ep.id, None, None, None, 10)
        assert sorted((x.generation, x.n) for x in rows) == [(0, 1), (1, 1)]
    assert sender.sent == (2 if retried_in == "a" else 1)
