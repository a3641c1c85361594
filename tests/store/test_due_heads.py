"""Claiming due deliveries costs O(endpoints + rows claimed), not O(the backlog of the
endpoints the worker excludes as blocked) (issue 14, bench/tenants.py): the work of the
same ``due_deliveries`` call is measured on real stores with a blocked backlog of 100 and
of 4,000 rows, by SQLite's virtual machine steps and by PostgreSQL's EXPLAIN ANALYZE; so
is PostgreSQL's ``claim_due`` (several processes per region), which leases what it reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg

from regionsync.adapters.postgres_store import PostgresStore
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.core.model import Delivery, DeliveryStatus, WriteBatch

REGION = "eu-central-1"
BLOCKED = ["ep_b1", "ep_b2", "ep_b3", "ep_b4"]
WANT = ["dlv_q_0", "dlv_r_0", "dlv_q_1"]


def _rows(backlog: int) -> list[Delivery]:
    """``backlog`` due deliveries of the BLOCKED endpoints, all due before the five of the
    two open endpoints ep_q and ep_r."""

    def d(did: str, ep: str, at: int) -> Delivery:
        return Delivery(did, "evt_" + did, ep, "t", DeliveryStatus.PENDING, 0, at, REGION, 1, 1)

    rows = [d(f"dlv_b_{i:05}", BLOCKED[i % len(BLOCKED)], i) for i in range(backlog)]
    rows += [d(f"dlv_q_{i}", "ep_q", 10_000 + 2 * i) for i in range(3)]
    rows += [d(f"dlv_r_{i}", "ep_r", 10_001 + 4 * i) for i in range(2)]
    return rows


async def _sqlite_steps(path: Path, backlog: int) -> int:
    store = SqliteStore(path)
    await store.open(REGION, 1)
    try:
        await store.commit(WriteBatch(deliveries=_rows(backlog)))
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        await store.rdb.set_progress_handler(count, 10)  # called every 10 VM instructions
        due = await store.due_deliveries(REGION, 20_000, 3, ["dlv_b_00001"], BLOCKED)
        await store.rdb.set_progress_handler(None, 10)  # type: ignore[arg-type]
        assert [d.id for d in due] == WANT
        return steps
    finally:
        await store.close()


async def test_sqlite_claim_work_does_not_grow_with_the_blocked_backlog(tmp_path: Path) -> None:
    small = await _sqlite_steps(tmp_path / "small.db", 100)
    large = await _sqlite_steps(tmp_path / "large.db", 4_000)
    assert small > 0
    assert large <= small + 10, (small, large)  # a scan of the backlog would be ~40x


def _plan_rows(node: dict[str, Any]) -> float:
    """Rows every node of an EXPLAIN ANALYZE plan produced or filtered away, all loops."""
    loops = node.get("Actual Loops", 1)
    n = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * loops
    return n + sum(_plan_rows(child) for child in node.get("Plans", []))


async def _pg_rows(url: str, backlog: int, claim: bool = False) -> float:
    store = PostgresStore(url)
    await store.open(REGION, 1)
    sent: list[tuple[str, Any]] = []
    fetch = store._fetch

    async def spy(sql: str, args: Any = ()) -> list[tuple[Any, ...]]:
        sent.append((sql, args))
        return await fetch(sql, args)

    try:
        await store.commit(WriteBatch(deliveries=_rows(backlog)))
        # no ANALYZE: a table just filled has no statistics, the plan must not need them
        store._fetch = spy  # type: ignore[method-assign]
        if claim:
            due = await store.claim_due(REGION, 20_000, 3, "proc-1", 60_000, BLOCKED)
            assert [d.id for d in due] == WANT
            # another process: passes over the leased three, not over the blocked backlog
            other = await store.claim_due(REGION, 20_000, 2, "proc-2", 60_000, ["ep_b1"])
            assert [d.id for d in other] == ["dlv_b_00001", "dlv_b_00002"]
        else:
            due = await store.due_deliveries(REGION, 20_000, 3, ["dlv_b_00001"], BLOCKED)
            assert [d.id for d in due] == WANT
        sql, args = sent[0]
        async with await psycopg.AsyncConnection.connect(url) as conn:
            if claim:  # the same claim again, its leases ended: measured, then undone
                await conn.execute("UPDATE deliveries SET claimed_by = '', lease_until_ms = 0")
            cur = await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, args)
            row = await cur.fetchone()
            if claim:
                cur = await conn.execute("SELECT count(*) FROM deliveries WHERE claimed_by <> ''")
                claimed = await cur.fetchone()
                assert claimed == (3,), claimed  # EXPLAIN ANALYZE claimed the same three
            await conn.rollback()
        assert row is not None
        plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
        return _plan_rows(plan[0]["Plan"])
    finally:
        await store.close()


async def test_postgres_claim_work_does_not_grow_with_the_blocked_backlog(pg_server) -> None:
    small = await _pg_rows(pg_server.create_database("due_small"), 100)
    large = await _pg_rows(pg_server.create_database("due_large"), 4_000)
    assert small > 0
    assert large <= small + 10, (small, large)  # a scan of the backlog would be ~40x


async def test_postgres_claim_due_work_does_not_grow_with_the_blocked_backlog(pg_server) -> None:
    small = await _pg_rows(pg_server.create_database("claim_small"), 100, claim=True)
    large = await _pg_rows(pg_server.create_database("claim_large"), 4_000, claim=True)
    assert small > 0
    assert large <= small + 10, (small, large)  # a scan of the backlog would be ~40x
