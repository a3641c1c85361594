"""SQLite Store (the embedded default): one file per node, WAL, fsync'd commits.

Every WriteBatch is one transaction with ``synchronous=FULL`` (one statement: an INSERT
into the ``commit_in`` view, see ``_COMMIT_TRIGGER``), so a batch that ``commit`` returned
from survives a crash or power loss (SQLite docs, "WAL mode" and "PRAGMA synchronous").
Writes go through one connection, serialized by a lock; reads use two other connections
(the second for the outcome recorder's reads by id), so they never see a transaction that
has not committed (WAL readers see the last committed snapshot) and never queue behind a
commit. Hot multi-row reads come back as one JSON row (``_json_rows``).
WAL checkpoints run on a thread of their own (``CHECKPOINT_BYTES``), so a commit seldom
waits for one; the writer's own, every ``WRITER_CHECKPOINT_PAGES``, lets the WAL start over.

Signing secrets are encrypted at rest when the store has a key ring (``keys``; the node
always passes one, adapters/secretbox.py): a registry row whose key holds a secret
(``core.registry.is_secret_key``) and a log record whose body may carry one
(``may_hold_secret``) are sealed with the current node key as they are written and
opened as they are read, so what replicates and what the node computes on stays
plaintext and only the file differs between regions. Rows written before encryption are
sealed on open (with SQLite's secure_delete, then VACUUM, so no old page keeps them).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import orjson

from ..core.model import (
    Attempt,
    AuditEntry,
    Delivery,
    DeliveryQuery,
    DeliveryStatus,
    Event,
    EventQuery,
    Record,
    WriteBatch,
)  # fmt: skip
from ..errors import CannotStart
from ..runtime.ports import StoreInfo
from .log_cut import CUT_MIN_BYTES, body_of, find_cuts, records_sql
from .secretbox import KEY_CHECK, MAGIC, AtRest, NodeKeys

__all__ = ["SqliteStore"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# A rowid table, not WITHOUT ROWID: a record carries its event's payload (2-3 KB for a
# GitHub webhook), and a WITHOUT ROWID table keeps whole rows in its b-tree, which SQLite
# advises only for rows under about 1/20 of a page ("The WITHOUT ROWID Optimization",
# section 4). With a 2,099-byte GitHub payload: 24.7 us of CPU per inserted row against
# 8.7 us as a rowid table (bench/log_rows.py, issue 17).
#
# An event record's body is kept without its event's payload (adapters.log_cut):
# ``event_id`` names the events row, ``event_at`` the byte offset it was cut from (both NULL
# for a body kept whole), and ``records_after`` puts it back. Whether the commit inserts
# the events row is known inside the statement only: ``_COMMIT_TRIGGER`` puts a body cut
# for an id already stored back together and keeps it whole.
_LOG_COLUMNS = """
  origin TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL,
  hlc_wall INTEGER NOT NULL, hlc_logical INTEGER NOT NULL, event_id TEXT, event_at INTEGER,
  PRIMARY KEY(origin, seq)
"""

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS registry(key TEXT PRIMARY KEY, state BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS log({_LOG_COLUMNS});
CREATE TABLE IF NOT EXISTS version_vector(origin TEXT PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS log_floor(origin TEXT PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS events(
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, event_type TEXT NOT NULL, payload BLOB NOT NULL,
  region TEXT NOT NULL, received_at_ms INTEGER NOT NULL, owner_gen TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS deliveries(
  id TEXT PRIMARY KEY, event_id TEXT NOT NULL, endpoint_id TEXT NOT NULL,
  tenant TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL,
  next_attempt_at_ms INTEGER, region TEXT NOT NULL, created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL, generation INTEGER NOT NULL DEFAULT 0,
  owner_gen TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries(region, status, next_attempt_at_ms);
CREATE INDEX IF NOT EXISTS deliveries_due_endpoint
  ON deliveries(region, status, endpoint_id, next_attempt_at_ms, id);
CREATE INDEX IF NOT EXISTS deliveries_endpoint ON deliveries(endpoint_id, id);
CREATE INDEX IF NOT EXISTS deliveries_event ON deliveries(event_id);
CREATE INDEX IF NOT EXISTS deliveries_tenant ON deliveries(tenant, created_at_ms, id);
CREATE INDEX IF NOT EXISTS events_tenant ON events(tenant, received_at_ms, id);
CREATE TABLE IF NOT EXISTS attempts(
  delivery_id TEXT NOT NULL, n INTEGER NOT NULL, at_ms INTEGER NOT NULL, region TEXT NOT NULL,
  status_code INTEGER, latency_ms REAL NOT NULL, error TEXT, response_excerpt TEXT NOT NULL,
  endpoint_id TEXT NOT NULL DEFAULT '', generation INTEGER NOT NULL DEFAULT 0,
  response_headers TEXT NOT NULL DEFAULT '', owner_gen TEXT NOT NULL DEFAULT '',
  request_headers TEXT NOT NULL DEFAULT '', PRIMARY KEY(delivery_id, region, generation, n)
);
CREATE INDEX IF NOT EXISTS attempts_endpoint ON attempts(endpoint_id, at_ms);
CREATE INDEX IF NOT EXISTS attempts_age ON attempts(at_ms);
CREATE TABLE IF NOT EXISTS audit(
  origin TEXT NOT NULL, seq INTEGER NOT NULL, hlc_wall INTEGER NOT NULL,
  hlc_logical INTEGER NOT NULL, who TEXT NOT NULL, op TEXT NOT NULL, object TEXT NOT NULL,
  tenant TEXT NOT NULL, detail TEXT NOT NULL, PRIMARY KEY(origin, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS audit_time ON audit(hlc_wall, hlc_logical, origin, seq);
CREATE INDEX IF NOT EXISTS audit_tenant ON audit(tenant, hlc_wall, hlc_logical, origin, seq);
CREATE TABLE IF NOT EXISTS idempotency(
  tenant TEXT NOT NULL, key TEXT NOT NULL, event_id TEXT NOT NULL, body_sha256 TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL, region TEXT NOT NULL, PRIMARY KEY(tenant, key)
);
CREATE INDEX IF NOT EXISTS idempotency_event ON idempotency(event_id);
CREATE INDEX IF NOT EXISTS idempotency_age ON idempotency(created_at_ms);
"""

