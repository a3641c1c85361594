"""SQLite and PostgreSQL stores (issue 17): an event record's body is kept without its
event's payload, which the events row holds too (adapters.log_cut), and ``records_after``
gives back every body exactly as it was committed: whole where the events row holds other
bytes than the record (an event id seen before with another payload), binary bytes and
all."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from regionsync.adapters.log_cut import CUT_MIN_BYTES
from regionsync.adapters.postgres_schema import MIGRATIONS, migrate
from regionsync.adapters.postgres_store import PostgresStore
from regionsync.adapters.secretbox import NodeKeys, is_sealed
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.core.model import Event, Record, WriteBatch
from regionsync.core.records import encode_body

PAYLOAD = b'{"action":"created","team":{"name":"' + b"t" * 2000 + b'"}}'


def event(i: int, payload: bytes = PAYLOAD) -> Event:
    return Event(f"evt_{i:05}", "acme", "team.created", payload, "r", 1_000 + i)


def record(seq: int, e: Event) -> Record:
    return Record("r:1", seq, "event", encode_body(event=e), (1_000 + seq, 0))


class Backend:
    """One store kind under test: its stores on one database, and that database's rows."""

    def __init__(self, kind: str, where: str) -> None:
        self.kind, self.where = kind, where

    async def open(self, keys: NodeKeys | None = None, incarnation: int = 1) -> Any:
        """An open store of this kind on the database (``close`` it)."""
        sqlite = self.kind == "sqlite"
        store = SqliteStore(self.where, keys) if sqlite else PostgresStore(self.where, keys=keys)
        await store.open("r", new_incarnation=incarnation)
        return store

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """``sql``'s rows, or its effect, straight on the database."""
        if self.kind == "sqlite":
            with sqlite3.connect(self.where) as db:
                return db.execute(sql).fetchall()
        with psycopg.connect(self.where, autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []

    def log_rows(self) -> list[tuple[int, int, str | None, int | None]]:
        """(seq, stored body length, event_id, event_at) of every log row."""
        return self.rows("SELECT seq, length(body), event_id, event_at FROM log ORDER BY seq")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", str(tmp_path / "n.db"))
    return Backend("postgres", request.getfixturevalue("pg_url"))


async def test_event_records_are_stored_without_their_payload(backend: Backend) -> None:
    store = await backend.open()
    events = [event(i) for i in range(1, 11)]
    records = [record(e.received_at_ms - 1_000, e) for e in events]
    await store.commit(WriteBatch(events=events, records=records, version_vector={"r:1": 10}))
    assert await store.records_after({}, 100) == records
    assert await store.records_after({"r:1": 7}, 100) == records[7:]
    await store.close()
    for (seq, stored, event_id, cut), r, e in zip(backend.log_rows(), records, events,
                                                   strict=True):  # fmt: skip
        assert (seq, event_id) == (r.seq, e.id)
        assert stored == len(r.body) - len(PAYLOAD)
        assert r.body[cut : cut + len(PAYLOAD)] == PAYLOAD
    store = await backend.open(incarnation=2)  # and after a restart
    assert await store.records_after({}, 100) == records
    await store.close()


async def test_a_record_whose_event_row_holds_other_bytes_is_kept_whole(backend: Backend) -> None:
    """Events rows are inserted or ignored: a second event with a known id (an inbound
    redelivery elsewhere with another body) leaves the first row, so its record's body
    cannot be rebuilt from it."""
    store = await backend.open()
    first = event(1)
    await store.commit(WriteBatch(events=[first], records=[record(1, first)]))
    other = event(1, PAYLOAD.replace(b"created", b"renamed"))
    same = event(2)
    records = [record(2, other), record(3, same)]
    await store.commit(WriteBatch(events=[other, same], records=records))
    got = await store.records_after({}, 100)
    assert got[1:] == records and got[1].body != encode_body(event=first)
    await store.close()
    rows = backend.log_rows()
    assert rows[1][2:] == (None, None) and rows[1][1] == len(records[0].body)
    assert rows[0][2] == first.id and rows[2][2] == same.id


async def test_whole_bodies_where_a_cut_cannot_be_rebuilt_or_saves_nothing(
    backend: Backend,
) -> None:
    store = await backend.open()
    small = event(1, b'{"n":' + b"1" * (CUT_MIN_BYTES - 10) + b"}")
    secretive = event(2, PAYLOAD.replace(b"team", b"/secret"))
    absent = event(3, PAYLOAD.replace(b"created", b"deleted"))  # its row is not in the batch
    later = event(4)  # the batch's first event has no record: the search goes on
    records = [record(1, small), record(2, secretive), record(3, absent), record(4, later)]
    unrecorded = event(9, PAYLOAD.replace(b"created", b"archived"))
    batch = WriteBatch(events=[small, secretive, unrecorded, later], records=records)
    await store.commit(batch)
    assert await store.records_after({}, 100) == records
    await store.close()
    cut = {seq: event_id for seq, _, event_id, _ in backend.log_rows()}
    assert cut == {1: None, 2: None, 3: None, 4: later.id}


async def test_an_id_twice_in_a_batch_cuts_only_for_the_row_inserted(backend: Backend) -> None:
    """The first events row of an id is the one inserted: a record of the second (other
    bytes) is kept whole."""
    store = await backend.open()
    first, second = event(1), event(1, PAYLOAD.replace(b"created", b"renamed"))
    records = [record(1, second), record(2, first)]
    await store.commit(WriteBatch(events=[first, second], records=records))
    assert await store.records_after({}, 10) == records
    await store.close()
    assert [row[2] for row in backend.log_rows()] == [None, first.id]


async def test_a_sealed_record_is_not_cut(backend: Backend) -> None:
    store = await backend.open(NodeKeys([("k1", hashlib.sha256(b"k1").digest())]))
    e = event(1, PAYLOAD.replace(b"team", b"e/ep_1/secret"))
    records = [record(1, e)]
    await store.commit(WriteBatch(events=[e], records=records))
    assert await store.records_after({}, 10) == records
    await store.close()
    assert backend.log_rows()[0][2:] == (None, None)


async def test_sealing_on_open_leaves_cut_records_readable(backend: Backend) -> None:
    """A store written without a key ring, opened with one: secret-bearing records are
    sealed then (``_seal_plaintext_rows``); cut event records stay cut and read back."""
    store = await backend.open()
    e = event(1)
    secret = Record("r:1", 2, "registry", b"\x81\xa8registry" + b"e/ep_1/secret", (2, 0))
    records = [record(1, e), secret]
    await store.commit(WriteBatch(events=[e], records=records))
    await store.close()
    keys = NodeKeys([("k1", hashlib.sha256(b"k1").digest())])
    store = await backend.open(keys, incarnation=2)
    assert await store.records_after({}, 10) == records
    await store.close()
    rows = backend.rows("SELECT seq, event_id, body FROM log ORDER BY seq")
    assert rows[0][1] == e.id and rows[1][1] is None
    assert b"e/ep_1/secret" not in rows[1][2]  # sealed


async def test_a_cut_record_without_its_event_row_is_an_error(backend: Backend) -> None:
    """Events rows are never deleted; if one were, the record is not sent broken."""
    store = await backend.open()
    e = event(1)
    await store.commit(WriteBatch(events=[e], records=[record(1, e)]))
    backend.rows("DELETE FROM events")
    error = sqlite3.DatabaseError if backend.kind == "sqlite" else psycopg.DataError
    with pytest.raises(error, match="r:1:1 lost its event's row"):
        await store.records_after({}, 10)
    await store.close()


async def test_a_log_without_the_cut_columns_gets_them(backend: Backend) -> None:
    """Records written before the cut (SQLite: a file without the two columns; PostgreSQL:
    a database at schema version 8) read back whole; new ones are cut."""
    old = [Record("r:1", i, "event", PAYLOAD + bytes([i]), (i, 0)) for i in range(1, 6)]
    if backend.kind == "sqlite":
        store = await backend.open()
        await store.commit(WriteBatch(records=old, version_vector={"r:1": 5}))
        await store.close()
        backend.rows("ALTER TABLE log DROP COLUMN event_id")  # the log as files had it
        backend.rows("ALTER TABLE log DROP COLUMN event_at")
    else:
        async with await psycopg.AsyncConnection.connect(backend.where, autocommit=True) as c:
            assert await migrate(c, MIGRATIONS[:8]) == 8
            for r in old:
                await c.execute("INSERT INTO log VALUES (%s, %s, %s, %s, %s, %s)",
                                (r.origin, r.seq, r.kind, r.body, *r.hlc))  # fmt: skip
    store = await backend.open(incarnation=2)
    assert await store.records_after({}, 100) == old
    e = event(6)
    await store.commit(WriteBatch(events=[e], records=[record(6, e)]))
    assert (await store.records_after({"r:1": 5}, 100)) == [record(6, e)]
    await store.close()
    assert backend.log_rows()[-1][2] == e.id


@pytest.mark.parametrize("head, tail", [(b"", b""), (b"", b"\x00"), (b"\x00\xff", b""),
                                        (b"\xc3", b"\x00\x00")])  # fmt: skip
@pytest.mark.parametrize("stored", [None, "same", "other"])
async def test_cuts_at_the_edges_and_nul_bytes(
    backend: Backend, head: bytes, tail: bytes, stored: str | None
) -> None:
    """The payload at the start or end of the body, nothing around it, NULs in it; the
    events row holding the same or other bytes. (SQLite's substr of an empty BLOB is
    NULL: a body rebuilt from one would have been dropped by the INSERT OR IGNORE.)"""
    payload = bytes(CUT_MIN_BYTES)
    held = {None: None, "same": payload, "other": bytes(CUT_MIN_BYTES + 1)}[stored]
    await _commit_and_read(backend, head + payload + tail, payload, held)


_bytes = st.binary(min_size=0, max_size=300)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    head=_bytes,
    tail=_bytes,
    payload=st.binary(min_size=CUT_MIN_BYTES, max_size=CUT_MIN_BYTES + 200),
    stored=st.one_of(st.none(), st.binary(min_size=CUT_MIN_BYTES, max_size=CUT_MIN_BYTES + 50)),
)
def test_any_body_comes_back_as_committed(
    backend: Backend, head: bytes, tail: bytes, payload: bytes, stored: bytes | None
) -> None:
    """Any bytes around and in the payload (NULs, invalid UTF-8), cut or kept whole (the
    events row already holding ``stored``), come back exactly. Except a body that opens
    like a sealed blob: a record body is msgpack, which never starts with 0xC1, and the
    replica refuses a body that does not decode, so no store holds one."""
    body = head + payload + tail
    assume(not is_sealed(body))
    asyncio.run(_commit_and_read(backend, body, payload, stored))


async def _commit_and_read(
    backend: Backend, body: bytes, payload: bytes, stored: bytes | None
) -> None:
    store = await backend.open()
    seq = (await store.load_version_vector()).get("r:1", 0) + 1
    eid = f"evt_{seq:06}"
    if stored is not None:
        await store.commit(WriteBatch(events=[Event(eid, "acme", "a.b", stored, "r", 1)]))
    rec = Record("r:1", seq, "event", body, (seq, 0))
    batch = WriteBatch(events=[Event(eid, "acme", "a.b", payload, "r", 1)], records=[rec],
                       version_vector={"r:1": seq})  # fmt: skip
    await store.commit(batch)
    try:
        assert await store.records_after({"r:1": seq - 1}, 1) == [rec]
    finally:
        await store.close()
