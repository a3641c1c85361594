"""Log truncation and anti-entropy repair between Node objects over the in-memory network."""

from __future__ import annotations

from memnodes import converged, eventually, make_node, start

from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.hashtree import HashTree, children
from regionsync.core.records import encode_body

FAST = {"truncate_interval_s": 0.02}


async def log_len(node) -> int:
    return len(await node.store.records_after({}, 10**9))


async def events_of(node) -> list[str]:
    return await node.store.list_event_ids()


async def same_events(*nodes) -> bool:
    return len({tuple(await events_of(n)) for n in nodes}) == 1


async def tree_is_current(node) -> bool:
    """The node's kept tree equals one built from scratch now (as ``state_tree`` built it
    before issue 17): every bucket down to depth 2, and the replicated root."""
    tree = await node.anti_entropy.state_tree()  # (the background build may still run)
    full, replicated = HashTree(tree.depth), HashTree(tree.depth)
    for key, state in node.catalog.registry.states().items():
        full.put("r/" + key, state.to_bytes())
        replicated.put("r/" + key, state.to_bytes())
    for event_id in await node.store.list_event_ids():
        full.put("e/" + event_id, b"")
        replicated.put("e/" + event_id, b"")
    for d in await node.store.load_deliveries():
        full.put("d/" + d.id, encode_body(delivery=d))
        replicated.put("d/" + d.id, encode_body(delivery=d) if d.status.final else b"")
    levels = ["", *children(""), *(c for b in children("") for c in children(b))]
    return (
        all(tree.hash(b) == full.hash(b) and tree.count(b) == full.count(b) for b in levels)
        and tree.replicated_root() == replicated.hash("")
        and len(tree) == len(full) > 0
    )


async def test_log_truncated_once_every_peer_acked(net, started) -> None:
    a, b, c = await start(
        started,
        make_node(net, "a", ["b", "c"], **FAST),
        make_node(net, "b", ["a", "c"], **FAST),
        make_node(net, "c", ["a", "b"], **FAST),
    )
    await a.registry_ops.create_tenant("acme", "Acme")
    for i in range(10):
        await (a, b, c)[i % 3].registry_ops.create_tenant(f"t{i}", f"T{i}")
    await eventually(lambda: converged(a, b, c))

    async def truncated() -> bool:
        # every node keeps only its own last record (it resumes the HLC after a restart)
        return all([await log_len(n) == 1 for n in (a, b, c)])

    await eventually(truncated)
    for n in (a, b, c):
        assert n.replica.log_floor[n.writer.actor] == n.writer.durable_vv[n.writer.actor] - 1
        assert await n.store.load_log_floor() == n.replica.log_floor
        assert all(p.acked for p in n.peers.values())
    assert a.counters["log_truncated"] > 0


async def test_peer_never_heard_from_blocks_truncation(net, started) -> None:
    (a,) = await start(started, make_node(net, "a", ["b"], **FAST))
    for i in range(5):
        await a.registry_ops.create_tenant(f"t{i}", f"T{i}")
    assert a.replica.truncation_point() == {}
    assert await a.replica.truncate_log() == 0 and await log_len(a) == 5


async def test_max_log_records_forces_truncation(net, started) -> None:
    (a,) = await start(started, make_node(net, "a", ["b"], max_log_records=3))
    for i in range(5):
        await a.registry_ops.create_tenant(f"t{i}", f"T{i}")
    assert a.replica.truncation_point() == {a.writer.actor: 2}
    assert await a.replica.truncate_log() == 2 and await log_len(a) == 3


async def test_partitioned_peer_behind_floor_is_repaired_by_anti_entropy(net, started) -> None:
    a, b, c = await start(
        started,
        make_node(net, "a", ["b", "c"], **FAST, max_log_records=4),
        make_node(net, "b", ["a", "c"], **FAST, max_log_records=4),
        make_node(net, "c", ["a", "b"], **FAST, max_log_records=4),
    )
    await a.registry_ops.create_tenant("acme", "Acme")
    ep = await a.registry_ops.create_endpoint(
        "acme", {"url": "https://h.example/", "event_types": ["x"]}
    )
    await eventually(lambda: converged(a, b, c))
    net.partition("a", "c")
    net.partition("b", "c")
    for i in range(12):
        await (a, b)[i % 2].ingest.publish("acme", "x", b'{"i":%d}' % i, None)
        await (a, b)[i % 2].registry_ops.create_tenant(f"t{i}", f"T{i}")
    await a.registry_ops.patch_endpoint("acme", ep.id, {"description": "while c was away"})
    await eventually(lambda: converged(a, b))
    # a and b both truncated some origin past what c holds (forced: c blocks the ack-based
    # truncation), so neither log can serve c those records: only anti-entropy can
    await eventually(
        lambda: bool(
            set(a.replica.behind_floor(c.writer.durable_vv))
            & set(b.replica.behind_floor(c.writer.durable_vv))
        )
    )
    net.heal()
    await eventually(lambda: converged(a, b, c))
    await eventually(lambda: same_events(a, b, c))
    assert len(await events_of(c)) == 12
    # neither log could serve c, so a repair pass ran towards it
    assert a.counters["anti_entropy_passes"] + b.counters["anti_entropy_passes"] > 0
    view = c.catalog.registry.endpoint(ep.id)
    assert view is not None and view.description == "while c was away"
    dl = [sorted((d.id, d.status) for d in await n.store.load_deliveries()) for n in (a, c)]
    await eventually(lambda: converged(a, b, c))
    assert {x[0] for x in dl[0]} == {x[0] for x in dl[1]}
    # issue 17: the trees were kept by commits through it all, built once per node
    for n in (a, b, c):
        await eventually(lambda n=n: tree_is_current(n))
        assert n.anti_entropy.builds == 1


