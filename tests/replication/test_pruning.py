"""Pruning a removed region's actor from the stored state (issue 40, runtime/pruning.py):
once every remaining region acknowledged the removal, the actor leaves every stored
registry state and the stored version vector, in every region alike (equal digests), a
restart keeps it pruned, a late state still carrying it is pruned on arrival, and nothing
is pruned while a region's release cannot read removal records."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from memnodes import eventually, make_node, start

from crdt import RETIRED, ORSet, PNCounter
from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.capabilities import ALL, BASELINE
from regionsync.core.pruning import SINK, actors_of
from regionsync.runtime.links import hello

FAST = {"heartbeat_s": 0.1, "retired_compact_s": 1.0}


def holds(node: Any, actor: str) -> list[str]:
    """The keys whose stored state has an entry of ``actor`` (an OR-Set element that
    still holds one of its dots is its identity: not counted)."""
    out = []
    for key, state in node.catalog.registry.non_empty():
        if actor not in actors_of(state):
            continue
        if isinstance(state, ORSet) and any(
            d[0] == actor for dots in state.entries.values() for d in dots
        ):
            continue
        out.append(key)
    return out


def pruned(node: Any, actor: str) -> bool:
    return actor not in node.writer.version_vector and not holds(node, actor)


async def three(
    net: Any, started: list[Any], store_a: MemoryStore | None = None,
    store_b: MemoryStore | None = None,
) -> tuple[Any, Any, Any]:  # fmt: skip
    return await start(
        started,
        make_node(net, "a", ["b", "c"], store_a, **FAST),
        make_node(net, "b", ["a", "c"], store_b, **FAST),
        make_node(net, "c", ["a", "b"], **FAST),
    )


async def write_everything(a: Any, c: Any) -> None:
    """c writes into every CRDT type: a tenant it deletes again (OR-Set context), a name
    on a's tenant (LWW clock) and events (the usage PNCounter)."""
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: c.catalog.registry.has_tenant("acme"))
    await c.registry_ops.create_tenant("gone", "Gone")
    await c.registry_ops.delete_tenant("gone")
    await c.registry_ops.patch_tenant("acme", {"name": "Renamed by c"})
    for i in range(3):
        await c.ingest.publish("acme", "x", b'{"i":%d}' % i, None)


async def test_removed_actor_leaves_every_stored_state_alike_and_stays_out(net, started) -> None:
    store_a = MemoryStore()
    a, b, c = await three(net, started, store_a)
    await write_everything(a, c)
    c_actor = c.writer.actor
    usage = "t/acme/usage/events_published"
    await eventually(lambda: all(n.catalog.registry.get(usage, PNCounter).value() == 3
                                 for n in (a, b)))  # fmt: skip
    await eventually(lambda: all(holds(n, c_actor) for n in (a, b)))
    before = {n.region: holds(n, c_actor) for n in (a, b)}
    assert {usage, "tenants", "t/acme/name"} <= set(before["a"])  # every type
    old = dict(b.catalog.registry.non_empty())  # a late peer's state, kept for below
    await c.stop()
    await a.removals.remove("c")

    await eventually(lambda: pruned(a, c_actor) and pruned(b, c_actor), timeout_s=20)
    # the counter keeps c's totals under its retired entry, then (retired_compact_s
    # later) compacts them into the shared sink, in every region alike
    seen = [a.catalog.registry.get(usage, PNCounter).p]
    await eventually(
        lambda: seen.append(a.catalog.registry.get(usage, PNCounter).p) or all(
            SINK in n.catalog.registry.get(usage, PNCounter).p for n in (a, b)),
        timeout_s=20,
    )  # fmt: skip
    assert RETIRED + c_actor in seen[0] and SINK not in seen[0]
    await eventually(lambda: a.catalog.registry.digest() == b.catalog.registry.digest())
    for n in (a, b):
        assert n.catalog.registry.get(usage, PNCounter).value() == 3  # value kept
        assert n.catalog.registry.get(usage, PNCounter).p == {SINK: 3}
        assert n.catalog.registry.tenant("acme").name == "Renamed by c"
        assert not n.catalog.registry.has_tenant("gone")
        assert c_actor not in hello(n.links).hello.version_vector
    assert c_actor not in await store_a.load_version_vector()

    # a late state carrying the removed actor is pruned on arrival
    changed = a.catalog.apply(old)
    assert not any(c_actor in actors_of(s) for s in changed.values())
    assert not holds(a, c_actor) and not a.catalog.registry.has_tenant("gone")
    assert a.catalog.registry.get(usage, PNCounter).value() == 3
    assert a.catalog.registry.digest() == b.catalog.registry.digest()

    # a restart keeps it pruned (the states and the version vector went through the store)
    await a.stop()
    a2 = make_node(net, "a", ["b", "c"], store_a, **FAST)
    await start(started, a2)
    assert pruned(a2, c_actor)
    assert a2.catalog.registry.get(usage, PNCounter).value() == 3
    # b may have written since (custody, its own records): the two agree once a2 caught up
    await eventually(lambda: a2.catalog.registry.digest() == b.catalog.registry.digest())
    assert pruned(a2, c_actor) and a2.catalog.registry.get(usage, PNCounter).value() == 3