# row counts kept by commits (counts() reads a few rows, never scans events or
# deliveries; issue 17): kind 'event' by origin region (status ''), added by ``_commit``
# once per region and batch (a trigger per row doubled the cost of an event insert), kind
# 'delivery' by owner region and status, kept by triggers (a delivery write is an upsert:
# a new row fires the INSERT trigger, a changed one the UPDATE trigger). Created and
# filled once per store.
_ROW_COUNTS = """
CREATE TABLE row_counts(
  kind TEXT NOT NULL, region TEXT NOT NULL, status TEXT NOT NULL, n INTEGER NOT NULL,
  PRIMARY KEY(kind, region, status)
) WITHOUT ROWID;
CREATE TRIGGER row_counts_event_out AFTER DELETE ON events BEGIN
  UPDATE row_counts SET n = n - 1
    WHERE kind = 'event' AND region = OLD.region AND status = '';
END;
CREATE TRIGGER row_counts_delivery_in AFTER INSERT ON deliveries BEGIN
  INSERT INTO row_counts VALUES ('delivery', NEW.region, NEW.status, 1)
    ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER row_counts_delivery_moved AFTER UPDATE OF region, status ON deliveries
  WHEN OLD.region IS NOT NEW.region OR OLD.status IS NOT NEW.status BEGIN
  UPDATE row_counts SET n = n - 1
    WHERE kind = 'delivery' AND region = OLD.region AND status = OLD.status;
  INSERT INTO row_counts VALUES ('delivery', NEW.region, NEW.status, 1)
    ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER row_counts_delivery_out AFTER DELETE ON deliveries BEGIN
  UPDATE row_counts SET n = n - 1
    WHERE kind = 'delivery' AND region = OLD.region AND status = OLD.status;
END;
INSERT INTO row_counts SELECT 'event', region, '', count(*) FROM events GROUP BY region;
INSERT INTO row_counts
  SELECT 'delivery', region, status, count(*) FROM deliveries GROUP BY region, status;
"""

# bytes per page of a new store: a 4 KiB page holds one ~2 KB event and wastes the rest
# (measured by bench/restart.py: 4.4x the payload on disk); 8 KiB pages hold three
PAGE_SIZE = 8192
VACUUM_PAGES = 2048  # pages (16 MiB) given back per log truncation at most
TRUNCATE_CHUNK = 500  # log records deleted per transaction (a few ms here)
VACUUM_CHUNK = 256  # pages given back per transaction (the write lock is let go between)
# bytes committed (blobs and JSON handed to SQLite) after which a PASSIVE checkpoint starts
# on the checkpointer thread. SQLite's own (wal_autocheckpoint, 1,000 pages) ran in the
# committing thread: every publish queued behind it waited for its writes and fsync (p99
# at half rate 16-18 ms with it, 5-9 ms with this, bench/ingest.py; issue 17). Passes
# must be small: one every 100 commits of a paced run gave a p99 of 18-21 ms.
CHECKPOINT_BYTES = 256 * 1024
# WAL pages after which the writer checkpoints after its commit (wal_autocheckpoint). The
# WAL starts over only at a commit that finds every frame copied, which a pass on the
# other thread never leaves behind while commits come back to back; the writer's pass then
# copies what the last pass missed, and it is the backstop if that thread fails.
WRITER_CHECKPOINT_PAGES = 2048
# bytes the WAL file is cut back to when it starts over (PRAGMA journal_size_limit): it is
# reused, not shrunk, otherwise, and would keep the size of its longest run on disk
WAL_SIZE_LIMIT = 4 * 1024 * 1024

# columns added after the first schema: a store created before them gets them on open
_ADDED_COLUMNS = [
    *((t, "owner_gen TEXT NOT NULL DEFAULT ''") for t in ("events", "deliveries", "attempts")),
    ("attempts", "request_headers TEXT NOT NULL DEFAULT ''"),  # issue 15
    ("log", "event_id TEXT"),  # issue 17: payloads cut from event records (_LOG_COLUMNS)
    ("log", "event_at INTEGER"),
]
_ATTEMPT_COLS = (
    "delivery_id, n, at_ms, region, status_code, latency_ms, error, response_excerpt, "
    "endpoint_id, generation, response_headers, owner_gen, request_headers"
)
_DELIVERY_COLS = (
    "id, event_id, endpoint_id, tenant, status, attempts, next_attempt_at_ms, region, "
    "created_at_ms, updated_at_ms, generation, owner_gen"
)
# A delivery's later state over its stored row, in place. Only the columns a state change
# moves are set (SQLite rewrites every index holding a SET column, equal value or not; a
# REPLACE rewrote all six): these are fixed at fan-out (runtime/ingest.py) and every later
# state carries them unchanged.
_DELIVERY_FIXED = {"id", "event_id", "endpoint_id", "tenant", "created_at_ms"}
_DELIVERY_UPSERT = "ON CONFLICT(id) DO UPDATE SET " + ", ".join(
    f"{c} = excluded.{c}" for c in _DELIVERY_COLS.split(", ") if c not in _DELIVERY_FIXED
)
_D_COLS = ", ".join(f"d.{c}" for c in _DELIVERY_COLS.split(", "))
_AUDIT_COLS = "origin, seq, hlc_wall, hlc_logical, who, op, object, tenant, detail"
_EVENT_COLS = "id, tenant, event_type, payload, region, received_at_ms, owner_gen"


def _blob(at: int) -> str:
    """The BLOB a ``json_each`` row holds as [start, length] in ``NEW.blobs`` at ``at``. An
    empty one is spelled out: ``substr`` of an empty BLOB is NULL (SQLite 3.40), and NULL
    in a NOT NULL column makes an INSERT OR IGNORE drop the row."""
    return (f"CASE WHEN value->>{at + 1} = 0 THEN x'' "
            f"ELSE substr(NEW.blobs, value->>{at}, value->>{at + 1}) END")  # fmt: skip


def _cols(names: str, blobs: Sequence[int] = ()) -> str:
    """Select expressions for a ``json_each`` row array holding ``names`` in order; a
    BLOB column (index in ``blobs``) is held as [start, length] in ``NEW.blobs``."""
    out, at = [], 0
    for i, _ in enumerate(names.split(", ")):
        if i in blobs:
            out.append(_blob(at))
            at += 2
        else:
            out.append(f"value->>{at}")
            at += 1
    return ", ".join(out)


