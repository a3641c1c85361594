"""Replication never stalls or diverges in silence (issue 12 items 3 and 4), over the
in-memory transport: a store restored from an older copy, state that differs at equal
version vectors, and an accepting side that stops acking."""

from __future__ import annotations

import asyncio
import copy

from memnodes import converged, eventually, make_node, start

from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.model import WriteBatch
from regionsync.v1 import replication_pb2 as pb


async def test_store_restored_from_older_copy_takes_a_new_actor(net, started) -> None:
    store_b = MemoryStore()
    a, b = await start(started, make_node(net, "a", ["b"]), make_node(net, "b", ["a"], store_b))
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: converged(a, b))
    backup = copy.deepcopy(store_b)  # the older copy
    ep1 = await b.registry_ops.create_endpoint("acme", {"url": "https://h.example/1"})
    await b.ingest.publish("acme", "x", b'{"i":1}', None)
    await eventually(lambda: converged(a, b))
    old_actor = b.writer.actor
    await b.stop()

    (b2,) = await start(started, make_node(net, "b", ["a"], backup))
    # its writes wait for a's Hello, which shows a saw more of the old actor: new actor
    ep2 = await b2.registry_ops.create_endpoint("acme", {"url": "https://h.example/2"})
    event, _ = await b2.ingest.publish("acme", "x", b'{"i":2}', None)
    assert b2.writer.actor != old_actor and b2.writer.renewals == 1
    await eventually(lambda: converged(a, b2), timeout_s=5)
    for n in (a, b2):  # nothing dropped as a duplicate, nothing cancelled by a reused dot
        assert n.catalog.registry.endpoint(ep1.id) is not None
        assert n.catalog.registry.endpoint(ep2.id) is not None
        assert await n.store.get_event(event.id) is not None
    await eventually(lambda: b2.view.records_behind(b2.peers["a"]) == 0)  # a's ack follows


async def test_restart_with_peers_unreachable_takes_a_new_actor(net, started) -> None:
    store_b = MemoryStore()
    a, b = await start(started, make_node(net, "a", ["b"]), make_node(net, "b", ["a"], store_b))
    await b.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: converged(a, b))
    old_actor = b.writer.actor
    await b.stop()
    net.partition("a", "b")
    (b2,) = await start(started, make_node(net, "b", ["a"], store_b, actor_check_s=0.2))
    assert not b2.writer.actor_checked.is_set()
    await b2.registry_ops.create_tenant("beta", "Beta")  # held, then under a new actor
    assert b2.writer.actor != old_actor
    net.heal()
    await eventually(lambda: converged(a, b2), timeout_s=5)


async def test_state_differing_at_equal_version_vectors_is_found_and_repaired(net, started) -> None:
    a, b = await start(
        started,
        make_node(net, "a", ["b"], digest_interval_s=0.05),
        make_node(net, "b", ["a"], digest_interval_s=0.05),
    )
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: converged(a, b))
    await eventually(lambda: a.peers["b"].state_agrees is True, timeout_s=5)
    # divergence from any cause: b holds a tenant no record carries
    async with b.writer.lock:
        stamp = b.writer.stamp()
        deltas = b.catalog.registry.create_tenant(
            "ghost", "Ghost", stamp.wall_ms, b.writer.actor, stamp, "local"
        )
        changed = b.catalog.apply(deltas)
        durable = b.writer.submit(
            WriteBatch(registry={k: v.to_bytes() for k, v in changed.items()})
        )
    await durable
    assert a.writer.durable_vv == b.writer.durable_vv
    await eventually(lambda: a.catalog.registry.tenant("ghost") is not None, timeout_s=5)
    await eventually(lambda: converged(a, b), timeout_s=5)
    assert a.counters["digest_mismatches"] + b.counters["digest_mismatches"] >= 1
    await eventually(
        lambda: a.peers["b"].state_agrees is True and b.peers["a"].state_agrees is True,
        timeout_s=5,
    )
    view = a.view.cluster()["peers"][0]
    assert view["state_agrees"] is True and view["last_digest_at_ms"] is not None


async def test_link_without_acks_is_torn_down_and_redialed(net, started) -> None:
    sessions: list[int] = []
    hang = asyncio.Event()

    async def stops_acking(stream) -> None:
        # a fake accepting side: Hello, then the first batch, then nothing (no status)
        sessions.append(len(sessions))
        await stream.recv()
        await stream.send(pb.SyncMessage(hello=pb.Hello(region="b", incarnation=1, protocol=1)))
        await stream.recv()
        await hang.wait()

    await net.transport("b").serve(stops_acking)
    link = {"ack_timeout_s": 0.2, "reconnect_min_s": 0.5, "reconnect_max_s": 0.5}
    (a,) = await start(started, make_node(net, "a", ["b"], **link))
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(
        lambda: (
            a.counters["ack_timeouts"] >= 1 and "no ack within" in (a.peers["b"].last_error or "")
        ),
        timeout_s=5,
    )
    await eventually(lambda: len(sessions) >= 2, timeout_s=5)  # redialed
    hang.set()
