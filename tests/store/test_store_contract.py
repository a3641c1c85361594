"""One contract suite, run against every Store: memory, SQLite (real files) and PostgreSQL
(a real server, tests/pgserver.py; a fresh database per test)."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.postgres_store import PostgresStore
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.core.model import (
    Attempt,
    AuditEntry,
    Delivery,
    DeliveryQuery,
    DeliveryStatus,
    Event,
    EventQuery,
    Record,
    WriteBatch,
)

REGION = "eu-central-1"


def _delivery(i: int, status: DeliveryStatus = DeliveryStatus.PENDING, at: int = 100) -> Delivery:
    return Delivery(f"dlv_{i:03}", f"evt_{i:03}", "ep_1", "acme", status, 0, at, REGION, i, i)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator:
    if request.param == "postgresql":
        s = PostgresStore(request.getfixturevalue("pg_url"))
    else:
        s = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "n.db")
    info = await s.open(REGION, new_incarnation=7)
    assert info.fresh and info.incarnation == 7
    yield s
    await s.close()


async def test_reopen_keeps_incarnation(store, tmp_path: Path) -> None:
    await store.close()
    info = await store.open(REGION, new_incarnation=99)
    assert not info.fresh and info.incarnation == 7
    await store.close()
    with pytest.raises(ValueError):
        await store.open("us-east-1", new_incarnation=1)
    await store.open(REGION, new_incarnation=1)


async def test_renew_incarnation_survives_reopen(store) -> None:
    await store.renew_incarnation(8)
    await store.close()
    info = await store.open(REGION, new_incarnation=99)
    assert not info.fresh and info.incarnation == 8
    assert info.born_ms == 7  # when it started empty: renewals leave it (pruning's held)


async def test_commit_and_read_back(store) -> None:
    ev = Event("evt_001", "acme", "a.b", b'{"k":1}', REGION, 10)
    rec = Record("eu-central-1:7", 1, "event", b"\x80", (10, 0))
    d = _delivery(1)
    batch = WriteBatch(
        registry={"tenants": b"x"},
        records=[rec],
        version_vector={"eu-central-1:7": 1},
        events=[ev],
        deliveries=[d],
        attempts=[Attempt("dlv_001", 1, 11, REGION, 500, 1.5, "http_500", "oops")],
        idempotency=[("acme", "k1", "evt_001", "abc", 10, REGION)],
    )
    sent = Attempt("dlv_001", 2, 12, REGION, 204, 2.0, None, "", "ep_1", 0, "", "g1",
                   "webhook-id: evt_001\nwebhook-signature: v1,abc=\nx-team: blue")  # fmt: skip
    batch.attempts.append(sent)
    await store.commit(batch)
    assert await store.load_registry() == {"tenants": b"x"}
    assert await store.load_version_vector() == {"eu-central-1:7": 1}
    assert await store.get_event("evt_001") == ev
    assert await store.get_event("nope") is None
    assert await store.get_delivery("dlv_001") == d
    assert await store.deliveries_of_event("evt_001") == [d]
    assert await store.load_idempotency() == [("acme", "k1", "evt_001", "abc", 10, REGION)]
    attempts = await store.attempts_of("dlv_001")
    assert [(a.n, a.status_code, a.error) for a in attempts] == [
        (1, 500, "http_500"), (2, 204, None)
    ]  # fmt: skip
    assert attempts[0].request_headers == "" and attempts[1] == sent
    assert await store.list_attempts("ep_1", True, None, None, 10) == [sent]
    assert await store.records_after({}, 10) == [rec]
    counts = await store.counts(REGION)
    assert counts["events"] == 1 and counts["events_accepted"] == 1
    assert counts["deliveries_pending"] == 1 and counts["deliveries_delivered"] == 0
    assert await store.pending_count(REGION) == 1 and await store.pending_count("other") == 0
    await store.commit(WriteBatch(deliveries=[_delivery(2), _delivery(3, DeliveryStatus.DEAD)]))
    assert await store.pending_count(REGION) == 2


async def test_duplicates_are_ignored_and_vv_only_grows(store) -> None:
    r1 = Record("a:1", 1, "registry", b"1", (1, 0))
    await store.commit(WriteBatch(records=[r1], version_vector={"a:1": 5}))
    await store.commit(
        WriteBatch(
            records=[Record("a:1", 1, "registry", b"other", (2, 0))], version_vector={"a:1": 3}
        )
    )
    assert await store.records_after({}, 10) == [r1]
    assert await store.load_version_vector() == {"a:1": 5}


async def test_records_after_per_origin_in_order_with_limit(store) -> None:
    recs = [Record(o, s, "registry", b"", (s, 0)) for o in ("a:1", "b:1") for s in (1, 2, 3)]
    await store.commit(WriteBatch(records=list(reversed(recs))))
    got = await store.records_after({"a:1": 1}, 100)
    assert [(r.origin, r.seq) for r in got] == [("a:1", 2), ("a:1", 3), ("b:1", 1), ("b:1", 2),
                                                ("b:1", 3)]  # fmt: skip
    got = await store.records_after({"a:1": 0, "b:1": 2}, 2)
    assert [(r.origin, r.seq) for r in got] == [("a:1", 1), ("a:1", 2)]


async def test_due_deliveries_order_and_exclusion(store) -> None:
    ds = [_delivery(1, at=300), _delivery(2, at=100), _delivery(3, at=200), _delivery(4, at=999)]
    ds.append(_delivery(5, DeliveryStatus.DELIVERED, at=50))
    await store.commit(WriteBatch(deliveries=ds))
    due = await store.due_deliveries(REGION, 300, 10, [])
    assert [d.id for d in due] == ["dlv_002", "dlv_003", "dlv_001"]
    due = await store.due_deliveries(REGION, 300, 1, ["dlv_002"])
    assert [d.id for d in due] == ["dlv_003"]
    assert await store.due_deliveries("us-east-1", 300, 10, []) == []
    assert await store.next_due_ms(REGION) == 100


def _to(i: int, endpoint: str, at: int, tenant: str = "acme") -> Delivery:
    return Delivery(
        f"dlv_{endpoint}_{i:05}", f"evt_{i}", endpoint, tenant, DeliveryStatus.PENDING, 0, at,
        REGION, i, i,
    )  # fmt: skip


async def _blocked_backlog(store, n: int) -> None:
    """``n`` deliveries of two endpoints (ep_b1, ep_b2) due at 1..n, all before those of
    ep_1 (due at 5000, 5001, 5003) and ep_2 (5002, 5004); ep_1 and ep_2 also have one
    delivery not yet due (9000)."""
    rows = [_to(i, f"ep_b{1 + i % 2}", 1 + i, "noisy") for i in range(n)]
    rows += [_to(1, "ep_1", 5000), _to(2, "ep_1", 5001), _to(3, "ep_2", 5002)]
    rows += [_to(4, "ep_1", 5003), _to(5, "ep_2", 5004), _to(6, "ep_1", 9000)]
    rows += [_to(7, "ep_2", 9000)]
    await store.commit(WriteBatch(deliveries=rows))


async def test_due_deliveries_behind_a_blocked_backlog(store) -> None:
    await _blocked_backlog(store, 300)
    blocked = ["ep_b1", "ep_b2"]
    due = await store.due_deliveries(REGION, 8000, 3, [], blocked)
    assert [d.id for d in due] == ["dlv_ep_1_00001", "dlv_ep_1_00002", "dlv_ep_2_00003"]
    # in flight rows are skipped, the merge across endpoints keeps the global order
    due = await store.due_deliveries(REGION, 8000, 10, ["dlv_ep_1_00001"], blocked)
    assert [d.id for d in due] == [
        "dlv_ep_1_00002", "dlv_ep_2_00003", "dlv_ep_1_00004", "dlv_ep_2_00005"
    ]  # fmt: skip
    due = await store.due_deliveries(REGION, 8000, 10, [], [*blocked, "ep_1"])
    assert [d.id for d in due] == ["dlv_ep_2_00003", "dlv_ep_2_00005"]
    # nothing blocked: the blocked endpoints' rows come first again, in order
    due = await store.due_deliveries(REGION, 8000, 3, ["dlv_ep_b1_00000"])
    assert [d.id for d in due] == ["dlv_ep_b2_00001", "dlv_ep_b1_00002", "dlv_ep_b2_00003"]
    assert await store.due_deliveries(REGION, 4999, 5, [], blocked) == []
    # a delivery that is no longer pending leaves its endpoint's head
    done = dataclasses.replace(due[0], status=DeliveryStatus.DELIVERED, next_attempt_at_ms=None)
    await store.commit(WriteBatch(deliveries=[done]))
    due = await store.due_deliveries(REGION, 8000, 2, ["dlv_ep_b1_00000"])
    assert [d.id for d in due] == ["dlv_ep_b1_00002", "dlv_ep_b2_00003"]
    assert await store.next_due_ms(REGION) == 1


async def test_due_deliveries_per_endpoint_round_robin(store) -> None:
    # issue 17: at most per_endpoint rows of each endpoint, every endpoint's first row
    # before any endpoint's second, each endpoint in its own order
    await _blocked_backlog(store, 300)
    due = await store.due_deliveries(REGION, 8000, 6, [], per_endpoint=2)
    assert [d.id for d in due] == [
        "dlv_ep_b1_00000", "dlv_ep_b2_00001", "dlv_ep_1_00001", "dlv_ep_2_00003",
        "dlv_ep_b1_00002", "dlv_ep_b2_00003",
    ]  # fmt: skip
    due = await store.due_deliveries(REGION, 8000, 10, ["dlv_ep_1_00001"], ["ep_b1"], 2)
    assert [d.id for d in due] == [
        "dlv_ep_b2_00001", "dlv_ep_1_00002", "dlv_ep_2_00003", "dlv_ep_b2_00003",
        "dlv_ep_1_00004", "dlv_ep_2_00005",
    ]  # fmt: skip
    due = await store.due_deliveries(REGION, 8000, 10, [], ["ep_b1", "ep_b2"], 1)
    assert [d.id for d in due] == ["dlv_ep_1_00001", "dlv_ep_2_00003"]


async def test_list_deliveries_filters_and_cursor(store) -> None:
    ds = [_delivery(i) for i in range(1, 6)]
    ds[2] = _delivery(3, DeliveryStatus.DEAD)
    await store.commit(WriteBatch(deliveries=ds))
    page = await store.list_deliveries("ep_1", None, None, None, 2)
    assert [d.id for d in page] == ["dlv_001", "dlv_002"]
    page = await store.list_deliveries("ep_1", None, None, page[-1].id, 2)
    assert [d.id for d in page] == ["dlv_003", "dlv_004"]
    dead = await store.list_deliveries("ep_1", DeliveryStatus.DEAD, None, None, 10)
    assert [d.id for d in dead] == ["dlv_003"]
    since = await store.list_deliveries("ep_1", None, 4, None, 10)
    assert [d.id for d in since] == ["dlv_004", "dlv_005"]


async def _events_with_deliveries(store) -> None:
    """Events 1..6 of acme at times 10, 20, 20, 30, 40, 50 (one of globex), types
    ``issues.opened``/``issues.closed``/``push``/``issuesx``; one delivery each to ep_1
    (evt_002 dead) and evt_004 also to ep_2 (delivered)."""
    types = ["issues.opened", "push", "issues.closed", "issues.opened", "issuesx", "push"]
    times = [10, 20, 20, 30, 40, 50]
    evs = [
        Event(f"evt_{i:03}", "globex" if i == 6 else "acme", types[i - 1], b"{}", REGION,
              times[i - 1])
        for i in range(1, 7)
    ]  # fmt: skip
    ds = [_delivery(i, DeliveryStatus.DEAD if i == 2 else DeliveryStatus.PENDING) for i in
          range(1, 6)]  # fmt: skip
    ds.append(
        Delivery("dlv_104", "evt_004", "ep_2", "acme", DeliveryStatus.DELIVERED, 1, None, REGION,
                 4, 4)
    )  # fmt: skip
    await store.commit(WriteBatch(events=evs, deliveries=ds))


async def test_list_events_newest_first_filters_and_cursor(store) -> None:
    await _events_with_deliveries(store)

    async def ids(before=None, limit=10, **q) -> list[str]:
        page = await store.list_events(EventQuery("acme", **q), before, limit)
        return [e.id for e in page]

    assert await ids() == ["evt_005", "evt_004", "evt_003", "evt_002", "evt_001"]
    # ties of received_at_ms break by id, and the cursor is strict
    assert await ids(limit=3) == ["evt_005", "evt_004", "evt_003"]
    assert await ids(before=(20, "evt_003"), limit=3) == ["evt_002", "evt_001"]
    assert await ids(event_type="push") == ["evt_002"]
    assert await ids(type_prefix="issues.") == ["evt_004", "evt_003", "evt_001"]
    assert await ids(since_ms=20, until_ms=40) == ["evt_004", "evt_003", "evt_002"]
    assert await ids(status=DeliveryStatus.DEAD) == ["evt_002"]
    assert await ids(endpoint_id="ep_2") == ["evt_004"]
    assert await ids(endpoint_id="ep_2", status=DeliveryStatus.PENDING) == []
    assert await ids(endpoint_id="ep_1", status=DeliveryStatus.PENDING) == [
        "evt_005", "evt_004", "evt_003", "evt_001"
    ]  # fmt: skip
    got = await store.deliveries_of_events(["evt_004", "evt_002", "nope"])
    assert [d.id for d in got] == ["dlv_002", "dlv_004", "dlv_104"]
    assert await store.deliveries_of_events([]) == []


async def test_list_tenant_deliveries_newest_first_filters_and_cursor(store) -> None:
    await _events_with_deliveries(store)

    async def ids(before=None, limit=10, **q) -> list[str]:
        page = await store.list_tenant_deliveries(DeliveryQuery("acme", **q), before, limit)
        return [d.id for d in page]

    assert await ids() == ["dlv_005", "dlv_104", "dlv_004", "dlv_003", "dlv_002", "dlv_001"]
    assert await ids(limit=2) == ["dlv_005", "dlv_104"]
    assert await ids(before=(4, "dlv_104"), limit=2) == ["dlv_004", "dlv_003"]
    assert await ids(status=DeliveryStatus.DEAD) == ["dlv_002"]
    assert await ids(endpoint_id="ep_2") == ["dlv_104"]
    assert await ids(since_ms=4) == ["dlv_005", "dlv_104", "dlv_004"]
    assert await store.list_tenant_deliveries(DeliveryQuery("globex"), None, 10) == []


async def test_sqlite_list_indexes_added_to_an_existing_file(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "old.db")
    await s.open(REGION, new_incarnation=1)
    await s.commit(WriteBatch(events=[Event("evt_001", "acme", "a", b"{}", REGION, 1)]))
    await s.close()
    import sqlite3

    db = sqlite3.connect(tmp_path / "old.db")
    db.execute("DROP INDEX events_tenant")
    db.execute("DROP INDEX deliveries_tenant")
    db.commit()
    db.close()
    await s.open(REGION, new_incarnation=2)
    names = {r[0] for r in await s.rdb.execute_fetchall("SELECT name FROM sqlite_master")}
    assert {"events_tenant", "deliveries_tenant"} <= names
    assert [e.id for e in await s.list_events(EventQuery("acme"), None, 5)] == ["evt_001"]
    plan = await s.rdb.execute_fetchall(
        "EXPLAIN QUERY PLAN SELECT id FROM events WHERE tenant = ? "
        "ORDER BY received_at_ms DESC, id DESC LIMIT 5", ("acme",)
    )  # fmt: skip
    assert "events_tenant" in str(plan), plan
    await s.close()


async def test_sqlite_attempt_request_headers_added_to_an_existing_file(tmp_path: Path) -> None:
    """A file from before attempts kept their request headers (issue 15) gets the column
    on open; its attempts read back with ``""``, new ones with theirs."""
    s = SqliteStore(tmp_path / "old.db")
    await s.open(REGION, new_incarnation=1)
    old = Attempt("dlv_001", 1, 11, REGION, 500, 1.5, "http_500", "oops", "ep_1")
    await s.commit(WriteBatch(attempts=[old]))
    await s.close()
    import sqlite3

    db = sqlite3.connect(tmp_path / "old.db")
    db.execute("ALTER TABLE attempts DROP COLUMN request_headers")
    db.commit()
    db.close()
    await s.open(REGION, new_incarnation=2)
    try:
        assert await s.attempts_of("dlv_001") == [old]
        new = Attempt("dlv_001", 2, 12, REGION, 204, 1.0, None, "", "ep_1",
                      request_headers="webhook-id: evt_001")  # fmt: skip
        await s.commit(WriteBatch(attempts=[new]))
        assert await s.attempts_of("dlv_001") == [old, new]
    finally:
        await s.close()


async def test_list_attempts_in_both_orders_with_cursor(store) -> None:
    """Issue 43: the attempt log newest first (``descending``) pages before its cursor
    exactly as the oldest-first one pages after it."""
    rows = [Attempt(f"dlv_{i % 3}", i // 3 + 1, 10 + i // 2, REGION, 500, 1.0, "http_500", "",
                    "ep_1") for i in range(9)]  # fmt: skip
    await store.commit(WriteBatch(attempts=rows))
    asc = await store.list_attempts("ep_1", None, None, None, 100)
    desc = await store.list_attempts("ep_1", None, None, None, 100, descending=True)
    assert len(asc) == 9 and desc == asc[::-1]
    keys = [(a.at_ms, a.delivery_id, a.n) for a in asc]
    assert keys == sorted(keys)
    for descending, want in ((False, asc), (True, desc)):
        got, after = [], None
        while True:
            page = await store.list_attempts("ep_1", None, None, after, 2, descending)
            got += page
            if len(page) < 2:
                break
            after = (page[-1].at_ms, page[-1].delivery_id, page[-1].n)
        assert got == want
    since = await store.list_attempts("ep_1", None, 13, None, 100, descending=True)
    assert since == [a for a in desc if a.at_ms >= 13]


async def test_upsert_replaces_delivery(store) -> None:
    await store.commit(WriteBatch(deliveries=[_delivery(1)]))
    done = _delivery(1, DeliveryStatus.DELIVERED, at=None)  # type: ignore[arg-type]
    await store.commit(WriteBatch(deliveries=[done]))
    assert await store.get_delivery("dlv_001") == done
    assert await store.next_due_ms(REGION) is None


async def test_sqlite_commit_is_atomic(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "n.db")
    await s.open(REGION, 1)
    broken = _delivery(1)
    # NOT NULL: fails inside the commit's statement, after its registry and events inserts
    object.__setattr__(broken, "status", None)
    bad = WriteBatch(
        registry={"tenants": b"x"},
        events=[Event("evt_1", "acme", "a", b"{}", REGION, 1)],
        deliveries=[broken],
    )
    try:
        with pytest.raises(sqlite3.IntegrityError):
            await s.commit(bad)
        assert await s.load_registry() == {}
        assert await s.get_event("evt_1") is None
        await s.commit(WriteBatch(registry={"tenants": b"y"}))  # usable afterwards
        assert await s.load_registry() == {"tenants": b"y"}
    finally:
        await s.close()


async def test_sqlite_survives_reopen(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "n.db")
    await s.open(REGION, 1)
    await s.commit(WriteBatch(events=[Event("evt_1", "acme", "a", b"{}", REGION, 1)]))
    await s.close()
    s2 = SqliteStore(tmp_path / "n.db")
    await s2.open(REGION, 2)
    assert (await s2.get_event("evt_1")) is not None
    await s2.close()


async def test_truncate_log_deletes_up_to_and_keeps_floor(store, tmp_path: Path) -> None:
    recs = [Record(o, s, "registry", b"\x80", (s, 0)) for o in ("a:1", "b:1") for s in (1, 2, 3)]
    await store.commit(WriteBatch(records=recs, version_vector={"a:1": 3, "b:1": 3}))
    assert await store.load_log_floor() == {}
    assert await store.truncate_log({"a:1": 2, "b:1": 0}) == 2
    left = await store.records_after({}, 100)
    assert [(r.origin, r.seq) for r in left] == [("a:1", 3), ("b:1", 1), ("b:1", 2), ("b:1", 3)]
    assert await store.truncate_log({"a:1": 1}) == 0  # never lowers the floor
    assert await store.load_log_floor() == {"a:1": 2, "b:1": 0}
    assert await store.load_version_vector() == {"a:1": 3, "b:1": 3}  # untouched
    await store.close()
    await store.open(REGION, new_incarnation=1)
    assert await store.load_log_floor() == {"a:1": 2, "b:1": 0}


async def test_list_event_ids_and_load_deliveries(store) -> None:
    evs = [Event(f"evt_{i}", "acme", "a.b", b"{}", REGION, i) for i in (2, 1)]
    await store.commit(WriteBatch(events=evs, deliveries=[_delivery(2), _delivery(1)]))
    assert await store.list_event_ids() == ["evt_1", "evt_2"]
    assert [d.id for d in await store.load_deliveries()] == ["dlv_001", "dlv_002"]
    # a page at a time (issue 17: the tree is built without holding the whole store)
    assert await store.list_event_ids("evt_1", 5) == ["evt_2"]
    assert await store.list_event_ids("", 1) == ["evt_1"]
    assert await store.list_event_ids("evt_2", 5) == []
    assert [d.id for d in await store.load_deliveries("dlv_001", 1)] == ["dlv_002"]
    assert [d.id for d in await store.load_deliveries("", 1)] == ["dlv_001"]
    assert await store.load_deliveries("dlv_002") == []


async def test_get_events_reads_many_at_once(store) -> None:
    events = [Event(f"evt_{i:04d}", "acme", "a", b"{}", REGION, i) for i in range(1200)]
    await store.commit(WriteBatch(events=events))
    wanted = [e.id for e in events[::2]] + ["nope", events[0].id]  # past the 500-id chunk
    got = await store.get_events(wanted)
    assert got == {e.id: e for e in events[::2]}
    assert await store.get_events([]) == {}


async def test_get_deliveries_reads_many_at_once(store) -> None:
    ds = [
        Delivery(f"dlv_{i:04d}", "evt_1", "ep", "acme", DeliveryStatus.PENDING, 0, i, REGION, i, i)
        for i in range(700)
    ]
    await store.commit(WriteBatch(deliveries=ds))
    got = await store.get_deliveries([d.id for d in ds[1::3]] + ["nope"])
    assert got == {d.id: d for d in ds[1::3]}
    assert await store.get_deliveries([]) == {}


async def test_audit_newest_first_filters_cursor_and_duplicates(store) -> None:
    """Audit entries (issue 14): newest first by HLC, then origin and seq; by tenant; from
    ``since_ms``; before a cursor; an entry stored twice (replicated again) counts once."""
    entries = [
        AuditEntry("us:1", i, 1000 + i // 2, i % 2, "token:x", "endpoint.create",
                   f"endpoint/e{i}", "acme" if i % 3 else "beta", "")
        for i in range(1, 9)
    ]  # fmt: skip
    await store.commit(WriteBatch(audit=entries))
    await store.commit(WriteBatch(audit=entries[:3]))
    newest = sorted(entries, key=lambda a: (a.hlc_wall_ms, a.hlc_logical, a.origin, a.seq))[::-1]
    assert await store.list_audit(None, None, None, 100) == newest
    assert await store.list_audit("beta", None, None, 100) == [
        a for a in newest if a.tenant == "beta"
    ]
    assert await store.list_audit(None, 1003, None, 100) == [
        a for a in newest if a.hlc_wall_ms >= 1003
    ]
    first = await store.list_audit(None, None, None, 3)
    last = first[-1]
    cursor = (last.hlc_wall_ms, last.hlc_logical, last.origin, last.seq)
    assert first + await store.list_audit(None, None, cursor, 100) == newest


async def test_idempotency_lookup_by_key_and_by_event(store) -> None:
    """Idempotency-Keys are looked up one by one (issue 17): by (tenant, key), the
    earliest acceptance winning a conflict; by event for anti-entropy items."""
    rows = [
        ("acme", "k1", "evt_002", "d2", 20, "us-east-1"),
        ("acme", "k2", "evt_002", "d2", 20, "us-east-1"),
        ("beta", "k1", "evt_003", "d3", 30, REGION),
    ]
    await store.commit(WriteBatch(idempotency=rows))
    # a later acceptance of k1 loses; an earlier one wins (ties: the smaller event id)
    await store.commit(WriteBatch(idempotency=[("acme", "k1", "evt_009", "d9", 25, REGION)]))
    assert await store.get_idempotency("acme", "k1") == rows[0]
    await store.commit(WriteBatch(idempotency=[("acme", "k1", "evt_001", "d1", 20, REGION)]))
    assert await store.get_idempotency("acme", "k1") == ("acme", "k1", "evt_001", "d1", 20, REGION)
    assert await store.get_idempotency("beta", "k1") == rows[2]
    assert await store.get_idempotency("beta", "k2") is None
    assert await store.get_idempotency("acme", "K1") is None  # keys are case-sensitive
    assert await store.idempotency_of_events(["evt_002"]) == [rows[1]]  # k1 moved away
    assert await store.idempotency_of_events(["evt_003", "evt_001", "nope"]) == [
        ("acme", "k1", "evt_001", "d1", 20, REGION),
        rows[2],
    ]
    assert await store.idempotency_of_events([]) == []
    many = [f"evt_{i:04}" for i in range(1200)] + ["evt_002"]  # past SQLite's parameters
    assert await store.idempotency_of_events(many) == [rows[1]]


async def test_idempotency_purge_in_bounded_batches(store) -> None:
    rows = [("acme", f"k{i:03}", f"evt_{i:03}", "d", i, REGION) for i in range(25)]
    await store.commit(WriteBatch(idempotency=rows))
    assert await store.purge_idempotency(20, 8) == 8  # at most the limit
    assert await store.purge_idempotency(20, 8) == 8
    assert await store.purge_idempotency(20, 8) == 4  # fewer: the caller stops
    assert await store.purge_idempotency(20, 8) == 0
    left = sorted(await store.load_idempotency())
    assert left == rows[20:]
    assert await store.get_idempotency("acme", "k019") is None
    assert await store.get_idempotency("acme", "k020") == rows[20]


async def test_idempotency_rows_read_a_page_at_a_time(store) -> None:
    """``load_idempotency(after, limit)`` walks every row once in ``(tenant, key)`` order
    (the key filter is filled this way at start)."""
    rows = [(t, f"k{i:02}", f"evt_{t}{i:02}", "d", i, REGION) for t in ("b", "a") for i in range(7)]
    await store.commit(WriteBatch(idempotency=rows))
    pages, after = [], None
    while page := await store.load_idempotency(after, 3):
        assert len(page) <= 3
        pages.append(page)
        after = (page[-1][0], page[-1][1])
    assert [len(p) for p in pages] == [3, 3, 3, 3, 2]
    assert [r for p in pages for r in p] == sorted(rows)
    assert await store.load_idempotency(("a", "k05"), None) == sorted(rows)[6:]
    assert await store.load_idempotency(("b", "k06"), 5) == []


async def _scanned_counts(store, region: str) -> dict[str, int]:
    """What ``counts`` must say, by reading every event and delivery back."""
    events = (await store.get_events(await store.list_event_ids())).values()
    out = {"events": len(events), "events_accepted": sum(e.region == region for e in events)}
    for s in DeliveryStatus:
        out[f"deliveries_{s.value}"] = sum(
            d.region == region and d.status is s for d in await store.load_deliveries()
        )
    return out


async def test_counts_are_kept_by_commits(store) -> None:
    """``counts`` (kept by commits, not scanned; issue 17) agrees with a scan after events
    of two regions, a duplicate, status moves, a rewrite with the same status and a
    delivery whose owner region changes; ``pending_count`` with it."""
    other = "us-east-1"
    ev = [Event(f"evt_{i:03}", "acme", "a", b"{}", REGION if i % 3 else other, i) for i in range(9)]
    await store.commit(WriteBatch(events=ev, deliveries=[_delivery(i) for i in range(6)]))
    await store.commit(WriteBatch(events=ev[:2]))  # replicated again: counted once
    theirs = dataclasses.replace(_delivery(7), region=other)
    await store.commit(WriteBatch(deliveries=[theirs]))
    assert await store.counts(REGION) == await _scanned_counts(store, REGION)
    assert (await store.counts(REGION))["deliveries_pending"] == 6
    done = dataclasses.replace(_delivery(1, DeliveryStatus.DELIVERED), updated_at_ms=50)
    dead = dataclasses.replace(_delivery(2, DeliveryStatus.DEAD), updated_at_ms=50)
    again = dataclasses.replace(_delivery(3), updated_at_ms=50)  # same status, new write
    await store.commit(WriteBatch(deliveries=[done, dead, again, done]))
    adopted = dataclasses.replace(theirs, region=REGION, updated_at_ms=60)
    await store.commit(WriteBatch(deliveries=[adopted]))
    for region in (REGION, other, "nowhere"):
        assert await store.counts(region) == await _scanned_counts(store, region), region
    c = await store.counts(REGION)
    assert (c["events"], c["events_accepted"]) == (9, 6)
    assert (c["deliveries_pending"], c["deliveries_delivered"], c["deliveries_dead"]) == (5, 1, 1)
    assert await store.pending_count(REGION) == 5 and await store.pending_count(other) == 0
    assert (await store.counts(other))["events_accepted"] == 3


async def test_pending_by_tenant(store) -> None:
    """Pending deliveries a region owns, per tenant (a tenant's share of the backlog,
    issue 38): other statuses and other regions' rows are not counted."""
    rows = [dataclasses.replace(_delivery(i), tenant="acme" if i < 3 else "zed") for i in range(5)]
    rows.append(_delivery(5, DeliveryStatus.DEAD))
    rows.append(dataclasses.replace(_delivery(6), region="us-east-1"))
    await store.commit(WriteBatch(deliveries=rows))
    assert await store.pending_by_tenant(REGION) == {"acme": 3, "zed": 2}
    done = dataclasses.replace(rows[0], status=DeliveryStatus.DELIVERED, updated_at_ms=50)
    await store.commit(WriteBatch(deliveries=[done]))
    assert await store.pending_by_tenant(REGION) == {"acme": 2, "zed": 2}
    assert await store.pending_by_tenant("us-east-1") == {"acme": 1}
    assert await store.pending_by_tenant("nowhere") == {}


