"""Issue 11 item 3 across regions: a tenant deleted and re-created in one region is empty
in every region (its old events, deliveries and sources are gone there too)."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from memnodes import eventually, make_node

from regionsync.errors import NotFound

SECRET = "old-github-secret"


def _github(body: bytes, delivery: str) -> dict[str, str]:
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {
        "content-type": "application/json",
        "x-hub-signature-256": sig,
        "x-github-event": "issues",
        "x-github-delivery": delivery,
    }


async def test_tenant_deleted_in_one_region_is_gone_in_the_other(net, started) -> None:
    a, b = make_node(net, "a", ["b"]), make_node(net, "b", ["a"])
    for n in (a, b):
        await n.start()
        started.append(n)
    await a.registry_ops.create_tenant("acme", "Acme")
    gh = (
        await a.registry_ops.create_source({"tenant": "acme", "kind": "github", "secret": SECRET})
    )["id"]
    ep = await a.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
    body = b'{"action":"opened"}'
    event, created = await a.ingest.ingest(gh, _github(body, "guid-1"), body)
    assert created

    async def in_b() -> bool:
        return len(await b.store.deliveries_of_event(event.id)) == 1

    await eventually(in_b)
    (delivery,) = await b.store.deliveries_of_event(event.id)
    old_gen = a.catalog.registry.tenant_gen("acme")

    await b.registry_ops.delete_tenant("acme")
    await eventually(lambda: a.catalog.registry.source(gh) is None)
    await b.registry_ops.create_tenant("acme", "Acme again")
    await eventually(lambda: a.catalog.registry.tenant_gen("acme") not in (None, old_gen))
    new = await b.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
    await eventually(lambda: a.catalog.registry.endpoint(new.id) is not None)
    assert new.id != ep.id  # endpoint ids are generated: the old one is never re-created

    for n in (a, b):
        assert n.catalog.registry.source(gh) is None
        with pytest.raises(NotFound):
            await n.ingest.get_event("acme", event.id)
        with pytest.raises(NotFound):
            await n.recovery.retry_delivery("acme", delivery.id)
        with pytest.raises(NotFound):
            await n.ingest.ingest(gh, _github(body, "guid-2"), body)
        with pytest.raises(NotFound):
            await n.recovery.deliveries_page("acme", ep.id, None, None, None, 50)
        rows, nxt = await n.recovery.deliveries_page("acme", new.id, None, None, None, 50)
        assert rows == [] and nxt is None


async def test_usage_counters_equal_delivery_states_across_regions(net, started) -> None:
    """Issue 11 item 6: summed over every region's actors (the PN-Counters' value), the
    usage counters equal the deliveries' current states after retries in two regions."""
    from regionsync.core.model import Delivery, DeliveryStatus, WriteBatch

    a, b = make_node(net, "a", ["b"]), make_node(net, "b", ["a"])
    for n in (a, b):
        await n.start()
        started.append(n)
    await a.registry_ops.create_tenant("acme", "Acme")
    ep = await a.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
    await eventually(lambda: b.catalog.registry.endpoint(ep.id) is not None)
    events = [(await a.ingest.publish("acme", "t", b"{}", None))[0] for _ in range(4)]

    async def states(node, want: str | None = None) -> list[Delivery] | bool:
        rows = [d for e in events for d in await node.store.deliveries_of_event(e.id)]
        if want is None:
            return rows
        return len(rows) == 4 and all(d.status.value == want for d in rows)

    await eventually(lambda: states(b, "delivered"))
    for d in (await states(b))[:2]:  # type: ignore[index]
        await b.recovery.retry_delivery("acme", d.id)
    await a.recovery.retry_delivery("acme", (await states(a))[3].id)  # type: ignore[index]
    await eventually(lambda: states(a, "delivered"))
    await eventually(lambda: states(b, "delivered"))
    want = {"deliveries_succeeded": 4, "backlog": 0, "deliveries_failed": 0,
            "events_published": 4}  # fmt: skip
    # each region records its moves at most every ingest.usage_record_ms
    await eventually(lambda: all(n.catalog.registry.tenant("acme").usage == want for n in (a, b)))
    await eventually(lambda: a.catalog.registry.state_hash() == b.catalog.registry.state_hash())

    # a pending delivery starved past the horizon is dead without an attempt
    now = a.clock.wall_ms()
    old = now - 49 * 3600 * 1000
    starved = Delivery("dlv_starved", events[0].id, ep.id, "acme", DeliveryStatus.PENDING,
                       0, old, "a", old, old)  # fmt: skip
    await a.store.commit(WriteBatch(deliveries=[starved]))
    a.delivery._expired_at = None  # the check runs at most once per poll interval
    await a.delivery._expire_starved(now)
    got = await a.store.get_delivery("dlv_starved")
    assert got is not None and got.status is DeliveryStatus.DEAD and got.attempts == 0
    assert a.catalog.registry.tenant("acme").usage["deliveries_failed"] == 1


async def test_idle_link_heartbeat_keeps_contact_fresh(net, started) -> None:
    """Issue 11 item 6: an idle but healthy peer shows recent contact (heartbeats are
    acked) while its last ack of a record may be old."""
    a = make_node(net, "a", ["b"], heartbeat_s=0.05)
    b = make_node(net, "b", ["a"], heartbeat_s=0.05)
    for n in (a, b):
        await n.start()
        started.append(n)
    await eventually(lambda: a.peers["b"].last_contact_at_ms is not None)
    first = a.peers["b"].last_contact_at_ms
    await eventually(lambda: (a.peers["b"].last_contact_at_ms or 0) > first + 100)
    peer = a.view.cluster()["peers"][0]
    assert peer["seconds_since_contact"] is not None and peer["seconds_since_contact"] < 1