async def test_wiped_node_rejoins_by_snapshot(net, started) -> None:
    store_b = MemoryStore()
    a, b = await start(
        started,
        make_node(net, "a", ["b"], **FAST),
        make_node(net, "b", ["a"], store_b, **FAST),
    )
    await a.registry_ops.create_tenant("acme", "Acme")
    await a.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
    await eventually(lambda: converged(a, b))
    for i in range(5):
        await b.ingest.publish("acme", "x", b'{"i":%d}' % i, f"k{i}")
    await eventually(lambda: converged(a, b))
    await eventually(lambda: a.replica.behind_floor({}) != [])  # a's log no longer starts at 1
    await b.stop()
    store_b.wipe()
    (b2,) = await start(started, make_node(net, "b", ["a"], store_b, **FAST))
    assert b2.writer.actor != b.writer.actor
    await eventually(lambda: converged(a, b2))
    await eventually(lambda: same_events(a, b2))
    assert len(await events_of(b2)) == 5
    # counted once the merge's commit is durable, which the store shows a moment before
    await eventually(lambda: b2.counters["anti_entropy_items"] > 0)
    # Idempotency-Keys travel with their events
    assert await b2.keys.lookup("acme", "k3", a.clock.wall_ms(), 10**9) is not None
    # b2's vv was raised to a's, so its own old records never get re-sent as new
    assert b2.writer.durable_vv.get(b.writer.actor) == a.writer.durable_vv[b.writer.actor]
    await b2.registry_ops.create_tenant("gamma", "Gamma")
    await eventually(lambda: a.catalog.registry.tenant("gamma") is not None)
    await eventually(lambda: converged(a, b2))
    for n in (a, b2):  # issue 17: kept by commits (and merged state), built once
        await eventually(lambda n=n: tree_is_current(n))
        assert n.anti_entropy.builds == 1


async def test_a_repair_sends_registry_state_first(net, started) -> None:
    """A node repaired from nothing gets registry states before events and deliveries, so
    its tenants and endpoints answer from the first chunk (QA of 2026-12-02: a wiped
    node answered 404 for existing tenants until the whole pass was done, deliveries and
    events being sent first, in ident order)."""
    store_b = MemoryStore()
    a, b = await start(
        started, make_node(net, "a", ["b"], **FAST), make_node(net, "b", ["a"], store_b, **FAST)
    )
    await a.registry_ops.create_tenant("acme", "Acme")
    await a.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
    for i in range(5):
        await a.ingest.publish("acme", "x", b'{"i":%d}' % i, None)
    await eventually(lambda: converged(a, b))
    await eventually(lambda: a.replica.behind_floor({}) != [])
    await b.stop()
    store_b.wipe()
    b2 = make_node(net, "b", ["a"], store_b, **FAST)
    kinds: list[str] = []
    apply_state = b2.anti_entropy.apply_state

    async def recording(items, version_vector=None):
        kinds.extend(kind for kind, _ in items)
        return await apply_state(items, version_vector)

    b2.anti_entropy.apply_state = recording
    await start(started, b2)
    await eventually(lambda: converged(a, b2))
    await eventually(lambda: same_events(a, b2))
    order = {"registry": 0, "event": 1, "delivery": 2}
    assert {"registry", "event", "delivery"} <= set(kinds)
    assert kinds == sorted(kinds, key=order.__getitem__), kinds


async def test_malformed_state_chunk_is_rejected_and_never_merged(net, started) -> None:
    a, b = await start(started, make_node(net, "a", []), make_node(net, "b", []))
    await a.registry_ops.create_tenant("acme", "Acme")
    (good,) = await a.anti_entropy.state_items(["r/tenants"])
    bad = ("registry", encode_body())  # no registry section
    reason = await b.anti_entropy.apply_state([good, bad], {a.writer.actor: 1})
    assert reason is not None
    assert b.catalog.registry.tenant_ids() == frozenset() and b.writer.version_vector == {}
    assert b.counters["state_rejected"] == 1
    assert await b.anti_entropy.apply_state([("registry", b"\xc1")]) is not None  # not msgpack
    assert await b.anti_entropy.apply_state([good]) is None
    assert b.catalog.registry.tenant_ids() == frozenset({"acme"}) and b.writer.version_vector == {}