async def test_sqlite_counts_filled_for_an_existing_file(tmp_path: Path) -> None:
    """A file from before the kept row counts gets them, counted once, on open."""
    s = SqliteStore(tmp_path / "old.db")
    await s.open(REGION, new_incarnation=1)
    ev = [Event(f"evt_{i:03}", "acme", "a", b"{}", REGION, i) for i in range(4)]
    await s.commit(WriteBatch(events=ev, deliveries=[_delivery(i) for i in range(3)]))
    await s.close()
    import sqlite3

    db = sqlite3.connect(tmp_path / "old.db")
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        db.execute(f"DROP TRIGGER {name}")
    db.execute("DROP TABLE row_counts")
    db.commit()
    db.close()
    await s.open(REGION, new_incarnation=2)
    try:
        assert (await s.counts(REGION))["events"] == 4
        await s.commit(WriteBatch(deliveries=[_delivery(1, DeliveryStatus.DELIVERED)]))
        assert await s.counts(REGION) == await _scanned_counts(s, REGION)
        assert await s.pending_count(REGION) == 2
    finally:
        await s.close()


async def test_postgres_counts_across_processes(pg_url: str) -> None:
    """Two stores on one database (two processes' pools, other backends): each one's
    commits are in the other's counts, also after the fold into slot 0."""
    a, b = PostgresStore(pg_url), PostgresStore(pg_url)
    await a.open(REGION, new_incarnation=1)
    await b.open(REGION, new_incarnation=2)
    try:
        await a.commit(WriteBatch(deliveries=[_delivery(i) for i in range(4)]))
        await b.commit(WriteBatch(deliveries=[_delivery(1, DeliveryStatus.DELIVERED)]))
        await b.commit(WriteBatch(events=[Event("evt_001", "acme", "a", b"{}", REGION, 1)]))
        for s in (a, b, a):
            c = await s.counts(REGION)
            assert (c["deliveries_pending"], c["deliveries_delivered"], c["events"]) == (3, 1, 1)
        rows = await a._fetch("SELECT count(*) FROM row_counts WHERE slot <> 0")
        assert rows[0][0] == 0  # folded: the rows stay few
    finally:
        await a.close()
        await b.close()


