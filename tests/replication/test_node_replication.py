"""Replication between real Node objects over the in-memory transport."""

from __future__ import annotations

import msgpack
from memnodes import converged, eventually, make_node, start

from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.model import Record


async def test_partial_mesh_forwards_third_region_records(net, started) -> None:
    # a <-> b <-> c, but a and c are not peered: c learns a's changes through b
    a, b, c = await start(
        started,
        make_node(net, "a", ["b"]),
        make_node(net, "b", ["a", "c"]),
        make_node(net, "c", ["b"]),
    )
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: c.catalog.registry.tenant("acme") is not None)
    ep = await c.registry_ops.create_endpoint("acme", {"url": "https://hooks.example/x"})
    await eventually(lambda: a.catalog.registry.endpoint(ep.id) is not None)
    await eventually(lambda: converged(a, b, c))


async def test_partition_then_heal_converges(net, started) -> None:
    a, b = await start(started, make_node(net, "a", ["b"]), make_node(net, "b", ["a"]))
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: b.catalog.registry.tenant("acme") is not None)
    ep = await a.registry_ops.create_endpoint(
        "acme", {"url": "https://h.example/", "event_types": ["x", "y"]}
    )
    await eventually(lambda: converged(a, b))
    net.partition("a", "b")
    await a.registry_ops.patch_endpoint(
        "acme", ep.id, {"event_types_add": ["z"], "description": "from a"}
    )
    await b.registry_ops.patch_endpoint("acme", ep.id, {"event_types_remove": ["x"]})
    for i in range(20):
        await (a if i % 2 else b).ingest.publish("acme", "y", b'{"i":%d}' % i, None)
    assert not converged(a, b)
    net.heal()
    await eventually(lambda: converged(a, b))
    for n in (a, b):
        view = n.catalog.registry.endpoint(ep.id)
        assert view is not None
        assert view.event_types == ("y", "z") and view.description == "from a"
    counts = [await n.store.counts(n.region) for n in (a, b)]
    assert [c["events"] for c in counts] == [20, 20]


async def test_restart_from_existing_store_resumes(net, started) -> None:
    store_b = MemoryStore()
    a, b = await start(started, make_node(net, "a", ["b"]), make_node(net, "b", ["a"], store_b))
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: converged(a, b))
    await b.stop()
    await a.registry_ops.create_tenant("beta", "Beta")
    (b2,) = await start(started, make_node(net, "b", ["a"], store_b))
    assert b2.writer.actor == b.writer.actor  # same store, same incarnation
    await eventually(lambda: b2.catalog.registry.tenant("beta") is not None)
    await eventually(lambda: converged(a, b2))


async def test_lost_disk_gets_new_incarnation_and_state_back(net, started) -> None:
    store_b = MemoryStore()
    a, b = await start(started, make_node(net, "a", ["b"]), make_node(net, "b", ["a"], store_b))
    await b.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: converged(a, b))
    await b.stop()
    store_b.wipe()
    (b2,) = await start(started, make_node(net, "b", ["a"], store_b))
    assert b2.writer.actor != b.writer.actor
    await eventually(lambda: b2.catalog.registry.tenant("acme") is not None)
    await b2.registry_ops.create_tenant(
        "gamma", "Gamma"
    )  # new dots never collide with the old actor's
    await eventually(lambda: converged(a, b2))
    assert (
        a.catalog.registry.tenant("gamma") is not None
        and a.catalog.registry.tenant("acme") is not None
    )


async def _records_of(node, n: int) -> list[Record]:
    return await node.store.records_after({}, n)


async def test_out_of_order_records_are_held_back(net, started) -> None:
    a, b = await start(started, make_node(net, "a", []), make_node(net, "b", []))
    await a.registry_ops.create_tenant("acme", "Acme")
    ep = await a.registry_ops.create_endpoint(
        "acme", {"url": "https://h.example/", "event_types": ["x"]}
    )
    await a.registry_ops.patch_endpoint("acme", ep.id, {"event_types_remove": ["x"]})
    await a.registry_ops.patch_endpoint("acme", ep.id, {"event_types_add": ["x"]})
    recs = await _records_of(a, 100)
    assert [r.seq for r in recs] == [1, 2, 3, 4]
    assert await b.replica.apply_records(list(reversed(recs[1:]))) == []
    assert b.writer.version_vector == {} and b.catalog.registry.tenant("acme") is None
    assert await b.replica.apply_records(recs[:1]) == []
    assert converged(a, b)
    view = b.catalog.registry.endpoint(ep.id)
    assert view is not None and view.event_types == ("x",)


