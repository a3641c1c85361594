"""Replicated records whose values no store keeps, or whose sets hold non-ids, are refused
one by one and never merged (a helper's attack, 2026-12-01). Before: a NaN latency made
SQLite fail the whole group commit, so the valid records beside it were lost and the
origin's stream stalled on every resend; an int in a registry set broke the registry's
views until a restart; and a record's held copy, replaced by a concurrent call between
the decoding and the lock, was merged with the other copy's decoding."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgpack
from memnodes import make_node

from crdt import ORSet
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.core.model import Attempt, Delivery, DeliveryStatus, Event, Record
from regionsync.core.records import encode_body


def _rec(node, origin: str, seq: int, kind: str, body: bytes) -> Record:
    return Record(origin, seq, kind, body, (node.clock.wall_ms() - 10, seq))


def _event(i: str, origin: str) -> bytes:
    return encode_body(event=Event(f"evt_{i}", "acme", "a.b", b"{}", origin, 1000))


async def test_a_nan_latency_is_refused_alone_on_sqlite(net, started, tmp_path: Path) -> None:
    a = make_node(net, "a", [], store=SqliteStore(tmp_path / "a.db"))
    await a.start()
    started.append(a)
    d = Delivery("dlv_1", "evt_q", "ep_1", "acme", DeliveryStatus.PENDING, 1, 5, "x", 1, 2)
    att = Attempt("dlv_1", 1, 3, "x", 500, 12.5, "http_500", "oops", "ep_1", 0, "", "")
    body = msgpack.unpackb(encode_body(delivery=d, attempt=att))
    body["attempt"]["latency_ms"] = float("nan")
    bad = _rec(a, "x", 1, "delivery", msgpack.packb(body, use_bin_type=True))
    good = _rec(a, "y", 1, "event", _event("y1", "y"))
    rejected = await a.replica.apply_records([good, bad])
    assert [(r.origin, r.seq) for r in rejected] == [("x", 1)]
    assert "latency_ms" in rejected[0].reason
    # moved past (issue 41), never merged
    assert a.writer.durable_vv == {"x": 1, "y": 1} and a.counters["records_rejected"] == 1
    assert await a.store.get_event("evt_y1") is not None
    assert await a.store.get_deliveries(["dlv_1"]) == {}
    await a.registry_ops.create_tenant("later", "T")  # the node's own commits go on
    assert a.catalog.registry.tenant("later") is not None


async def test_a_set_with_a_non_id_is_refused(net, started) -> None:
    a = make_node(net, "a", [])
    await a.start()
    started.append(a)
    await a.registry_ops.create_tenant("acme", "Acme")
    bad = encode_body(registry={"t/acme/endpoints": ORSet.empty().add(5, actor="x")})
    rejected = await a.replica.apply_records([_rec(a, "x", 1, "registry", bad)])
    assert len(rejected) == 1 and "holds an element" in rejected[0].reason
    assert a.catalog.registry.endpoints("acme") == []  # the views still work
    await a.registry_ops.create_tenant("other", "T")


async def test_a_held_copy_replaced_meanwhile_is_decoded_itself(net, started) -> None:
    a = make_node(net, "a", [])
    await a.start()
    started.append(a)
    assert await a.replica.apply_records([_rec(a, "o", 2, "event", _event("h2", "o"))]) == []
    assert 2 in a.replica.held["o"]  # held: seq 1 is missing
    malformed = _rec(a, "o", 2, "event", b"\x81\xa5event\xc0")  # {"event": nil}
    first = _rec(a, "o", 1, "event", _event("x1", "o"))
    await a.writer.lock.acquire()  # both calls decode, then wait for the lock
    other = asyncio.create_task(a.replica.apply_records([malformed]))  # replaces the held copy
    await asyncio.sleep(0)
    mine = asyncio.create_task(a.replica.apply_records([first]))  # decoded the valid copy
    await asyncio.sleep(0)
    a.writer.lock.release()
    assert await other == []
    rejected = await mine
    assert [(r.origin, r.seq) for r in rejected] == [("o", 2)]
    # refused and moved past (issue 41): kept opaque in the log as it came, never merged
    assert a.writer.durable_vv == {"o": 2}
    logged = {(r.origin, r.seq): r.body for r in await a.store.records_after({}, 100)}
    assert logged[("o", 2)] == malformed.body and await a.store.get_event("evt_h2") is None
