"""Removing a region for good (core/removal.py, runtime/removal.py): the removal
replicates, the remaining regions adopt its custody, its actors leave the version vectors
of Hello and Ack once every remaining region acknowledged, and it is refused until wiped."""

from __future__ import annotations

import pytest
from memnodes import eventually, make_node, start

from regionsync.adapters.memory_store import MemoryStore
from regionsync.errors import Conflict, NotFound
from regionsync.runtime.links import hello


def peer_errors(node, region: str) -> str:
    return node.peers[region].last_error or ""


async def test_removed_region_is_pruned_refused_then_back_when_wiped(net, started) -> None:
    store_a, store_c = MemoryStore(), MemoryStore()
    a, b, c = await start(
        started,
        make_node(net, "a", ["b", "c"], store_a),
        make_node(net, "b", ["a", "c"]),
        make_node(net, "c", ["a", "b"], store_c),
    )
    await c.registry_ops.create_tenant("acme", "Acme")
    c_actor = c.writer.actor
    await eventually(lambda: all(n.catalog.registry.tenant("acme") for n in (a, b)))
    assert c_actor in hello(a.links).hello.version_vector
    await c.stop()

    with pytest.raises(NotFound):
        await a.removals.remove("zz")
    with pytest.raises(Conflict):
        await a.removals.remove("a")
    rec = await a.removals.remove("c")
    assert rec.incarnation == int(c_actor.rpartition(":")[2])
    with pytest.raises(Conflict):
        await a.removals.remove("c")

    # replicated, custody adopted for good by the remaining regions
    await eventually(lambda: "c" in b.catalog.registry.removals())
    for n in (a, b):
        assert n.catalog.registry.custody()["c"].live == ("a", "b")
    # once b acknowledged (and a did, for b), c's actor leaves both sides' Hello and Ack
    await eventually(lambda: c_actor in a.removals.retired() and c_actor in b.removals.retired())
    for n in (a, b):
        assert c_actor not in hello(n.links).hello.version_vector
        assert n.catalog.registry.tenant("acme") is not None  # its data stays merged
    # the retirement is written into the removal record (read again after a restart)
    await a.removals.publish()
    assert await a.removals.publish() == 0  # written once
    await eventually(lambda: b.catalog.registry.removals()["c"].retired == (c_actor,))
    await a.stop()
    a = make_node(net, "a", ["b", "c"], store_a)
    await start(started, a)
    # once b's Hello says it reads removal records (until then a writes the older form)
    await eventually(lambda: c_actor not in hello(a.links).hello.version_vector)

    # back with its old store: refused by both, on both sides of the link
    c2 = make_node(net, "c", ["a", "b"], store_c)
    await start(started, c2)
    await eventually(lambda: "hello refused" in peer_errors(c2, "a") or a.removals.refused > 0)
    await eventually(lambda: a.removals.refused > 0 and b.removals.refused > 0)
    assert not any(p.connected for p in c2.peers.values())
    await c2.stop()

    # wiped: a new incarnation from an empty store is accepted and bootstrapped
    store_c.wipe()
    c3 = make_node(net, "c", ["a", "b"], store_c)
    await start(started, c3)
    assert c3.writer.actor != c_actor
    await eventually(lambda: c3.catalog.registry.tenant("acme") is not None)
    await eventually(lambda: a.peers["c"].connected)