async def test_sqlite_counts_after_the_old_triggers_are_dropped(tmp_path: Path) -> None:
    """A file from when deliveries were written with REPLACE (a BEFORE INSERT trigger
    counted the replaced row) and events were counted by a trigger per row loses both
    triggers on open: with the upsert and the per-commit event count they would count
    twice."""
    s = SqliteStore(tmp_path / "old.db")
    await s.open(REGION, new_incarnation=1)
    await s.commit(WriteBatch(deliveries=[_delivery(i) for i in range(3)]))
    await s.close()
    import sqlite3

    db = sqlite3.connect(tmp_path / "old.db")
    db.execute(
        "CREATE TRIGGER row_counts_delivery_replaced BEFORE INSERT ON deliveries BEGIN "
        "UPDATE row_counts SET n = n - 1 WHERE kind = 'delivery' AND (region, status) IN "
        "(SELECT region, status FROM deliveries WHERE id = NEW.id); END"
    )
    db.execute(
        "CREATE TRIGGER row_counts_event_in AFTER INSERT ON events BEGIN "
        "INSERT INTO row_counts VALUES ('event', NEW.region, '', 1) "
        "ON CONFLICT DO UPDATE SET n = n + 1; END"
    )
    db.commit()
    db.close()
    await s.open(REGION, new_incarnation=2)
    try:
        done = dataclasses.replace(_delivery(1, DeliveryStatus.DELIVERED), updated_at_ms=50)
        ev = [
            Event(f"evt_{i:03}", "acme", "a", b"{}", REGION if i % 2 else "eu-1", i)
            for i in range(5)
        ]
        await s.commit(WriteBatch(events=ev + ev[:2], deliveries=[done, _delivery(3)]))
        for region in (REGION, "eu-1"):
            assert await s.counts(region) == await _scanned_counts(s, region)
        assert (await s.counts(REGION))["events"] == 5
        assert await s.pending_count(REGION) == 3
    finally:
        await s.close()