def _each(part: str, cols: str, blobs: Sequence[int] = ()) -> str:
    return f"SELECT {_cols(cols, blobs)} FROM json_each(NEW.{part}) WHERE true"


# A WriteBatch is written by one INSERT into this view: its trigger fans the batch (one
# JSON array of rows per table, ``_PARTS``, its BLOB values cut from one BLOB) out to the
# tables. One array per table, not one document: SQLite parses a JSON argument anew for
# every ``json_each`` over it, and one document parsed once per table cost a third of a
# replicated event's commit (22 -> 17 us of CPU, bench/README.md). Why one statement:
# sqlite3 releases the GIL for every step of every statement (every row of an
# executemany) and the writer thread must win it back from the busy event loop each time,
# up to the 5 ms switch interval: 7.5 ms per row against a busy thread, 10 us alone
# (measured, bench/README.md "delivery_rate.py"). A single statement outside BEGIN is its
# own transaction (autocommit), fsync'd at its end like any commit.
_PARTS = ("r", "l", "v", "e", "d", "a", "u", "i")  # registry, log, ... idempotency
_COMMIT_IN = f"INSERT INTO commit_in VALUES ({', '.join('?' * (len(_PARTS) + 1))})"


def _to_json(value: Any) -> str:
    """Compact JSON text (UTF-8 kept as is) of ``value`` (tuples become arrays).
    Text, not bytes: SQLite (3.45+) reads a BLOB argument to its JSON functions as JSONB.
    Raises orjson.JSONEncodeError (a TypeError) for an int beyond 64 bits or a lone
    surrogate in a str (which sqlite3 refuses to bind as well)."""
    return orjson.dumps(value).decode()


_COMMIT_TRIGGER = f"""
CREATE TEMP VIEW commit_in({", ".join(_PARTS)}, blobs) AS SELECT {"NULL, " * len(_PARTS)}NULL;
CREATE TEMP TRIGGER commit_in INSTEAD OF INSERT ON commit_in BEGIN
  INSERT INTO registry(key, state) {_each("r", "key, state", (1,))}
    ON CONFLICT(key) DO UPDATE SET state = excluded.state;
  INSERT INTO version_vector(origin, seq) {_each("v", "origin, seq")}
    ON CONFLICT(origin) DO UPDATE SET seq = max(seq, excluded.seq);
  INSERT INTO row_counts SELECT 'event', value->>5, '', count(DISTINCT value->>0)
    FROM json_each(NEW.e) WHERE NOT EXISTS (SELECT 1 FROM events WHERE id = value->>0)
    GROUP BY value->>5 ON CONFLICT DO UPDATE SET n = n + excluded.n;
  INSERT OR IGNORE INTO log(origin, seq, kind, body, hlc_wall, hlc_logical, event_id, event_at)
    SELECT value->>0, value->>1, value->>2,
      CASE WHEN e.rowid IS NULL THEN {_blob(3)}
        ELSE CAST(coalesce(substr(NEW.blobs, value->>3, value->>8), x'')
                  || {_blob(9)}
                  || coalesce(substr(NEW.blobs, value->>3 + value->>8, value->>4 - value->>8),
                              x'') AS BLOB) END,
      value->>5, value->>6, CASE WHEN e.rowid IS NULL THEN value->>7 END,
      CASE WHEN e.rowid IS NULL THEN value->>8 END
    FROM json_each(NEW.l) LEFT JOIN events e ON e.id = value->>7;
  INSERT OR IGNORE INTO events({_EVENT_COLS}) {_each("e", _EVENT_COLS, (3,))};
  INSERT INTO deliveries({_DELIVERY_COLS}) {_each("d", _DELIVERY_COLS)} {_DELIVERY_UPSERT};
  INSERT OR IGNORE INTO attempts({_ATTEMPT_COLS}) {_each("a", _ATTEMPT_COLS)};
  INSERT OR IGNORE INTO audit({_AUDIT_COLS}) {_each("u", _AUDIT_COLS)};
  INSERT INTO idempotency {_each("i", "tenant, key, event_id, body_sha256, created_at_ms, region")}
    ON CONFLICT(tenant, key) DO UPDATE SET event_id = excluded.event_id,
    body_sha256 = excluded.body_sha256, created_at_ms = excluded.created_at_ms,
    region = excluded.region WHERE (excluded.created_at_ms, excluded.event_id)
    < (created_at_ms, event_id);
END;
"""


@contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction on ``db`` (autocommit mode): BEGIN IMMEDIATE, COMMIT when the
    block ends, ROLLBACK if it raises (the exception goes on)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _log_as_rowid_table(db: sqlite3.Connection) -> None:
    """Rebuild the log of a file written before it became a rowid table (``_LOG_COLUMNS``)
    as one: its records copied, in one transaction (about 8 s per 100,000 records of
    2 KB, once). No-op once it is one."""
    (sql,) = db.execute("SELECT sql FROM sqlite_schema WHERE name = 'log'").fetchone()
    if "WITHOUT ROWID" not in sql.upper():
        return
    with _immediate(db):
        db.execute(f"CREATE TABLE log_rowid({_LOG_COLUMNS})")
        db.execute(
            "INSERT INTO log_rowid(origin, seq, kind, body, hlc_wall, hlc_logical) "
            "SELECT origin, seq, kind, body, hlc_wall, hlc_logical FROM log ORDER BY origin, seq"
        )
        db.execute("DROP TABLE log")
        db.execute("ALTER TABLE log_rowid RENAME TO log")


