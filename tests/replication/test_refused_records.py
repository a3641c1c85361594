"""A record a peer cannot apply (issue 41): it never blocks the ones after it, the peer
keeps it opaque and forwards it, states converge by anti-entropy, a repair that cannot
change the outcome backs off, and custody readiness never waits on refused records.

Before issue 41 each of these failed: the refused record stopped its origin's later
records at the peer for good (held), the repair looped once per digest interval, and a
node refusing its peers' records never became ready to deliver."""

from __future__ import annotations

import asyncio

import pytest
from memnodes import eventually, make_node

from crdt import LWWRegister, Timestamp
from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.model import Record
from regionsync.core.records import encode_body
from regionsync.errors import MalformedRecord


def _undecodable(node, seq: int) -> Record:
    """A registry record whose body is not msgpack at all (no release decodes it)."""
    return Record("o:1", seq, "registry", b"\xc1not msgpack", (node.clock.wall_ms() - 10, 0))


def _tenant_record(node, seq: int, tenant: str) -> Record:
    """A record naming tenant ``tenant`` (its name register)."""
    stamp = (node.clock.wall_ms() - 10, seq)
    crdt = LWWRegister().set(f"tenant {tenant}", actor="o:1", stamp=Timestamp(*stamp))
    return Record("o:1", seq, "registry", encode_body(registry={f"t/{tenant}/name": crdt}), stamp)


async def _named(node) -> list[str]:
    return sorted(k.split("/")[1] for k in await node.store.load_registry() if k.endswith("/name"))


async def _start(started, *nodes):
    for n in nodes:
        await n.start()
        started.append(n)
    return nodes


@pytest.mark.parametrize("order", ["one batch", "one by one, reversed"])
async def test_a_refused_record_then_its_successors_apply_and_a_restart_keeps_it(
    net, started, order: str
) -> None:
    store = MemoryStore()
    (a,) = await _start(started, make_node(net, "a", [], store))
    recs = [_tenant_record(a, s, f"t{s}") for s in range(1, 8)]
    recs[2] = _undecodable(a, 3)  # seq N = 3, then N+1..N+5 (and 1, 2 before it)
    if order == "one batch":
        rejected = await a.replica.apply_records(recs)
    else:
        rejected = []
        for r in reversed(recs):  # out of order: held until 1 arrives
            rejected += await a.replica.apply_records([r])
    assert [(e.origin, e.seq) for e in rejected] == [("o:1", 3)]
    assert "msgpack" in rejected[0].reason
    assert a.writer.durable_vv == {"o:1": 7}  # moved past N; N+1..N+5 applied
    assert await _named(a) == ["t1", "t2", "t4", "t5", "t6", "t7"]
    assert a.replica.held == {}
    note = a.replica.refusals_view()["o:1"]
    assert (note["count"], note["skipped"], note["last_seq"]) == (1, 1, 3)
    logged = {(r.origin, r.seq): r.body for r in await a.store.records_after({}, 100)}
    assert logged[("o:1", 3)] == recs[2].body  # kept opaque: forwarded as it came
    await a.stop()
    started.remove(a)
    (a2,) = await _start(started, make_node(net, "a", [], store))
    assert a2.writer.durable_vv == {"o:1": 7}  # the skip survives the restart
    assert await a2.replica.apply_records(recs) == []  # all duplicates now, none refused
    assert a2.counters["records_rejected"] == 0 and "t3" not in await _named(a2)


def _old_release(node, refuse) -> None:
    """Make ``node`` refuse the records ``refuse(record)`` names, as an older release
    that cannot read them would."""
    apply_one = node.replica._apply_one

    def patched(r, decoded, *rest):
        if (reason := refuse(r)) is not None:
            if reason.startswith("clock_drift"):
                node.counters["clock_drift"] += 1
            raise MalformedRecord(r.origin, r.seq, reason)
        return apply_one(r, decoded, *rest)

    node.replica._apply_one = patched


async def test_an_old_region_between_two_new_ones_forwards_what_it_refuses(net, started) -> None:
    """a - b - c in a line, b older: it refuses a's record but forwards it to c, which
    reads it; a's digest then differs from b's and anti-entropy brings b the state."""
    fast = {"digest_interval_s": 0.2, "heartbeat_s": 0.1}
    a, b, c = (make_node(net, "a", ["b"], **fast), make_node(net, "b", ["a", "c"], **fast),
               make_node(net, "c", ["b"], **fast))  # fmt: skip
    await _start(started, a, b, c)
    marked: set[tuple[str, int]] = set()
    _old_release(b, lambda r: "unknown section 'x'" if (r.origin, r.seq) in marked else None)
    await a.registry_ops.create_tenant("t1", "One")
    await eventually(lambda: c.catalog.registry.has_tenant("t1"))
    async with a.writer.local_lock():
        marked.add((a.writer.actor, a.writer.version_vector[a.writer.actor] + 1))
    await a.registry_ops.create_tenant("new", "Written by a newer release")
    for i in range(5):  # the records after it flow through b at once
        await a.registry_ops.create_tenant(f"after{i}", "After")
    await eventually(lambda: c.catalog.registry.has_tenant("after4"))
    await eventually(lambda: c.catalog.registry.has_tenant("new"))  # forwarded by b
    assert b.counters["records_rejected"] == 1 and c.counters["records_rejected"] == 0
    await eventually(lambda: b.catalog.registry.has_tenant("new"))  # by anti-entropy
    assert a.counters["anti_entropy_passes"] + c.counters["anti_entropy_passes"] >= 1
    (origin, seq) = next(iter(marked))
    assert b.replica.refusals_view()[origin]["last_seq"] == seq  # the receiver's side
    await eventually(lambda: origin in a.peers["b"].refused)  # ... and the sender's
    view = a.view.cluster()
    assert [p["refused"][origin]["last_seq"] for p in view["peers"]] == [seq]