async def test_malformed_record_is_rejected_not_merged(net, started) -> None:
    a, b = await start(started, make_node(net, "a", []), make_node(net, "b", []))
    await a.registry_ops.create_tenant("acme", "Acme")
    await a.registry_ops.create_tenant("beta", "Beta")
    good1, good2 = await _records_of(a, 2)
    bad = Record(
        good1.origin, 1, "registry", msgpack.packb({"registry": {"tenants": b"x"}}), good1.hlc
    )
    rejected = await b.replica.apply_records([bad, good2])
    assert [(e.origin, e.seq) for e in rejected] == [(good1.origin, 1)]
    assert b.catalog.registry.tenant("acme") is None  # never merged
    assert b.counters["records_rejected"] == 1
    # issue 41: moved past, so the next record applies; the refused one is kept opaque
    assert b.writer.version_vector == {good1.origin: 2}
    assert b.catalog.registry.tenant("beta") is not None
    logged = {(r.origin, r.seq): r.body for r in await b.store.records_after({}, 100)}
    assert logged[(good1.origin, 1)] == bad.body
    assert b.replica.refusals[good1.origin].skipped == 1


async def test_record_from_far_future_is_merged_with_a_clamped_hlc(net, started) -> None:
    a, b = await start(started, make_node(net, "a", []), make_node(net, "b", []))
    await a.registry_ops.create_tenant("acme", "Acme")
    (rec,) = await _records_of(a, 1)
    ahead = Record(rec.origin, rec.seq, rec.kind, rec.body, (rec.hlc[0] + 3_600_000, 0))
    rejected = await b.replica.apply_records([ahead])
    assert rejected == [] and b.counters["clock_drift"] == 1
    assert b.writer.hlc.last.wall_ms <= b.clock.wall_ms() + 60_001  # clamped
    assert b.catalog.registry.tenant("acme") is not None
    assert b.view.cluster()["clock"]["stamps_ahead_ms"]["a"] > 3_000_000


async def test_a_record_past_drift_is_taken_at_once_and_counted(net, started) -> None:
    """A record stamped past ``max_drift_ms`` is merged at once (issue 41; it used to be
    refused until physical time caught up), counted as ``clock_drift``, and the
    receiver's HLC moves no further than physical time + max_drift_ms."""
    a = make_node(net, "a", ["b"])
    ahead = a.clock.wall_ms
    a.clock.wall_ms = lambda: ahead() + 400  # type: ignore[method-assign]
    b = make_node(net, "b", ["a"], max_drift_ms=100)
    await start(started, a, b)
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: b.catalog.registry.tenant("acme") is not None)
    await eventually(lambda: a.peers["b"].acked.get(a.writer.actor, 0) >= 1)
    assert a.peers["b"].last_error is None and b.counters["records_rejected"] == 0
    assert b.counters["clock_drift"] >= 1
    assert b.writer.hlc.last.wall_ms <= b.clock.wall_ms() + 101


async def test_deliveries_owned_by_origin_and_outcomes_replicate(net, started) -> None:
    a, b = await start(started, make_node(net, "a", ["b"]), make_node(net, "b", ["a"]))
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: b.catalog.registry.tenant("acme") is not None)
    ep = await b.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
    await eventually(lambda: a.catalog.registry.endpoint(ep.id) is not None)
    event, created = await a.ingest.publish("acme", "order.paid", b'{"total":5}', "k1")
    assert created
    await eventually(lambda: len(a.sender.requests) == 1)
    req = a.sender.requests[0]
    assert req.headers["webhook-id"] == event.id and req.body == b'{"total":5}'
    assert b.sender.requests == []  # only the origin region delivers

    async def delivered_in_b() -> bool:
        ds = await b.store.deliveries_of_event(event.id)
        return [d.status.value for d in ds] == ["delivered"]

    await eventually(delivered_in_b)
    await eventually(lambda: converged(a, b))
    usage = b.catalog.registry.tenant("acme").usage
    assert usage["events_published"] == 1 and usage["deliveries_succeeded"] == 1
    assert usage["backlog"] == 0