async def test_rejected_chunk_over_the_wire_stops_the_pass(net, started) -> None:
    from regionsync.runtime.replication import serve_stream
    from regionsync.v1 import replication_pb2 as pb

    (b,) = await start(started, make_node(net, "b", ["x"]))  # x: a peer that is not up
    client = await net.transport("x").connect("b", 1.0)
    task_hello = pb.SyncMessage(hello=pb.Hello(region="x", incarnation=1, protocol=1))
    await client.send(task_hello)
    assert (await client.recv()).WhichOneof("kind") == "hello"
    bad = pb.StateItem(kind="registry", body=b"\xc1")
    await client.send(pb.SyncMessage(state=pb.StateChunk(items=[bad])))
    reply = await client.recv()
    assert reply.WhichOneof("kind") == "ack" and len(reply.ack.rejected) == 1
    # the final chunk of a pass with a rejected chunk must not raise the version vector
    last = pb.StateChunk(last=True, version_vector={"x:1": 5})
    await client.send(pb.SyncMessage(state=last))
    reply = await client.recv()
    assert not reply.ack.rejected and dict(reply.ack.version_vector) == {}
    await client.close()
    assert serve_stream is not None


async def test_a_change_of_what_the_region_reads_ends_the_stream_after_a_pass(net, started) -> None:
    """The accepting side ends a stream whose answering Hello no longer says what its
    region reads (runtime/replication.py ``_receive``), but not in the middle of an
    anti-entropy pass: a cut pass counts as futile at the dialer and is done again."""
    from regionsync.core.capabilities import BASELINE
    from regionsync.v1 import replication_pb2 as pb

    (b,) = await start(started, make_node(net, "b", ["x"]))  # x: a peer that is not up
    await b.registry_ops.create_tenant("acme", "Acme")
    client = await net.transport("x").connect("b", 1.0)
    await client.send(pb.SyncMessage(hello=pb.Hello(region="x", incarnation=1, protocol=1)))
    assert (await client.recv()).WhichOneof("kind") == "hello"
    await client.send(pb.SyncMessage(tree=pb.TreeLevel(buckets=children(""))))  # a pass
    assert (await client.recv()).WhichOneof("kind") == "tree"
    b.capabilities.set_local(BASELINE)  # an older process joined b's region
    await client.send(pb.SyncMessage(state=pb.StateChunk()))  # the pass goes on
    assert (await client.recv()).WhichOneof("kind") == "ack"
    await client.send(pb.SyncMessage(state=pb.StateChunk(last=True)))  # and ends whole
    assert (await client.recv()).WhichOneof("kind") == "ack"
    assert await client.recv() is None  # then the stream ends
    await client.close()


def test_hash_tree_is_order_free_and_incremental() -> None:
    items = {f"r/k{i}": b"v%d" % i for i in range(500)}
    t1, t2 = HashTree(3), HashTree(3)
    for k in sorted(items):
        t1.put(k, items[k])
    for k in sorted(items, reverse=True):
        t2.put(k, b"old")
        t2.put(k, items[k])
    t2.put("r/extra", b"x")
    t2.discard("r/extra")
    assert all(t1.hash(b) == t2.hash(b) for b in ["", *children("")])
    assert len(t1) == 500 and t1.hash("") != b""
    t2.put("r/k7", b"changed")
    diff = [b for b in children("") if t1.hash(b) != t2.hash(b)]
    assert len(diff) == 1 and "r/k7" in t2.idents(diff)
    assert HashTree(3).hash("") == b""


async def test_tree_built_a_page_at_a_time_equals_the_kept_one(net, started, monkeypatch) -> None:
    from regionsync.runtime import antientropy

    (a,) = await start(started, make_node(net, "a", ["b"]))
    await a.registry_ops.create_tenant("acme", "Acme")
    await a.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
    await a.anti_entropy.warm()
    for i in range(7):
        await a.ingest.publish("acme", "x", b'{"i":%d}' % i, None)
    monkeypatch.setattr(antientropy, "_PAGE", 2)  # 7 events, 7 deliveries: 4 pages each
    paged = await a.anti_entropy._build()
    kept = a.anti_entropy.tree
    assert len(paged) == len(kept) > 14 and a.anti_entropy.builds == 2
    assert paged.hash("") == kept.hash("") and paged.replicated_root() == kept.replicated_root()
    assert await tree_is_current(a)


async def test_a_tree_build_pauses_as_long_as_each_page_took(monkeypatch) -> None:
    """Between two pages a build sleeps as long as the page took (loop time), so over a
    large store it takes at most half of the loop (10,000-item pages without a pause held
    requests 50-400 ms for a restarted node's first 20 s at 1M keys: bench/README.md)."""
    from regionsync.runtime import antientropy

    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    class Loop:
        def __init__(self) -> None:
            self.times = iter([10.25, 10.5])

        def time(self) -> float:
            return next(self.times)

    monkeypatch.setattr(antientropy.asyncio, "sleep", sleep)
    assert await antientropy._pause(Loop(), 10.0) == 10.5  # type: ignore[arg-type]
    assert slept == [0.25]