async def test_a_repair_that_cannot_change_the_outcome_backs_off(net, started) -> None:
    """b drops every state chunk (as if it refused them): the digests keep differing.
    Before issue 41 the link repaired once per digest interval for ever; now each futile
    pass doubles the wait (repair_backoff), and /v1/cluster shows it."""
    fast = {"digest_interval_s": 0.1, "heartbeat_s": 0.05}
    a, b = await _start(started, make_node(net, "a", ["b"], **fast), make_node(net, "b", ["a"]))
    await a.registry_ops.create_tenant("t1", "One")
    await eventually(lambda: b.catalog.registry.has_tenant("t1"))

    async def drop(items, version_vector=None):
        return None  # "merged": nothing changes

    b.anti_entropy.apply_state = drop  # type: ignore[method-assign]
    marked: set[tuple[str, int]] = set()
    _old_release(b, lambda r: "unknown section 'x'" if (r.origin, r.seq) in marked else None)
    async with a.writer.local_lock():
        marked.add((a.writer.actor, a.writer.version_vector[a.writer.actor] + 1))
    await a.registry_ops.create_tenant("t2", "Two")
    await eventually(lambda: a.counters["anti_entropy_passes"] >= 3, timeout_s=15)
    await asyncio.sleep(2.0)
    # backing off: passes 0.1, 0.2, 0.4, 0.8, 1.6 s apart at least; a loop repairs about
    # once per digest interval (0.1 s): 15 or more in these 2 s
    assert a.counters["anti_entropy_passes"] <= 7, a.counters["anti_entropy_passes"]
    repair = a.view.cluster()["peers"][0]["repair"]
    assert repair["futile"] >= 3 and repair["backoff_s"] <= 0.1 * 32
    assert not b.catalog.registry.has_tenant("t2")


@pytest.mark.parametrize("reason", ["clock_drift: remote 600000 ms ahead", "unknown section"])
async def test_a_node_refusing_every_peer_record_still_becomes_ready_and_delivers(
    net, started, reason: str
) -> None:
    """Issue 41: b restarts while it refuses every record of its peers (for clock drift,
    as an older release does, or a section it cannot read): it moves past them.
    Readiness waits for what its peers hold of third regions (c's records at a, a's at
    c), which b refuses: before, it never became ready and its 3 acknowledged publishes
    stayed pending."""
    cfg = {"failover_after_s": 120.0, "heartbeat_s": 0.1, "custody_interval_s": 0.05}
    store_b = MemoryStore()
    a, b, c = (make_node(net, "a", ["b", "c"], **cfg),
               make_node(net, "b", ["a", "c"], store_b, **cfg),
               make_node(net, "c", ["a", "b"], **cfg))  # fmt: skip
    await _start(started, a, b, c)
    await b.registry_ops.create_tenant("acme", "Acme")
    await b.registry_ops.create_endpoint("acme", {"url": "https://h.example/hook"})
    await eventually(lambda: b.custody.ready)
    b.custody.ready, b.custody.caught_up = False, lambda suspects: False  # type: ignore
    ids = [(await b.ingest.publish("acme", "x", b'{"i":%d}' % i, None))[0].id for i in range(3)]
    assert b.sender.requests == []  # type: ignore[attr-defined]
    await b.stop()
    started.remove(b)
    await a.registry_ops.create_tenant("from-a", "A")  # the peers move on meanwhile
    await c.registry_ops.create_tenant("from-c", "C")
    await eventually(lambda: a.catalog.registry.has_tenant("from-c"))
    await eventually(lambda: c.catalog.registry.has_tenant("from-a"))
    b2 = make_node(net, "b", ["a", "c"], store_b, **cfg)
    _old_release(b2, lambda r: reason if r.origin != b2.writer.actor else None)
    await _start(started, b2)
    await eventually(lambda: b2.custody.ready, timeout_s=15)
    await eventually(lambda: len(b2.sender.requests) >= 3, timeout_s=15)  # type: ignore
    sent = {r.headers["webhook-id"] for r in b2.sender.requests}  # type: ignore[attr-defined]
    assert set(ids) <= sent
    assert b2.counters["records_rejected"] >= 1