async def test_a_counter_pruned_elsewhere_is_never_counted_twice(net, started) -> None:
    """A full state pruned by one region reaches a region that has not pruned yet."""
    a, b, c = await three(net, started)
    await write_everything(a, c)
    c_actor = c.writer.actor
    usage = "t/acme/usage/events_published"
    await eventually(lambda: b.catalog.registry.get(usage, PNCounter).value() == 3)
    await c.stop()
    b.removals.pruner.prune = _never  # b never prunes by itself
    await a.removals.remove("c")
    await eventually(lambda: pruned(a, c_actor), timeout_s=20)
    assert c_actor in b.writer.version_vector
    b.catalog.apply({usage: a.catalog.registry.get(usage, PNCounter)})
    assert b.catalog.registry.get(usage, PNCounter).value() == 3
    assert c_actor not in actors_of(b.catalog.registry.get(usage, PNCounter))


async def test_a_process_that_has_not_read_the_retirement_counts_a_pruned_counter_once(
    net, started
) -> None:
    """Issue 40's race inside a PostgreSQL region: a process that has not read the
    retirement marker yet (b here, blind to it) merges a counter row another process
    already pruned. With a collapse into the shared sink it counted c's total twice
    (6 instead of 3, on 917426d); the retired entry absorbs c's plain one. Both merge
    paths: a replicated state (the registry's merge) and a row join (PostgreSQL)."""
    slow = {**FAST, "retired_compact_s": 600.0}  # the retired entry is not compacted yet
    a, b, c = await start(
        started,
        make_node(net, "a", ["b", "c"], **slow),
        make_node(net, "b", ["a", "c"], **slow),
        make_node(net, "c", ["a", "b"], **slow),
    )
    await write_everything(a, c)
    c_actor = c.writer.actor
    usage = "t/acme/usage/events_published"
    await eventually(lambda: b.catalog.registry.get(usage, PNCounter).value() == 3)
    await c.stop()
    b.removals.pruner.prune = _never
    b.removals.is_retired = lambda actor: False  # has not read any marker
    await a.removals.remove("c")
    await eventually(lambda: pruned(a, c_actor), timeout_s=20)
    row = a.catalog.registry.get(usage, PNCounter)
    stale = b.catalog.registry.get(usage, PNCounter)
    assert c_actor in stale.p and c_actor not in row.p
    assert b.removals.pruner.join(row, stale).value() == 3
    assert b.removals.pruner.join(stale, row).value() == 3
    b.catalog.apply({usage: row})
    assert b.catalog.registry.get(usage, PNCounter).value() == 3
    # b's next increment counts on from c's total, not beside it
    await b.ingest.publish("acme", "x", b"{}", None)
    await eventually(lambda: a.catalog.registry.get(usage, PNCounter).value() == 4)


async def test_a_restarted_process_still_strips_a_removed_element_of_a_pruned_actor(
    net, started
) -> None:
    """The guard that strips an arriving OR-Set of a pruned actor's removed dots holds
    across a restart (and so across the processes of a PostgreSQL region: it reads the
    store's ``born`` row, not this process's memory). On 917426d the restarted node
    let a late state resurrect a tenant created by the removed region and deleted."""
    store_a = MemoryStore()
    a, b, c = await three(net, started, store_a)
    await a.registry_ops.create_tenant("acme", "Acme")
    await c.registry_ops.create_tenant("late", "Late")  # its dot is c's
    await eventually(lambda: all(n.catalog.registry.has_tenant("late") for n in (a, b)))
    late = {"tenants": b.catalog.registry.state("tenants")}  # a lagging copy
    await a.registry_ops.delete_tenant("late")
    await eventually(lambda: not b.catalog.registry.has_tenant("late"))
    c_actor = c.writer.actor
    await c.stop()
    await a.removals.remove("c")
    await eventually(lambda: pruned(a, c_actor) and pruned(b, c_actor), timeout_s=20)
    await a.stop()
    a2 = make_node(net, "a", ["b", "c"], store_a, **FAST)
    await start(started, a2)
    assert pruned(a2, c_actor) and c_actor not in a2.removals.pruner._held
    a2.catalog.apply(late)
    assert not a2.catalog.registry.has_tenant("late")
    assert a2.catalog.registry.digest() == b.catalog.registry.digest()
    # a store born after c started (a region that joined later) never strips c's dots
    pruner = a2.removals.pruner
    assert pruner.held(c_actor) and pruner.born_ms == (await store_a.open("a", 0)).born_ms
    pruner.born_ms = int(c_actor.rpartition(":")[2]) + 1
    assert not pruner.held(c_actor)


