"""SQLite store on disk (issue 17): a new file uses 8 KiB pages with incremental
auto-vacuum, log truncation gives the freed pages back to the file system in chunks that
let group commits in between, the Idempotency-Key reads and purges go through indexes,
not table scans, the log is a rowid table (rebuilt as one in an older file), and WAL
checkpoints run on a thread of their own."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from regionsync.adapters import sqlite_checkpoint, sqlite_store
from regionsync.adapters.sqlite_store import PAGE_SIZE, SqliteStore
from regionsync.core.model import Event, Record, WriteBatch

PAYLOAD = b'{"k":"' + b"x" * 2000 + b'"}'


def pragma(path: Path, name: str) -> int:
    with sqlite3.connect(path) as db:
        return db.execute(f"PRAGMA {name}").fetchone()[0]


async def test_truncation_gives_pages_back(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    store = SqliteStore(path)
    await store.open("r", new_incarnation=1)
    # records whose events are not stored here keep their whole body (2 KB)
    records = [Record("r:1", i + 1, "event", PAYLOAD, (i, 0)) for i in range(300)]
    await store.commit(WriteBatch(records=records, version_vector={"r:1": 300}))
    assert pragma(path, "page_size") == PAGE_SIZE and pragma(path, "auto_vacuum") == 2
    before = pragma(path, "page_count")
    assert await store.truncate_log({"r:1": 299}) == 299
    after = pragma(path, "page_count")
    assert pragma(path, "freelist_count") == 0
    # about 300 x 2 KB of log records left the file (8 KiB pages hold three)
    assert (before - after) * PAGE_SIZE > 300 * len(PAYLOAD) * 0.8
    await store.close()


async def test_truncation_lets_commits_in_between_its_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One transaction of 20,000 log records held every publish for 120 ms; chunks of
    ``TRUNCATE_CHUNK`` let a commit queued meanwhile go first, and each chunk moves the
    floor (a crash between chunks leaves a consistent log)."""
    monkeypatch.setattr(sqlite_store, "TRUNCATE_CHUNK", 50)
    store = SqliteStore(tmp_path / "n.db")
    await store.open("r", new_incarnation=1)
    records = [Record("r:1", i + 1, "event", PAYLOAD, (i, 0)) for i in range(1000)]
    await store.commit(WriteBatch(records=records, version_vector={"r:1": 1000}))
    truncating = asyncio.create_task(store.truncate_log({"r:1": 999}))
    await asyncio.sleep(0)  # the first chunk holds the write lock
    event = Event("evt_x", "acme", "a.b", PAYLOAD, "r", 1)
    await store.commit(WriteBatch(events=[event]))
    assert not truncating.done()  # the commit did not wait for the whole truncation
    assert 0 < (await store.load_log_floor())["r:1"] < 999
    assert await truncating == 999
    assert await store.load_log_floor() == {"r:1": 999}
    assert [r.seq for r in await store.records_after({"r:1": 0}, 10)] == [1000]
    await store.close()


async def test_a_store_made_before_keeps_its_pages(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # an older store: 4 KiB pages, no auto-vacuum
        db.execute("CREATE TABLE kept(x)")
    store = SqliteStore(path)
    await store.open("r", new_incarnation=1)
    assert await store.truncate_log({"r:1": 5}) == 0
    assert pragma(path, "page_size") == 4096 and pragma(path, "auto_vacuum") == 0
    await store.close()


def test_idempotency_reads_use_indexes(tmp_path: Path) -> None:
    from regionsync.adapters.sqlite_schema import SCHEMA

    with sqlite3.connect(tmp_path / "plan.db") as db:
        db.executescript(SCHEMA)
        plans = {
            q: " ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN " + q, args))
            for q, args in [
                ("SELECT * FROM idempotency WHERE tenant = ? AND key = ?", ("t", "k")),
                ("SELECT * FROM idempotency WHERE event_id IN (?, ?)", ("e1", "e2")),
                ("SELECT rowid FROM idempotency WHERE created_at_ms < ? LIMIT ?", (1, 5)),
            ]
        }
    assert all("USING" in p and "SCAN" not in p for p in plans.values()), plans