async def test_forget_origins_deletes_their_vector_log_and_floor(store) -> None:
    """A retired actor pruned from the version vector (runtime/pruning.py) leaves no row."""
    recs = [Record(o, s, "registry", b"\x80", (s, 0)) for o in ("a:1", "b:1") for s in (1, 2)]
    await store.commit(WriteBatch(records=recs, version_vector={"a:1": 2, "b:1": 2}))
    await store.truncate_log({"a:1": 1})
    await store.forget_origins(["a:1"])
    assert await store.load_version_vector() == {"b:1": 2}
    assert await store.load_log_floor() == {}
    assert [(r.origin, r.seq) for r in await store.records_after({}, 10)] == [
        ("b:1", 1),
        ("b:1", 2),
    ]


async def test_usage_carry_adds_moves_and_a_recording_commit_empties_it(store) -> None:
    """``WriteBatch.usage`` goes into the store's carry in the commit's transaction; a
    commit that records the carry (``usage_recorded``) empties it. PostgreSQL keeps none
    (its processes record their moves with every commit)."""
    key, other = ("acme", "events_published"), ("acme", "backlog")
    await store.commit(WriteBatch(usage={key: 2, other: 3}))
    await store.commit(WriteBatch(usage={key: 1, other: -3}))
    if isinstance(store, PostgresStore):
        assert await store.load_usage_carry() is None
        return
    assert await store.load_usage_carry() == {key: 3}  # a move summing to 0 is not shown
    await store.close()
    await store.open(REGION, new_incarnation=99)
    assert await store.load_usage_carry() == {key: 3}
    await store.commit(WriteBatch(usage={key: 5}, usage_recorded=True))
    assert await store.load_usage_carry() == {}
