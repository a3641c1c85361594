"""Issue 44: usage counter moves wait in the store's carry between records
(``ingest.usage_record_ms``). A carry is recorded once: not before the actor check, and
as the actor that made it when a store restored from an older copy renews its actor."""

from __future__ import annotations

import copy

from memnodes import eventually, make_node, start

from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.core.model import WriteBatch
from regionsync.runtime.node import Node

SLOW = {"ingest": {"usage_record_ms": 60_000}}  # only the first commit records at once


def published(node: Node) -> int:
    view = node.catalog.registry.tenant("acme")
    return -1 if view is None else view.usage["events_published"]


async def test_a_store_restored_from_an_older_copy_counts_its_carry_once(
    net: MemoryNetwork, started: list[Node]
) -> None:
    store = MemoryStore()
    a, b = make_node(net, "a", ["b"], store, SLOW), make_node(net, "b", ["a"])
    await start(started, a, b)
    await a.registry_ops.create_tenant("acme", "A")
    for _ in range(3):
        await a.ingest.publish("acme", "t", b"{}", None)
    assert published(a) == 3
    assert await store.load_usage_carry() == {("acme", "events_published"): 2}
    backup = copy.deepcopy(store)  # the copy an operator restores later
    await a.writer.record_usage()  # records the carry (2) as a's actor
    await eventually(lambda: published(b) == 3)  # and b has the record
    old_actor = a.writer.actor
    await a.stop()
    started.remove(a)

    (a2,) = await start(started, make_node(net, "a", ["b"], backup, SLOW))
    await a2.writer.actor_checked.wait()
    assert a2.writer.renewals == 1 and a2.writer.actor != old_actor  # b saw more of it
    await a2.ingest.publish("acme", "t", b"{}", None)  # records the carry it was opened with
    # 4 everywhere: the restored carry counted as the old actor's entry (a total, which
    # b's copy of the old actor's record already holds), not a second time as a2's
    await eventually(lambda: published(a2) == 4 and published(b) == 4)
    await a2.writer.record_usage()
    await eventually(lambda: a2.catalog.registry.state_hash() == b.catalog.registry.state_hash())
    assert published(a2) == published(b) == 4


async def test_no_usage_record_before_the_actor_check(
    net: MemoryNetwork, started: list[Node]
) -> None:
    """A carry loaded at start is recorded only once the actor is checked: a record
    under an actor a peer has seen more of would reuse its seqs."""
    store = MemoryStore()
    await store.open("a", new_incarnation=5)
    await store.commit(WriteBatch(usage={("acme", "events_published"): 2}))
    await store.close()
    # b is not up: the actor check waits for its Hello (replication.actor_check_s)
    (a,) = await start(started, make_node(net, "a", ["b"], store, SLOW, actor_check_s=60))
    assert not a.writer.actor_checked.is_set()
    await a.writer.record_usage()  # commits, and records nothing
    assert [r for r in await store.records_after({}, 100) if r.kind == "registry"] == []
    assert await store.load_usage_carry() == {("acme", "events_published"): 2}
