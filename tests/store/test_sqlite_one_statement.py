"""SQLite writes a WriteBatch as one statement and reads hot rows as one JSON row (issue 17).

sqlite3 releases the GIL for every step of a statement (every row of an ``executemany``,
every row a cursor fetches), and the writer or reader thread then has to win the GIL back
from the busy event loop, up to the 5 ms switch interval each time. So the store writes a
batch with one INSERT into the ``commit_in`` view (its trigger fans it out) and reads due
deliveries, events and deliveries by id as one row. These tests count the writer's
statement executions per commit (before: one per row of every table) and check that every
value kind survives the JSON crossing: empty and binary BLOBs, non-ASCII text, large integers,
floats, NULLs, and events counted once per new id."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.core.model import Attempt, Delivery, DeliveryStatus, Event, Record, WriteBatch

REGION = "eu-central-1"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "n.db")
    await s.open(REGION, new_incarnation=1)
    yield s
    await s.close()


def _batch(n: int, start: int = 0) -> WriteBatch:
    b = WriteBatch()
    for i in range(start, start + n):
        b.events.append(Event(f"evt_{i:04}", "acme", "push", b'{"n":%d}' % i, REGION, i))
        b.deliveries.append(Delivery(f"dlv_{i:04}", f"evt_{i:04}", "ep_1", "acme",
                                     DeliveryStatus.PENDING, 0, i, REGION, i, i))  # fmt: skip
        b.attempts.append(Attempt(f"dlv_{i:04}", 1, i, REGION, 500, 1.25, "http_500", "x"))
        b.records.append(Record(REGION, i + 1, "event", b"\x00body%d" % i, (i, 0)))
    b.version_vector[REGION] = start + n
    b.registry["tenants"] = b"\x01\x02"
    return b


class CountingConnection:
    """The writer connection, counting statement executions (each row of an
    ``executemany`` is one)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db, self.steps = db, 0

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self.steps += 1
        return self.db.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        rows = list(rows)
        self.steps += len(rows)
        return self.db.executemany(sql, rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


async def test_a_commit_is_one_statement_whatever_its_size(store: SqliteStore) -> None:
    counting = CountingConnection(store.db)
    store._db = counting  # type: ignore[assignment]
    try:
        await store.commit(_batch(50))
        assert counting.steps == 1  # was one per row of every table plus BEGIN/COMMIT: 205
        await store.commit(_batch(1, start=50))
        assert counting.steps == 2
    finally:
        store._db = counting.db
    counts = await store.counts(REGION)
    assert counts["events_accepted"] == 51 and counts["deliveries_pending"] == 51


async def test_values_survive_the_json_crossing(store: SqliteStore) -> None:
    odd = Event("evt_odd", "acme", "typ.é😀", b"\xff\x00\xfe", REGION, 2**62, "g\u2028")
    empty = Event("evt_empty", "acme", "push", b"", REGION, 0)
    dup = Event("evt_dup", "acme", "push", b"{}", "us-east-1", 5)
    d = Delivery("dlv_odd", "evt_odd", "ep_1", "acme", DeliveryStatus.PENDING, 0, -1, REGION,
                 2**62, 2**62, 3, "g\u2028")  # fmt: skip
    a = Attempt("dlv_odd", 1, 7, REGION, None, 0.1 + 0.2, None, "", "ep_1", 3, "", "g",
                'x-h: "q"\nx-u: \u00e9')  # fmt: skip
    rec = Record(REGION, 1, "event", b"", (1, 0))
    batch = WriteBatch(events=[odd, empty, dup, dup], deliveries=[d], attempts=[a],
                       records=[rec], registry={"empty": b"", "bin": b"\x00\xff"},
                       idempotency=[("acme", "k\u00e9", "evt_odd", "sha", 3, REGION)])  # fmt: skip
    await store.commit(batch)
    await store.commit(WriteBatch(events=[dup]))  # stored already: not counted again
    got = await store.get_events(["evt_odd", "evt_empty", "evt_dup", "nope"])
    assert got == {"evt_odd": odd, "evt_empty": empty, "evt_dup": dup}
    assert await store.get_deliveries(["dlv_odd"]) == {"dlv_odd": d}
    assert await store.attempts_of("dlv_odd") == [a]
    assert await store.records_after({}, 10) == [rec]
    assert await store.load_registry() == {"empty": b"", "bin": b"\x00\xff"}
    assert await store.get_idempotency("acme", "k\u00e9") == (
        "acme", "k\u00e9", "evt_odd", "sha", 3, REGION
    )  # fmt: skip
    counts = await store.counts(REGION)
    assert counts["events"] == 3 and counts["events_accepted"] == 2
    due = await store.due_deliveries(REGION, 0, 10, [], per_endpoint=5)
    assert due == [d]


async def test_a_failed_commit_writes_nothing(store: SqliteStore) -> None:
    bad = _batch(3)
    # NOT NULL violated by the last delivery: the whole statement (so the batch) fails
    bad.deliveries.append(Delivery("dlv_bad", "evt_x", "ep_1", "acme", DeliveryStatus.PENDING,
                                   0, 1, None, 1, 1))  # type: ignore[arg-type]  # fmt: skip
    with pytest.raises(Exception, match="NOT NULL"):
        await store.commit(bad)
    assert await store.get_events(["evt_0000"]) == {}
    assert (await store.counts(REGION))["events"] == 0
    await store.commit(_batch(3))  # the connection is usable afterwards
    assert (await store.counts(REGION))["events"] == 3


async def test_a_row_of_the_wrong_width_is_refused_before_anything_is_written(
    store: SqliteStore,
) -> None:
    # the trigger reads a row's values by place (adapters/sqlite_commit.py, Part): a row
    # one value short would shift them into the wrong columns
    bad = _batch(2)
    bad.idempotency.append(("acme", "k", "evt_0000", "sha", 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"commit_in.i: rows of \[5\] values, not 6"):
        await store.commit(bad)
    assert await store.get_events(["evt_0000"]) == {} and await store.load_registry() == {}


def test_the_trigger_and_the_rows_come_from_one_field_list() -> None:
    from regionsync.adapters.sqlite_commit import DELIVERIES, EVENTS, LOG_CUT

    d = Delivery("dlv_1", "evt_1", "ep_1", "acme", DeliveryStatus.PENDING, 2, 9, REGION, 1, 3)
    row = DELIVERIES.row(d)
    assert len(row) == DELIVERIES.width == 12
    assert row[int(DELIVERIES.value("status").removeprefix("value->>"))] == "pending"
    e = Event("evt_1", "acme", "push", b"{}", REGION, 5)
    assert EVENTS.row(e, (7, 2))[3:5] == (7, 2) and EVENTS.width == 8  # payload: 2 values
    rec = Record(REGION, 4, "event", b"x", (5, 6))
    assert LOG_CUT.row(rec, (1, 1), "evt_1", 3, (9, 2)) == (
        REGION, 4, "event", 1, 1, 5, 6, "evt_1", 3, 9, 2
    )  # fmt: skip