class _Blobs:
    """BLOB values of one commit, concatenated; ``cut`` gives a value's [start, length]
    (1-based, as ``substr`` counts)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.at = 1

    def cut(self, b: bytes) -> tuple[int, int]:
        start = self.at
        if b:
            self.parts.append(b)
            self.at += len(b)
        return start, len(b)


def _log_rows(
    records: Sequence[Record], payloads: list[tuple[Event, int, int]], seal: AtRest, blobs: _Blobs
) -> list[tuple[Any, ...]]:
    """The commit's log rows (``_COMMIT_TRIGGER``): an ``event`` record whose body holds the
    payload of one of ``payloads`` (the batch's events it may be cut for, in order, with
    their payload's place in ``blobs``) goes without it, with that event's id and the byte
    offset it was cut from (``log_cut.find_cuts``); any other body goes whole, sealed at
    rest with a key ring if it may hold a secret (``_seal_plaintext_rows`` looks at whole
    bodies only)."""
    rows: list[tuple[Any, ...]] = []
    cuts = find_cuts(records, [e.payload for e, _, _ in payloads])
    for r, found in zip(records, cuts, strict=True):
        if found is None:
            sealed = seal.seal_body(r.origin, r.seq, r.body)
            rows.append((r.origin, r.seq, r.kind, *blobs.cut(sealed), *r.hlc))
            continue
        i, cut, rest = found
        e, start, length = payloads[i]
        rows.append((r.origin, r.seq, r.kind, *blobs.cut(rest), *r.hlc, e.id, cut, start,
                     length))  # fmt: skip
    return rows


_RECORDS_AFTER = records_sql("?")
_EVENT_JSON_COLS = "id, tenant, event_type, hex(payload), region, received_at_ms, owner_gen"


def _event_of_json(r: Sequence[Any]) -> Event:
    """An Event from a ``_EVENT_JSON_COLS`` row (its payload in hex)."""
    return Event(r[0], r[1], r[2], bytes.fromhex(r[3]), r[4], r[5], r[6])


def _delivery(row: Sequence) -> Delivery:
    return Delivery(row[0], row[1], row[2], row[3], DeliveryStatus(row[4]), *row[5:12])


class SqliteStore:
    """Store over one SQLite file ``path`` (created with its parent directory); with
    ``keys``, signing secrets are encrypted at rest (module docstring). Reading a sealed
    row without the key it names raises ``secretbox.SealedKeyError``."""

    def __init__(self, path: str | Path, keys: NodeKeys | None = None):
        self.path = Path(path)
        self.keys = keys
        self.at_rest = AtRest(keys, str(self.path))
        self._db: sqlite3.Connection | None = None
        self._rdb: aiosqlite.Connection | None = None
        # a second reader (thread) for reads of delivery state by id (the outcome
        # recorder's and the replica's): never queued behind a due read or a page
        self._sdb: aiosqlite.Connection | None = None
        # every write runs as one call on this one thread: a group commit costs one
        # thread hop, and sqlite3 releases the GIL while it fsyncs
        self._writer: ThreadPoolExecutor | None = None
        self._write = asyncio.Lock()
        # WAL checkpoints: their own connection and thread (CHECKPOINT_BYTES)
        self._checkpointer: ThreadPoolExecutor | None = None
        self._cdb: sqlite3.Connection | None = None
        self._checkpoint: asyncio.Future[None] | None = None  # the pass in flight
        self._unchecked = 0  # bytes committed since the last pass started
        self.checkpoints = 0  # passes completed
        self._origins: set[str] = set()  # origins present in the log (kept, not scanned)

    @property
    def db(self) -> sqlite3.Connection:
        """The writer connection (used only on the writer thread)."""
        if self._db is None:
            raise RuntimeError("store is not open")
        return self._db

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._writer is None:
            raise RuntimeError("store is not open")
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    @property
    def rdb(self) -> aiosqlite.Connection:
        """The reader connection."""
        if self._rdb is None:
            raise RuntimeError("store is not open")
        return self._rdb

    async def open(self, region: str, new_incarnation: int) -> StoreInfo:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer")
        await self._run(self._open_writer)
        self._checkpointer = ThreadPoolExecutor(1, thread_name_prefix="sqlite-checkpoint")
        self._cdb = await asyncio.get_running_loop().run_in_executor(
            self._checkpointer, self._connect_checkpointer
        )
        self._rdb = await self._reader()
        self._sdb = await self._reader()
        self._origins = {
            o for (o,) in await self.rdb.execute_fetchall("SELECT DISTINCT origin FROM log")
        }
        rows = dict(await self.rdb.execute_fetchall("SELECT key, value FROM meta"))
        if "region" in rows:
            if rows["region"] != region:
                await self.close()
                raise ValueError(
                    f"store {self.path} belongs to region {rows['region']!r}, not {region!r}"
                )
            info = StoreInfo(region, int(rows["incarnation"]), fresh=False)
        else:
            meta = [("region", region), ("incarnation", str(new_incarnation))]
            insert = "INSERT INTO meta(key, value) VALUES (?, ?)"
            await self._run(self._in_transaction, insert, meta)
            info = StoreInfo(region, new_incarnation, fresh=True)
        try:
            await self._agree_on_keys(region, rows.get(KEY_CHECK))
        except CannotStart:
            await self.close()
            raise
        return info

    async def _agree_on_keys(self, region: str, stored: str | None) -> None:
        """Check this ring against the store's key check (``AtRest.agree``; CannotStart
        if it cannot open it) and store the check it returns."""
        sealed: list[tuple[str, bytes]] = []
        if stored is None and self.keys is not None:
            sealed = [
                (k, bytes(v))
                for k, v in await self.rdb.execute_fetchall(
                    "SELECT key, state FROM registry WHERE substr(state, 1, 4) = ?", (MAGIC,)
                )
            ]
        check = self.at_rest.agree(region, stored, sealed)
        if check is not None:
            await self._run(
                self._in_transaction,
                "INSERT INTO meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [(KEY_CHECK, check)],
            )

    async def _reader(self) -> aiosqlite.Connection:
        db = await aiosqlite.connect(self.path, isolation_level=None)
        await db.execute("PRAGMA busy_timeout=5000")
        # the reader's temporary b-trees (IN lists, sorts of LIMITed reads) in memory: as
        # files (the default) each one costs a temp-file open, ~0.1 ms per claim of due
        # deliveries (measured, bench/README.md "tenants.py")
        await db.execute("PRAGMA temp_store=MEMORY")
        return db

    def _open_writer(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        if db.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchone() is None:
            # a new file (both only take effect before the first table; issue 17): pages
            # that hold several ~2 KB events, and pages freed by log truncation given back
            db.execute(f"PRAGMA page_size={PAGE_SIZE}")
            db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=5000")
        db.execute(f"PRAGMA wal_autocheckpoint={WRITER_CHECKPOINT_PAGES}")
        db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        db.executescript(_SCHEMA)
        _log_as_rowid_table(db)
        for table, column in _ADDED_COLUMNS:
            have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
            if column.split()[0] not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
        if db.execute("SELECT 1 FROM sqlite_schema WHERE name = 'row_counts'").fetchone() is None:
            db.executescript(f"BEGIN IMMEDIATE;{_ROW_COUNTS}COMMIT;")  # one pass, then kept
        # counted REPLACEs before deliveries were upserted; with an upsert it counts twice
        db.execute("DROP TRIGGER IF EXISTS row_counts_delivery_replaced")
        db.execute("DROP TRIGGER IF EXISTS row_counts_event_in")  # counted by commit_in now
        db.executescript(_COMMIT_TRIGGER)
        self._db = db
        if self.keys is not None:
            self._seal_plaintext_rows()

    def _seal_plaintext_rows(self) -> None:
        """Seal secret rows written before encryption (or without a key ring); the freed
        pages are zeroed (secure_delete), the file rebuilt (VACUUM) and the WAL emptied."""
        db, seal = self.db, self.at_rest
        regs = [
            (sealed, key)
            for key, state in db.execute("SELECT key, state FROM registry")
            if (sealed := seal.seal_state(key, state)) != state
        ]
        logs = [
            (sealed, origin, seq)
            # a body cut from its event (event_at) may hold no secret (``_log_rows``)
            for origin, seq, body in db.execute(
                "SELECT origin, seq, body FROM log WHERE event_at IS NULL"
            )
            if (sealed := seal.seal_body(origin, seq, body)) != body
        ]
        if not regs and not logs:
            return
        log.warning("sealing %d registry rows and %d log records", len(regs), len(logs))
        db.execute("PRAGMA secure_delete=ON")
        with _immediate(db):
            db.executemany("UPDATE registry SET state = ? WHERE key = ?", regs)
            db.executemany("UPDATE log SET body = ? WHERE origin = ? AND seq = ?", logs)
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("PRAGMA secure_delete=OFF")

    def _in_transaction(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        with _immediate(self.db):
            return self.db.executemany(sql, rows).rowcount

    async def renew_incarnation(self, incarnation: int) -> None:
        await self._run(
            self._in_transaction,
            "UPDATE meta SET value = ? WHERE key = 'incarnation'",
            [(str(incarnation),)],
        )

    def _connect_checkpointer(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA synchronous=FULL")  # the pass fsyncs the database file
        return db

    def _checkpoint_pass(self) -> None:
        """One PASSIVE checkpoint (SQLite docs, "PRAGMA wal_checkpoint"): copies what it can
        of the WAL into the database without waiting for readers or the writer; the WAL
        starts over at the next commit once every frame is copied."""
        if self._cdb is not None:
            self._cdb.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _after_commit(self, written: int) -> None:
        """Count ``written`` bytes; start a checkpoint pass if CHECKPOINT_BYTES have been
        committed since the last one started and none is in flight."""
        self._unchecked += written
        if self._unchecked < CHECKPOINT_BYTES or self._checkpoint or not self._checkpointer:
            return
        self._unchecked = 0
        self._checkpoint = fut = asyncio.get_running_loop().run_in_executor(
            self._checkpointer, self._checkpoint_pass
        )
        fut.add_done_callback(self._checkpoint_done)

    def _checkpoint_done(self, fut: asyncio.Future[None]) -> None:
        self._checkpoint = None
        if fut.cancelled():
            return
        if (err := fut.exception()) is not None:  # the writer's backstop checkpoints
            log.warning("WAL checkpoint failed: %s", err)
        else:
            self.checkpoints += 1

    async def close(self) -> None:
        for reader in (self._rdb, self._sdb):
            if reader is not None:
                await reader.close()
        if self._checkpointer is not None:  # before the writer: its close checkpoints last
            if self._checkpoint is not None:
                await asyncio.wait([self._checkpoint])
            if self._cdb is not None:
                await asyncio.get_running_loop().run_in_executor(
                    self._checkpointer, self._cdb.close
                )
            self._checkpointer.shutdown(wait=True)
        self._cdb = self._checkpointer = None
        if self._db is not None:
            await self._run(self._db.close)
        if self._writer is not None:
            self._writer.shutdown(wait=True)
        self._db = self._rdb = self._sdb = None
        self._writer = None

    async def commit(self, batch: WriteBatch) -> None:
        # shielded: a cancelled caller must not leave the connection inside a transaction
        await asyncio.shield(self._locked_commit(batch))

    async def _locked_commit(self, batch: WriteBatch) -> None:
        async with self._write:
            written = await self._run(self._commit, batch)
            self._origins.update(r.origin for r in batch.records)
            self._after_commit(written)

    def _commit(self, batch: WriteBatch) -> int:
        """Write ``batch`` in one transaction; the bytes handed to SQLite (blobs and JSON)."""
        db, seal, blobs = self.db, self.at_rest, _Blobs()
        doc: dict[str, list[Any]] = {}
        if batch.registry:
            doc["r"] = [(k, *blobs.cut(seal.seal_state(k, v))) for k, v in batch.registry.items()]
        if batch.version_vector:
            doc["v"] = list(batch.version_vector.items())
        payloads: list[tuple[Event, int, int]] = []  # events a record may be cut for
        if batch.events:
            # new events are counted per origin region (index 5) in row_counts by the trigger
            doc["e"] = []
            ids: set[str] = set()
            for e in batch.events:
                place = blobs.cut(e.payload)
                # the first row of an id is the one inserted
                if e.id not in ids and len(e.payload) >= CUT_MIN_BYTES:
                    payloads.append((e, *place))
                ids.add(e.id)
                doc["e"].append((e.id, e.tenant, e.event_type, *place, e.region,
                                 e.received_at_ms, e.owner_gen))  # fmt: skip
        if batch.records:
            doc["l"] = _log_rows(batch.records, payloads, seal, blobs)
        if batch.deliveries:
            doc["d"] = [
                (d.id, d.event_id, d.endpoint_id, d.tenant, d.status.value, d.attempts,
                 d.next_attempt_at_ms, d.region, d.created_at_ms, d.updated_at_ms, d.generation,
                 d.owner_gen)
                for d in batch.deliveries
            ]  # fmt: skip
        if batch.attempts:
            doc["a"] = [
                (a.delivery_id, a.n, a.at_ms, a.region, a.status_code, a.latency_ms, a.error,
                 a.response_excerpt, a.endpoint_id, a.generation, a.response_headers,
                 a.owner_gen, a.request_headers)
                for a in batch.attempts
            ]  # fmt: skip
        if batch.audit:
            doc["u"] = [
                (a.origin, a.seq, a.hlc_wall_ms, a.hlc_logical, a.who, a.op, a.object,
                 a.tenant, a.detail)
                for a in batch.audit
            ]  # fmt: skip
        if batch.idempotency:
            doc["i"] = batch.idempotency  # the earliest acceptance of a key wins everywhere
        if not doc:
            return 0
        parts = [None if (v := doc.get(p)) is None else _to_json(v) for p in _PARTS]
        db.execute(_COMMIT_IN, [*parts, b"".join(blobs.parts)])
        return blobs.at + sum(len(p) for p in parts if p is not None)

    async def load_registry(self) -> dict[str, bytes]:
        rows = await self.rdb.execute_fetchall("SELECT key, state FROM registry")
        return {k: self.at_rest.open_state(k, v) for k, v in rows}

    async def load_version_vector(self) -> dict[str, int]:
        return dict(await self.rdb.execute_fetchall("SELECT origin, seq FROM version_vector"))

    async def records_after(self, after: Mapping[str, int], limit: int) -> list[Record]:
        out: list[Record] = []
        for origin in sorted(self._origins):
            if len(out) >= limit:
                break
            rows = await self.rdb.execute_fetchall(
                _RECORDS_AFTER, (origin, after.get(origin, 0), limit - len(out))
            )
            # a cut record whose events row is gone raises sqlite3.DatabaseError
            out.extend(
                Record(r[0], r[1], r[2], body_of(r, self.at_rest, sqlite3.DatabaseError),
                       (r[4], r[5]))
                for r in rows
            )  # fmt: skip
        return out

    async def truncate_log(self, upto: Mapping[str, int]) -> int:
        """Delete log records up to ``upto`` (origin -> seq), ``TRUNCATE_CHUNK`` records a
        transaction with the write lock released between them, so group commits go on
        meanwhile (one transaction of 20,000 records held publishes for 120 ms, issue 17).
        Each chunk moves ``log_floor`` with it: a crash between chunks leaves a
        consistent, partly truncated log."""
        total = 0
        for origin, seq in sorted(upto.items()):
            while True:
                async with self._write:
                    n, done = await self._run(self._truncate_chunk, origin, seq)
                total += n
                if done:
                    break
        for _ in range(VACUUM_PAGES // VACUUM_CHUNK if total else 0):
            async with self._write:
                if not await self._run(self._give_back_pages):
                    break
        return total

    def _truncate_chunk(self, origin: str, upto: int) -> tuple[int, bool]:
        """Delete up to ``TRUNCATE_CHUNK`` of ``origin``'s oldest records with seq <=
        ``upto`` in one transaction; (deleted, whether none is left up to ``upto``)."""
        db = self.db
        with _immediate(db):
            row = db.execute(
                "SELECT seq FROM log WHERE origin = ? AND seq <= ? ORDER BY seq LIMIT 1 OFFSET ?",
                (origin, upto, TRUNCATE_CHUNK - 1),
            ).fetchone()
            top = upto if row is None or row[0] >= upto else row[0]
            n = db.execute("DELETE FROM log WHERE origin = ? AND seq <= ?", (origin, top)).rowcount
            db.execute(
                "INSERT INTO log_floor(origin, seq) VALUES (?, ?) "
                "ON CONFLICT(origin) DO UPDATE SET seq = max(seq, excluded.seq)",
                (origin, top),
            )
        return n, top >= upto

    def _give_back_pages(self) -> bool:
        """Return ``VACUUM_CHUNK`` free pages to the file system when more than a quarter
        of the file is free (a peer was away and the log grew, then got truncated); True
        if it did. Free pages are reused by later writes anyway, so a node whose log is
        truncated as it goes moves no page; moving them costs a write each. A no-op on a
        store made without auto_vacuum."""
        db = self.db
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        if free * 4 <= db.execute("PRAGMA page_count").fetchone()[0]:
            return False
        # executescript steps the pragma to the end (execute() frees one page)
        db.executescript(f"PRAGMA incremental_vacuum({VACUUM_CHUNK});")
        return True

    async def load_log_floor(self) -> dict[str, int]:
        return dict(await self.rdb.execute_fetchall("SELECT origin, seq FROM log_floor"))

    async def list_event_ids(self, after: str = "", limit: int | None = None) -> list[str]:
        rows = await self.rdb.execute_fetchall(
            "SELECT id FROM events WHERE id > ? ORDER BY id LIMIT ?",
            (after, -1 if limit is None else limit),
        )
        return [r[0] for r in rows]

    async def load_deliveries(self, after: str = "", limit: int | None = None) -> list[Delivery]:
        rows = await self.rdb.execute_fetchall(
            f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE id > ? ORDER BY id LIMIT ?",
            (after, -1 if limit is None else limit),
        )
        return [_delivery(r) for r in rows]

    async def get_event(self, event_id: str) -> Event | None:
        rows = await self.rdb.execute_fetchall(
            f"SELECT {_EVENT_COLS} FROM events WHERE id = ?",
            (event_id,),
        )
        return Event(*rows[0]) if rows else None

    async def _json_rows(
        self,
        cols: str,
        rest: str,
        params: Sequence[Any],
        reader: aiosqlite.Connection | None = None,
    ) -> list[list[Any]]:
        """The rows of ``SELECT cols rest`` read as one JSON array of row arrays: one
        step, so the reader thread takes the GIL back once, not once per row (the reason
        is ``_COMMIT_TRIGGER``'s; rows in no particular order). Values come back as JSON
        scalars: read a BLOB column through ``hex()``."""
        rows = await (reader or self.rdb).execute_fetchall(
            f"SELECT json_group_array(json_array({cols})) {rest}", params
        )
        return orjson.loads(rows[0][0]) if rows else []

    async def _by_ids(
        self, cols: str, table: str, ids: Sequence[str], reader: aiosqlite.Connection | None = None
    ) -> list[list[Any]]:
        rows: list[list[Any]] = []
        unique = list(dict.fromkeys(ids))
        for i in range(0, len(unique), 500):  # under SQLite's host-parameter limit
            part = unique[i : i + 500]
            where = f"FROM {table} WHERE id IN ({','.join('?' * len(part))})"
            rows += await self._json_rows(cols, where, part, reader)
        return rows

    async def get_events(self, event_ids: Sequence[str]) -> dict[str, Event]:
        rows = await self._by_ids(_EVENT_JSON_COLS, "events", event_ids)
        return {r[0]: _event_of_json(r) for r in rows}

    async def get_deliveries(self, delivery_ids: Sequence[str]) -> dict[str, Delivery]:
        rows = await self._by_ids(_DELIVERY_COLS, "deliveries", delivery_ids, self._sdb)
        return {r[0]: _delivery(r) for r in rows}

    async def load_idempotency(
        self, after: tuple[str, str] | None = None, limit: int | None = None
    ) -> list[tuple[str, str, str, str, int, str]]:
        tenant, key = after or ("", "")
        rows = await self.rdb.execute_fetchall(
            "SELECT tenant, key, event_id, body_sha256, created_at_ms, region FROM idempotency"
            " WHERE (tenant, key) > (?, ?) ORDER BY tenant, key LIMIT ?",
            (tenant, key, -1 if limit is None else limit),
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]

    async def get_idempotency(
        self, tenant: str, key: str
    ) -> tuple[str, str, str, str, int, str] | None:
        rows = await self.rdb.execute_fetchall(
            "SELECT tenant, key, event_id, body_sha256, created_at_ms, region FROM idempotency "
            "WHERE tenant = ? AND key = ?",
            (tenant, key),
        )
        return tuple(rows[0]) if rows else None  # type: ignore[return-value]

    async def idempotency_of_events(
        self, event_ids: Sequence[str]
    ) -> list[tuple[str, str, str, str, int, str]]:
        out: list[tuple[str, str, str, str, int, str]] = []
        for i in range(0, len(event_ids), 500):  # within SQLite's bound on parameters
            part = list(event_ids[i : i + 500])
            rows = await self.rdb.execute_fetchall(
                "SELECT tenant, key, event_id, body_sha256, created_at_ms, region "
                f"FROM idempotency WHERE event_id IN ({','.join('?' * len(part))})",
                part,
            )
            out.extend(tuple(r) for r in rows)  # type: ignore[misc]
        return sorted(out)

    async def purge_idempotency(self, before_ms: int, limit: int) -> int:
        async with self._write:
            return await self._run(
                self._in_transaction,
                "DELETE FROM idempotency WHERE rowid IN "
                "(SELECT rowid FROM idempotency WHERE created_at_ms < ? LIMIT ?)",
                [(before_ms, limit)],
            )

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        rows = await self.rdb.execute_fetchall(
            f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE id = ?", (delivery_id,)
        )
        return _delivery(rows[0]) if rows else None

    async def deliveries_of_event(self, event_id: str) -> list[Delivery]:
        rows = await self.rdb.execute_fetchall(
            f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE event_id = ? ORDER BY id",
            (event_id,),
        )
        return [_delivery(r) for r in rows]

    async def list_deliveries(
        self,
        endpoint_id: str,
        status: DeliveryStatus | None,
        since_ms: int | None,
        after_id: str | None,
        limit: int,
    ) -> list[Delivery]:
        sql = f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE endpoint_id = ?"
        args: list[object] = [endpoint_id]
        if status is not None:
            sql += " AND status = ?"
            args.append(status.value)
        if since_ms is not None:
            sql += " AND created_at_ms >= ?"
            args.append(since_ms)
        if after_id is not None:
            sql += " AND id > ?"
            args.append(after_id)
        sql += " ORDER BY id LIMIT ?"
        args.append(limit)
        rows = await self._json_rows(_DELIVERY_COLS, f"FROM ({sql})", args)
        return sorted((_delivery(r) for r in rows), key=lambda d: d.id)

    async def list_events(
        self, q: EventQuery, before: tuple[int, str] | None, limit: int
    ) -> list[Event]:
        # walks events_tenant backwards; the delivery filters probe deliveries_event
        sql = f"SELECT {_EVENT_COLS} FROM events WHERE tenant = ?"
        args: list[object] = [q.tenant]
        if q.event_type is not None:
            sql += " AND event_type = ?"
            args.append(q.event_type)
        if q.type_prefix:
            # a range over the binary collation: "a." <= type < "a/"
            upper = q.type_prefix[:-1] + chr(ord(q.type_prefix[-1]) + 1)
            sql += " AND event_type >= ? AND event_type < ?"
            args.extend((q.type_prefix, upper))
        if q.since_ms is not None:
            sql += " AND received_at_ms >= ?"
            args.append(q.since_ms)
        if q.until_ms is not None:
            sql += " AND received_at_ms < ?"
            args.append(q.until_ms)
        if q.endpoint_id is not None or q.status is not None:
            sql += " AND EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id"
            if q.endpoint_id is not None:
                sql += " AND d.endpoint_id = ?"
                args.append(q.endpoint_id)
            if q.status is not None:
                sql += " AND d.status = ?"
                args.append(q.status.value)
            sql += ")"
        if before is not None:
            sql += " AND (received_at_ms, id) < (?, ?)"
            args.extend(before)
        sql += " ORDER BY received_at_ms DESC, id DESC LIMIT ?"
        args.append(limit)
        return [Event(*r) for r in await self.rdb.execute_fetchall(sql, args)]

    async def list_tenant_deliveries(
        self, q: DeliveryQuery, before: tuple[int, str] | None, limit: int
    ) -> list[Delivery]:
        sql = f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE tenant = ?"
        args: list[object] = [q.tenant]
        if q.endpoint_id is not None:
            sql += " AND endpoint_id = ?"
            args.append(q.endpoint_id)
        if q.status is not None:
            sql += " AND status = ?"
            args.append(q.status.value)
        if q.since_ms is not None:
            sql += " AND created_at_ms >= ?"
            args.append(q.since_ms)
        if before is not None:
            sql += " AND (created_at_ms, id) < (?, ?)"
            args.extend(before)
        sql += " ORDER BY created_at_ms DESC, id DESC LIMIT ?"
        args.append(limit)
        return [_delivery(r) for r in await self.rdb.execute_fetchall(sql, args)]

    async def deliveries_of_events(self, event_ids: Sequence[str]) -> list[Delivery]:
        if not event_ids:
            return []
        marks = ",".join("?" * len(event_ids))
        rows = await self.rdb.execute_fetchall(
            f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE event_id IN ({marks}) ORDER BY id",
            list(event_ids),
        )
        return [_delivery(r) for r in rows]

    async def due_deliveries(
        self,
        region: str,
        now_ms: int,
        limit: int,
        exclude: Sequence[str],
        exclude_endpoints: Sequence[str] = (),
        per_endpoint: int | None = None,
    ) -> list[Delivery]:
        # per-endpoint due heads (deliveries_due_endpoint): the endpoints with pending rows
        # by a skip scan (one index probe each), then at most ``limit`` (``per_endpoint``)
        # rows of each one not excluded, merged (round-robin with ``per_endpoint``); a
        # blocked endpoint's backlog is never read, so a claim costs O(endpoints + rows
        # returned), not O(the blocked endpoints' due rows)
        # rank: the row's place in its endpoint's due order (round-robin), else 0
        rank = "0"
        if per_endpoint is not None:
            rank = (
                "row_number() OVER (PARTITION BY d.endpoint_id ORDER BY d.next_attempt_at_ms, d.id)"
            )
        skip_eps = skip_ids = ""
        if exclude_endpoints:
            skip_eps = f" AND e.ep NOT IN ({','.join('?' * len(exclude_endpoints))})"
        if exclude:
            skip_ids = f" AND id NOT IN ({','.join('?' * len(exclude))})"
        rows = await self._json_rows(
            f"{_DELIVERY_COLS}, rank",
            "FROM (WITH RECURSIVE e(ep) AS ("
            " SELECT min(endpoint_id) FROM deliveries WHERE region = ? AND status = 'pending'"
            " UNION ALL SELECT (SELECT min(endpoint_id) FROM deliveries WHERE region = ?"
            " AND status = 'pending' AND endpoint_id > e.ep) FROM e WHERE e.ep IS NOT NULL) "
            f"SELECT {_D_COLS}, {rank} AS rank FROM e JOIN deliveries d ON d.rowid IN ("
            " SELECT rowid FROM deliveries WHERE region = ? AND status = 'pending'"
            f" AND endpoint_id = e.ep AND next_attempt_at_ms <= ?{skip_ids}"
            " ORDER BY next_attempt_at_ms, id LIMIT ?) "
            f"WHERE e.ep IS NOT NULL{skip_eps} ORDER BY rank, d.next_attempt_at_ms, d.id LIMIT ?)",
            (region, region, region, now_ms, *exclude, per_endpoint or limit,
             *exclude_endpoints, limit),
        )  # fmt: skip
        rows.sort(key=lambda r: (r[12], r[6], r[0]))  # (rank, next attempt, id)
        return [_delivery(r) for r in rows]

    async def next_due_ms(self, region: str) -> int | None:
        rows = await self.rdb.execute_fetchall(
            "SELECT min(next_attempt_at_ms) FROM deliveries "
            "WHERE region = ? AND status = 'pending'",
            (region,),
        )
        return rows[0][0] if rows else None

    async def attempts_of(self, delivery_id: str) -> list[Attempt]:
        rows = await self.rdb.execute_fetchall(
            f"SELECT {_ATTEMPT_COLS} FROM attempts WHERE delivery_id = ? "
            "ORDER BY at_ms, generation, n",
            (delivery_id,),
        )
        return [Attempt(*r) for r in rows]

    async def list_attempts(
        self,
        endpoint_id: str,
        succeeded: bool | None,
        since_ms: int | None,
        after: tuple[int, str, int] | None,
        limit: int,
    ) -> list[Attempt]:
        sql = f"SELECT {_ATTEMPT_COLS} FROM attempts WHERE endpoint_id = ?"
        args: list[object] = [endpoint_id]
        if succeeded is not None:
            sql += " AND error IS NULL" if succeeded else " AND error IS NOT NULL"
        if since_ms is not None:
            sql += " AND at_ms >= ?"
            args.append(since_ms)
        if after is not None:
            sql += " AND (at_ms, delivery_id, n) > (?, ?, ?)"
            args.extend(after)
        sql += " ORDER BY at_ms, delivery_id, n LIMIT ?"
        args.append(limit)
        return [Attempt(*r) for r in await self.rdb.execute_fetchall(sql, args)]

    async def purge_attempts(self, before_ms: int, limit: int) -> int:
        async with self._write:
            return await self._run(
                self._in_transaction,
                "DELETE FROM attempts WHERE rowid IN "
                "(SELECT rowid FROM attempts WHERE at_ms < ? LIMIT ?)",
                [(before_ms, limit)],
            )

    async def list_audit(
        self,
        tenant: str | None,
        since_ms: int | None,
        before: tuple[int, int, str, int] | None,
        limit: int,
    ) -> list[AuditEntry]:
        sql = f"SELECT {_AUDIT_COLS} FROM audit WHERE 1"
        args: list[object] = []
        if tenant is not None:
            sql += " AND tenant = ?"
            args.append(tenant)
        if since_ms is not None:
            sql += " AND hlc_wall >= ?"
            args.append(since_ms)
        if before is not None:
            sql += " AND (hlc_wall, hlc_logical, origin, seq) < (?, ?, ?, ?)"
            args.extend(before)
        sql += " ORDER BY hlc_wall DESC, hlc_logical DESC, origin DESC, seq DESC LIMIT ?"
        args.append(limit)
        return [AuditEntry(*r) for r in await self.rdb.execute_fetchall(sql, args)]

    async def pending_count(self, region: str) -> int:
        return (await self.counts(region))["deliveries_pending"]

    async def pending_by_tenant(self, region: str) -> dict[str, int]:
        rows = await self.rdb.execute_fetchall(
            "SELECT tenant, count(*) FROM deliveries WHERE region = ? AND status = 'pending' "
            "GROUP BY tenant",
            (region,),
        )
        return {t: n for t, n in rows}

    async def counts(self, region: str) -> dict[str, int]:
        out = {"events": 0, "events_accepted": 0}
        out.update((f"deliveries_{s.value}", 0) for s in DeliveryStatus)
        for kind, r, status, n in await self.rdb.execute_fetchall(
            "SELECT kind, region, status, n FROM row_counts"
        ):  # a few rows: kinds x regions x statuses
            if kind == "event":
                out["events"] += n
                if r == region:
                    out["events_accepted"] += n
            elif r == region:
                out[f"deliveries_{status}"] = n
        return out
