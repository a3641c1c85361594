"""Event retention in every store (memory, SQLite, PostgreSQL): ``purge_events`` deletes
old events whose deliveries are all final, with those deliveries and their attempts, in
bounded batches; never a pending delivery, a young event, or (SQL stores) an event a log
record may still hold a cut body for."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.postgres_store import PostgresStore
from regionsync.adapters.retention_sql import LOG_MARGIN_MS
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.core.model import Attempt, Delivery, DeliveryStatus, Event, Record, WriteBatch
from regionsync.core.records import encode_body

REGION = "eu-central-1"
DAY = 24 * 3600 * 1000
NOW = 400 * DAY
S = DeliveryStatus


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator:
    if request.param == "postgresql":
        s = PostgresStore(request.getfixturevalue("pg_url"))
    else:
        s = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "n.db")
    await s.open(REGION, new_incarnation=7)
    yield s
    await s.close()


def _event(i: int, at: int) -> Event:
    return Event(f"evt_{i:03}", "acme", "a.b", b'{"n":1.10}', REGION, at)


def _delivery(i: int, ep: int, status: DeliveryStatus, at: int) -> Delivery:
    return Delivery(f"dlv_{i:03}_{ep}", f"evt_{i:03}", f"ep_{ep}", "acme", status, 1,
                    None if status.final else at + 1000, REGION, at, at)  # fmt: skip


def _attempt(d: Delivery, n: int) -> Attempt:
    return Attempt(d.id, n, d.created_at_ms + n, REGION, 500, 1.0, "http_500", "", d.endpoint_id)


async def _fill(store, shapes: dict[int, tuple[int, list[DeliveryStatus]]]) -> None:
    """Event i received at ``at`` with one delivery per status (two attempts each)."""
    batch = WriteBatch()
    for i, (at, statuses) in shapes.items():
        batch.events.append(_event(i, at))
        for ep, status in enumerate(statuses):
            d = _delivery(i, ep, status, at)
            batch.deliveries.append(d)
            batch.attempts += [_attempt(d, 1), _attempt(d, 2)]
    await store.commit(batch)


async def test_old_final_events_go_with_deliveries_and_attempts(store) -> None:
    old, young = NOW - 100 * DAY, NOW - 10 * DAY
    await _fill(store, {
        1: (old, [S.DELIVERED, S.DEAD]),  # goes
        2: (old, [S.DELIVERED, S.PENDING]),  # a pending delivery: stays, whole
        3: (young, [S.DELIVERED]),  # younger than the retention: stays
        4: (old, []),  # no delivery at all: goes
        5: (old, [S.SKIPPED, S.CANCELLED]),  # final too: goes
    })  # fmt: skip
    cutoff = NOW - 90 * DAY
    eids, dids, attempts = await store.purge_events(cutoff, 100)
    assert sorted(eids) == ["evt_001", "evt_004", "evt_005"]
    assert sorted(dids) == ["dlv_001_0", "dlv_001_1", "dlv_005_0", "dlv_005_1"]
    assert attempts == 8
    assert sorted(await store.list_event_ids()) == ["evt_002", "evt_003"]
    left = {d.id for d in await store.load_deliveries()}
    assert left == {"dlv_002_0", "dlv_002_1", "dlv_003_0"}
    assert await store.get_event("evt_001") is None
    assert len(await store.attempts_of("dlv_002_0")) == 2
    assert await store.attempts_of("dlv_001_0") == []
    counts = await store.counts(REGION)
    assert counts["events"] == 2 and counts["deliveries_delivered"] == 2
    assert counts["deliveries_dead"] == 0 and counts["deliveries_pending"] == 1
    assert await store.purge_events(cutoff, 100) == ([], [], 0)  # nothing more


async def test_batches_are_bounded_oldest_first(store) -> None:
    await _fill(store, {i: (NOW - (200 - i) * DAY, [S.DELIVERED]) for i in range(1, 8)})
    first, _, _ = await store.purge_events(NOW, 3)
    assert sorted(first) == ["evt_001", "evt_002", "evt_003"]  # the oldest
    rest = [(await store.purge_events(NOW, 3))[0] for _ in range(3)]
    assert [len(r) for r in rest] == [3, 1, 0]


async def test_sql_stores_keep_events_the_log_may_still_need(store) -> None:
    if isinstance(store, MemoryStore):
        pytest.skip("the memory store keeps no cut bodies")
    old = NOW - 100 * DAY
    # an event committed with its record: the record's body is kept cut against the
    # events row (adapters/log_cut.py), which must outlive the record
    ev = Event("evt_001", "acme", "a.b", b'{"pad":"' + b"x" * 400 + b'"}', REGION, old)
    rec = Record(f"{REGION}:7", 1, "event", encode_body(event=ev), (old + 5, 0))
    d = _delivery(1, 0, S.DELIVERED, old)
    await store.commit(WriteBatch(records=[rec], version_vector={f"{REGION}:7": 1},
                                  events=[ev], deliveries=[d]))  # fmt: skip
    assert await store.purge_events(NOW - 90 * DAY, 100) == ([], [], 0)
    assert [r.body for r in await store.records_after({}, 10)] == [rec.body]  # whole again
    await store.truncate_log({f"{REGION}:7": 1})  # every peer acked: the record is gone
    assert (await store.purge_events(NOW - 90 * DAY, 100))[0] == ["evt_001"]


async def test_log_margin_is_far_beyond_clock_drift() -> None:
    assert LOG_MARGIN_MS >= 60 * 60 * 1000  # replication.max_drift_ms defaults to a minute


async def test_a_tenant_alone_or_left_out(store) -> None:
    old = NOW - 100 * DAY
    batch = WriteBatch()
    for i, tenant in enumerate(["acme", "beta", "gamma"], start=1):
        batch.events.append(Event(f"evt_{i:03}", tenant, "a.b", b"{}", REGION, old))
    await store.commit(batch)
    assert (await store.purge_events(NOW, 10, "beta"))[0] == ["evt_002"]
    assert (await store.purge_events(NOW, 10, None, ["acme"]))[0] == ["evt_003"]
    assert await store.list_event_ids() == ["evt_001"]