async def test_without_the_capability_counters_collapse_into_the_sink_at_once(net, started) -> None:
    """A region that does not read retired counter entries (917426d) holds the cluster
    to the previous form: totals collapse into the shared sink, no ``~retired:<actor>``
    entry is ever written (917426d would sum it beside the sink)."""
    older = ALL - {"counter-retired-entries"}
    slow = {**FAST, "retired_compact_s": 600.0}
    a, b, c = await start(
        started,
        make_node(net, "a", ["b", "c"], **slow),
        make_node(net, "b", ["a", "c"], reads=older, **slow),
        make_node(net, "c", ["a", "b"], **slow),
    )
    await write_everything(a, c)
    c_actor = c.writer.actor
    usage = "t/acme/usage/events_published"
    await eventually(lambda: b.catalog.registry.get(usage, PNCounter).value() == 3)
    assert not a.capabilities.enabled("counter-retired-entries")
    await c.stop()
    await a.removals.remove("c")
    await eventually(lambda: pruned(a, c_actor) and pruned(b, c_actor), timeout_s=20)
    for n in (a, b):
        assert n.catalog.registry.get(usage, PNCounter).p == {SINK: 3}


async def _never() -> int:
    return 0


async def test_no_pruning_while_a_previous_release_peer_holds_the_feature_set_back(
    net, started
) -> None:
    store_b = MemoryStore()
    a, b, c = await three(net, started, store_b=store_b)
    await write_everything(a, c)
    c_actor = c.writer.actor
    await eventually(lambda: bool(holds(b, c_actor)) and bool(holds(a, c_actor)))
    await c.stop()
    await b.stop()
    await a.removals.remove("c")  # b was last heard reading removal records
    # b comes back on the previous release (a rollback): the feature set drops
    b2 = make_node(net, "b", ["a", "c"], store_b, reads=BASELINE, **FAST)
    await start(started, b2)
    await eventually(lambda: not a.removals.enabled())
    await asyncio.sleep(1.0)  # ten retirement rounds
    assert c_actor in a.writer.version_vector and holds(a, c_actor)
    assert c_actor in b2.writer.version_vector and holds(b2, c_actor)
    # upgraded again: pruned on both sides, alike
    await b2.stop()
    b3 = make_node(net, "b", ["a", "c"], store_b, **FAST)
    await start(started, b3)
    await eventually(lambda: pruned(a, c_actor) and pruned(b3, c_actor), timeout_s=20)
    await eventually(lambda: a.catalog.registry.digest() == b3.catalog.registry.digest())


async def test_a_registry_reloaded_whole_learns_the_retirement_before_the_counters(
    net, started
) -> None:
    """A process reloading its region's registry from the store (its records were
    truncated while it stalled) gets the removal record and a counter already compacted
    of the removed actor in one merge. Merged in key order, the counter came before the
    record: its stale plain entry of c stood beside the sink that holds c's total
    (6 instead of 3); the records and markers are merged first."""
    store_b = MemoryStore()
    a, b, c = await three(net, started, store_b=store_b)
    await write_everything(a, c)
    usage = "t/acme/usage/events_published"
    await eventually(lambda: b.catalog.registry.get(usage, PNCounter).value() == 3)
    c_seq = c.writer.version_vector[c.writer.actor]  # in b's store too, not only applied
    await eventually(lambda: b.writer.durable_vv.get(c.writer.actor, 0) >= c_seq)
    stale = copy.deepcopy(store_b)  # b's store before the removal: c's plain entry
    c_actor = c.writer.actor
    await c.stop()
    await a.removals.remove("c")
    await eventually(
        lambda: pruned(a, c_actor) and a.catalog.registry.get(usage, PNCounter).p == {SINK: 3},
        timeout_s=20,
    )
    await b.stop()
    net.partition("a", "b")  # what b2 learns comes from the merge below only
    (b2,) = await start(started, make_node(net, "b", ["a", "c"], stale, **FAST))
    assert not b2.removals.any_retired()
    assert b2.catalog.registry.get(usage, PNCounter).p.get(c_actor) == 3
    b2.catalog.apply({k: a.catalog.registry.state(k) for k in (usage, "x/c")})
    assert b2.removals.is_retired(c_actor)
    assert b2.catalog.registry.get(usage, PNCounter).value() == 3