def wal_size(path: Path) -> int:
    """Bytes in the database's WAL file; 0 when there is none."""
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def log_table_sql(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT sql FROM sqlite_schema WHERE name = 'log'").fetchone()[0]


async def test_the_log_is_a_rowid_table(tmp_path: Path) -> None:
    """Log records carry event payloads (2-3 KB): SQLite advises WITHOUT ROWID only for
    rows under about 1/20 of a page, and such a log cost 2-3x the CPU per insert."""
    store = SqliteStore(tmp_path / "n.db")
    await store.open("r", new_incarnation=1)
    await store.close()
    assert "WITHOUT ROWID" not in log_table_sql(tmp_path / "n.db").upper()


async def test_an_older_without_rowid_log_is_rebuilt_with_every_record(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    store = SqliteStore(path)
    await store.open("r", new_incarnation=1)
    records = [Record(o, i + 1, "event", PAYLOAD + bytes([i]), (i, 1)) for o in ("a:1", "b:1")
               for i in range(40)]  # fmt: skip
    await store.commit(WriteBatch(records=records, version_vector={"a:1": 40, "b:1": 40}))
    before = await store.records_after({}, 1000)
    await store.close()
    with sqlite3.connect(path, isolation_level=None) as db:  # the log as files had it
        db.executescript(
            "BEGIN; CREATE TABLE old_log(origin TEXT NOT NULL, seq INTEGER NOT NULL, "
            "kind TEXT NOT NULL, body BLOB NOT NULL, hlc_wall INTEGER NOT NULL, "
            "hlc_logical INTEGER NOT NULL, PRIMARY KEY(origin, seq)) WITHOUT ROWID; "
            "INSERT INTO old_log SELECT origin, seq, kind, body, hlc_wall, hlc_logical FROM log; "
            "DROP TABLE log; "
            "ALTER TABLE old_log RENAME TO log; COMMIT;"
        )
    assert "WITHOUT ROWID" in log_table_sql(path)
    for _ in range(2):  # rebuilt once, then left as it is
        store = SqliteStore(path)
        info = await store.open("r", new_incarnation=2)
        assert not info.fresh
        assert await store.records_after({}, 1000) == before
        assert await store.records_after({"a:1": 39}, 1000) == [before[39], *before[40:]]
        await store.close()
        assert "WITHOUT ROWID" not in log_table_sql(path).upper()


async def commit_events(store: SqliteStore, batches: int, first: int = 0) -> None:
    """``batches`` group commits of 10 ~2 KB events and their log records, the first one
    numbered ``first``."""
    per_batch = 10
    for b in range(first // per_batch, first // per_batch + batches):
        n = range(b * per_batch, (b + 1) * per_batch)
        events = [Event(f"evt_{i:05}", "acme", "a.b", PAYLOAD, "r", i) for i in n]
        records = [Record("r:1", i + 1, "event", PAYLOAD, (i, 0)) for i in n]
        await store.commit(WriteBatch(events=events, records=records))


@pytest.mark.parametrize("checkpointer", [True, False])
async def test_the_checkpointer_keeps_the_wal_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpointer: bool
) -> None:
    """Checkpoints run on their own thread every CHECKPOINT_BYTES, so the WAL starts over
    at the first commit after a pass that copied it all; without them (and the writer's own
    off) it holds every commit. WAL_SIZE_LIMIT 0 cuts the file back at each start-over."""
    monkeypatch.setattr(sqlite_store, "WRITER_CHECKPOINT_PAGES", 1_000_000)
    monkeypatch.setattr(sqlite_store, "WAL_SIZE_LIMIT", 0)  # the file shows the WAL's length
    monkeypatch.setattr(
        sqlite_checkpoint, "CHECKPOINT_BYTES", 64 * 1024 if checkpointer else 1 << 40
    )
    path = tmp_path / "n.db"
    store = SqliteStore(path)
    await store.open("r", new_incarnation=1)
    sizes = []
    try:
        for first in range(0, 1000, 100):  # ~4 MB of events and log records
            await commit_events(store, batches=10, first=first)
            passes = store.checkpointer
            if passes.in_flight is not None:
                await passes.in_flight  # a pause in the commits: the pass in flight ends
            if checkpointer:  # that pass may have started before the group's last commits
                passes.after_commit(sqlite_checkpoint.CHECKPOINT_BYTES)  # (a loaded machine):
                await passes.in_flight  # one more, as the next commit's bytes would start
            sizes.append(wal_size(path))
        if checkpointer:  # at most the frames of one group of 100 events (1.1-1.8 MB here)
            assert store.checkpointer.checkpoints >= 10 and max(sizes) < 2_500_000
        else:  # every group's frames (~1.2 MB each)
            assert store.checkpointer.checkpoints == 0 and sizes[-1] > 10_000_000
    finally:
        await store.close()
    assert wal_size(path) == 0  # the last close checkpointed and removed it
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM events").fetchone()[0] == 1000


async def test_the_writer_restarts_a_wal_that_commits_never_leave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits back to back: a pass on the other thread always ends behind the writer, so
    the writer's own checkpoint at WRITER_CHECKPOINT_PAGES bounds the WAL."""
    monkeypatch.setattr(sqlite_store, "WRITER_CHECKPOINT_PAGES", 64)  # 512 KiB
    monkeypatch.setattr(sqlite_checkpoint, "CHECKPOINT_BYTES", 64 * 1024)
    path = tmp_path / "n.db"
    store = SqliteStore(path)
    await store.open("r", new_incarnation=1)
    await commit_events(store, batches=100)
    assert store.checkpointer.checkpoints > 0 and wal_size(path) < 1_500_000
    await store.close()


async def test_close_waits_for_a_checkpoint_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_checkpoint, "CHECKPOINT_BYTES", 1)
    path = tmp_path / "n.db"
    store = SqliteStore(path)
    await store.open("r", new_incarnation=1)
    await commit_events(store, batches=1)
    assert store.checkpointer.in_flight is not None  # started by the commit, not yet done
    await store.close()
    assert store.checkpointer.checkpoints == 1 and wal_size(path) == 0
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM events").fetchone()[0] == 10


# commits batches of 10 events with a checkpoint pass after every 16 KiB, printing the last
# id of each batch once its commit returned (the node's 202 point); stops by itself
_COMMITTER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from regionsync.adapters import sqlite_checkpoint
    from regionsync.adapters.sqlite_store import SqliteStore
    from regionsync.core.model import Event, Record, WriteBatch

    sqlite_checkpoint.CHECKPOINT_BYTES = 16 * 1024
    PAYLOAD = b'{"k":"' + b"x" * 2000 + b'"}'

    async def main() -> None:
        store = SqliteStore(Path(sys.argv[1]))
        await store.open("r", new_incarnation=1)
        for b in range(2000):
            n = range(b * 10, b * 10 + 10)
            events = [Event(f"evt_{i:05}", "acme", "a.b", PAYLOAD, "r", i) for i in n]
            records = [Record("r:1", i + 1, "event", PAYLOAD, (i, 0)) for i in n]
            await store.commit(WriteBatch(events=events, records=records))
            print(n[-1], store.checkpointer.checkpoints, flush=True)

    asyncio.run(main())
    """
)


def test_a_kill_during_checkpoints_loses_no_committed_event(tmp_path: Path) -> None:
    """SIGKILL while checkpoint passes run back to back: on reopening, every event whose
    commit returned is there and the file passes SQLite's integrity check."""
    path = tmp_path / "n.db"
    argv = [sys.executable, "-c", _COMMITTER, str(path)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        lines = [child.stdout.readline() for _ in range(150)]
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    last, passes = map(int, lines[-1].split())
    assert passes > 10  # passes ran while it committed
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = {r[0] for r in db.execute("SELECT id FROM events")}
    assert {f"evt_{i:05}" for i in range(last + 1)} <= stored
