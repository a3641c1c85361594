"""SQLite Store (the embedded default): one file per node, WAL, fsync'd commits.

Every WriteBatch is one transaction with ``synchronous=FULL`` (one statement: an INSERT
into the ``commit_in`` view, adapters/sqlite_commit.py), so a batch that ``commit`` returned
from survives a crash or power loss (SQLite docs, "WAL mode" and "PRAGMA synchronous").
Writes go through one connection, serialized by a lock; reads use two other connections
(the second for the outcome recorder's reads by id), so they never see a transaction that
has not committed (WAL readers see the last committed snapshot) and never queue behind a
commit. Hot multi-row reads come back as one JSON row (``_json_rows``).
WAL checkpoints run on a thread of their own (adapters/sqlite_checkpoint.py), so a commit
seldom waits for one; the writer's own, every ``WRITER_CHECKPOINT_PAGES``, lets the WAL start over.

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
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
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
from .log_cut import body_of, records_sql
from .retention_sql import SqlitePurge
from .secretbox import KEY_CHECK, MAGIC, AtRest, NodeKeys
from .sql_queries import DELIVERY_COLS, SQLITE, Queries, counts_of, delivery_of, prefixed
from .sqlite_checkpoint import WalCheckpointer
from .sqlite_commit import COMMIT_IN, COMMIT_TRIGGER, commit_args, forget_origins
from .sqlite_schema import immediate, upgrade

__all__ = ["SqliteStore"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# bytes per page of a new store: a 4 KiB page holds one ~2 KB event and wastes the rest
# (measured by bench/restart.py: 4.4x the payload on disk); 8 KiB pages hold three
PAGE_SIZE = 8192
VACUUM_PAGES = 2048  # pages (16 MiB) given back per log truncation at most
TRUNCATE_CHUNK = 500  # log records deleted per transaction (a few ms here)
VACUUM_CHUNK = 256  # pages given back per transaction (the write lock is let go between)
# WAL pages after which the writer checkpoints after its commit (wal_autocheckpoint). The
# WAL starts over only at a commit that finds every frame copied, which a pass on the
# other thread never leaves behind while commits come back to back; the writer's pass then
# copies what the last pass missed, and it is the backstop if that thread fails.
WRITER_CHECKPOINT_PAGES = 2048
# bytes the WAL file is cut back to when it starts over (PRAGMA journal_size_limit): it is
# reused, not shrunk, otherwise, and would keep the size of its longest run on disk
WAL_SIZE_LIMIT = 4 * 1024 * 1024

Q = Queries(SQLITE)
_RECORDS_AFTER = records_sql("?")
_D_COLS = prefixed(DELIVERY_COLS, "d")
_EVENT_JSON_COLS = "id, tenant, event_type, hex(payload), region, received_at_ms, owner_gen"


def _event_of_json(r: Sequence[Any]) -> Event:
    """An Event from a ``_EVENT_JSON_COLS`` row (its payload in hex)."""
    return Event(r[0], r[1], r[2], bytes.fromhex(r[3]), r[4], r[5], r[6])


class SqliteStore(SqlitePurge):
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
        self.checkpointer = WalCheckpointer(self.path)  # their own connection and thread
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
        await self.checkpointer.open()
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
            info = StoreInfo(region, int(rows["incarnation"]), False, int(rows.get("born", 0)))
        else:
            n = str(new_incarnation)  # ``born``: when it started empty (pruning's held)
            meta = [("region", region), ("incarnation", n), ("born", n)]
            await self._run(self._in_transaction, "INSERT INTO meta VALUES (?, ?)", meta)
            info = StoreInfo(region, new_incarnation, fresh=True, born_ms=new_incarnation)
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
        upgrade(db)  # adapters/sqlite_schema.py
        db.executescript(COMMIT_TRIGGER)
        self._db = db
        if self.keys is not None:
            self._seal_plaintext_rows()

    def _seal_plaintext_rows(self) -> None:
        """Seal secret rows written before encryption (or without a key ring); the freed
        pages are zeroed (secure_delete), the file rebuilt (VACUUM) and the WAL emptied."""
        db, seal = self.db, self.at_rest
        secrets = "SELECT key, state FROM registry WHERE key LIKE '%/secret%'"  # is_secret_key
        regs = [
            (sealed, key)
            for key, state in db.execute(secrets)
            if (sealed := seal.seal_state(key, state)) != state
        ]
        logs = [
            (sealed, origin, seq)
            # a body cut from its event (event_at) may hold no secret (sqlite_commit.log_rows)
            for origin, seq, body in db.execute(
                "SELECT origin, seq, body FROM log WHERE event_at IS NULL"
            )
            if (sealed := seal.seal_body(origin, seq, body)) != body
        ]
        if not regs and not logs:
            return
        log.warning("sealing %d registry rows and %d log records", len(regs), len(logs))
        db.execute("PRAGMA secure_delete=ON")
        with immediate(db):
            db.executemany("UPDATE registry SET state = ? WHERE key = ?", regs)
            db.executemany("UPDATE log SET body = ? WHERE origin = ? AND seq = ?", logs)
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("PRAGMA secure_delete=OFF")

    def _in_transaction(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        with immediate(self.db):
            return self.db.executemany(sql, rows).rowcount

    async def renew_incarnation(self, incarnation: int) -> None:
        await self._run(
            self._in_transaction,
            "UPDATE meta SET value = ? WHERE key = 'incarnation'",
            [(str(incarnation),)],
        )

    async def close(self) -> None:
        for reader in (self._rdb, self._sdb):
            if reader is not None:
                await reader.close()
        await self.checkpointer.close()  # before the writer: its close checkpoints last
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
            self.checkpointer.after_commit(written)

    def _commit(self, batch: WriteBatch) -> int:
        """Write ``batch`` in one transaction; the bytes handed to SQLite (blobs and JSON)."""
        args = commit_args(batch, self.at_rest)
        if args is None:
            return 0
        self.db.execute(COMMIT_IN, args[0])
        return args[1]

    async def load_registry(self) -> dict[str, bytes]:
        rows = await self.rdb.execute_fetchall(Q.registry)
        return {k: self.at_rest.open_state(k, v) for k, v in rows}

    async def load_version_vector(self) -> dict[str, int]:
        return dict(await self.rdb.execute_fetchall(Q.version_vector))

    async def load_usage_carry(self) -> dict[tuple[str, str], int]:
        rows = await self.rdb.execute_fetchall(Q.usage_carry)
        return {(t, c): n for t, c, n in rows if n}

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

    forget_origins = forget_origins  # sqlite_commit.forget_origins: Store.forget_origins

    def _truncate_chunk(self, origin: str, upto: int) -> tuple[int, bool]:
        """Delete up to ``TRUNCATE_CHUNK`` of ``origin``'s oldest records with seq <=
        ``upto`` in one transaction; (deleted, whether none is left up to ``upto``)."""
        db = self.db
        with immediate(db):
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
        return dict(await self.rdb.execute_fetchall(Q.log_floor))

    async def list_event_ids(self, after: str = "", limit: int | None = None) -> list[str]:
        return [r[0] for r in await self.rdb.execute_fetchall(*Q.event_ids(after, limit))]

    async def load_deliveries(self, after: str = "", limit: int | None = None) -> list[Delivery]:
        rows = await self.rdb.execute_fetchall(*Q.deliveries_after(after, limit))
        return [delivery_of(r) for r in rows]

    async def get_event(self, event_id: str) -> Event | None:
        rows = await self.rdb.execute_fetchall(*Q.event(event_id))
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
        is the commit's, adapters/sqlite_commit.py; rows in no particular order). Values
        come back as JSON scalars: read a BLOB column through ``hex()``."""
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
            cond, args = SQLITE.is_in("id", unique[i : i + 500])
            rows += await self._json_rows(cols, f"FROM {table} WHERE {cond}", args, reader)
        return rows

    async def get_events(self, event_ids: Sequence[str]) -> dict[str, Event]:
        rows = await self._by_ids(_EVENT_JSON_COLS, "events", event_ids)
        return {r[0]: _event_of_json(r) for r in rows}

    async def get_deliveries(self, delivery_ids: Sequence[str]) -> dict[str, Delivery]:
        rows = await self._by_ids(DELIVERY_COLS, "deliveries", delivery_ids, self._sdb)
        return {r[0]: delivery_of(r) for r in rows}

    async def load_idempotency(
        self, after: tuple[str, str] | None = None, limit: int | None = None
    ) -> list[tuple[str, str, str, str, int, str]]:
        rows = await self.rdb.execute_fetchall(*Q.idempotency_after(after, limit))
        return [tuple(r) for r in rows]  # type: ignore[misc]

    async def get_idempotency(
        self, tenant: str, key: str
    ) -> tuple[str, str, str, str, int, str] | None:
        rows = await self.rdb.execute_fetchall(*Q.idempotency(tenant, key))
        return tuple(rows[0]) if rows else None  # type: ignore[return-value]

    async def idempotency_of_events(
        self, event_ids: Sequence[str]
    ) -> list[tuple[str, str, str, str, int, str]]:
        out: list[tuple[str, str, str, str, int, str]] = []
        for i in range(0, len(event_ids), 500):  # within SQLite's bound on parameters
            rows = await self.rdb.execute_fetchall(*Q.idempotency_of_events(event_ids[i : i + 500]))
            out.extend(tuple(r) for r in rows)  # type: ignore[misc]
        return sorted(out)

    async def purge_idempotency(self, before_ms: int, limit: int) -> int:
        sql, args = Q.purge("idempotency", "created_at_ms", before_ms, limit)
        async with self._write:
            return await self._run(self._in_transaction, sql, [args])

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        rows = await self.rdb.execute_fetchall(*Q.delivery(delivery_id))
        return delivery_of(rows[0]) if rows else None

    async def deliveries_of_event(self, event_id: str) -> list[Delivery]:
        rows = await self.rdb.execute_fetchall(*Q.deliveries_of_event(event_id))
        return [delivery_of(r) for r in rows]

    async def list_deliveries(
        self,
        endpoint_id: str,
        status: DeliveryStatus | None,
        since_ms: int | None,
        after_id: str | None,
        limit: int,
    ) -> list[Delivery]:
        sql, args = Q.endpoint_deliveries(endpoint_id, status, since_ms, after_id, limit)
        rows = await self._json_rows(DELIVERY_COLS, f"FROM ({sql})", args)
        return sorted((delivery_of(r) for r in rows), key=lambda d: d.id)

    async def list_events(
        self, q: EventQuery, before: tuple[int, str] | None, limit: int
    ) -> list[Event]:
        return [
            Event(*r) for r in await self.rdb.execute_fetchall(*Q.tenant_events(q, before, limit))
        ]

    async def list_tenant_deliveries(
        self, q: DeliveryQuery, before: tuple[int, str] | None, limit: int
    ) -> list[Delivery]:
        rows = await self.rdb.execute_fetchall(*Q.tenant_deliveries(q, before, limit))
        return [delivery_of(r) for r in rows]

    async def deliveries_of_events(self, event_ids: Sequence[str]) -> list[Delivery]:
        if not event_ids:
            return []
        rows = await self.rdb.execute_fetchall(*Q.deliveries_of_events(event_ids))
        return [delivery_of(r) for r in rows]

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
            f"{DELIVERY_COLS}, rank",
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
        return [delivery_of(r) for r in rows]

    async def next_due_ms(self, region: str) -> int | None:
        rows = await self.rdb.execute_fetchall(*Q.next_due_ms(region))
        return rows[0][0] if rows else None

    async def attempts_of(self, delivery_id: str) -> list[Attempt]:
        return [Attempt(*r) for r in await self.rdb.execute_fetchall(*Q.attempts_of(delivery_id))]

    async def list_attempts(
        self,
        endpoint_id: str,
        succeeded: bool | None,
        since_ms: int | None,
        after: tuple[int, str, int] | None,
        limit: int,
        descending: bool = False,
    ) -> list[Attempt]:
        sql, args = Q.endpoint_attempts(endpoint_id, succeeded, since_ms, after, limit, descending)
        return [Attempt(*r) for r in await self.rdb.execute_fetchall(sql, args)]

    async def purge_attempts(self, before_ms: int, limit: int) -> int:
        sql, args = Q.purge("attempts", "at_ms", before_ms, limit)
        async with self._write:
            return await self._run(self._in_transaction, sql, [args])

    async def list_audit(
        self,
        tenant: str | None,
        since_ms: int | None,
        before: tuple[int, int, str, int] | None,
        limit: int,
    ) -> list[AuditEntry]:
        sql, args = Q.audit(tenant, since_ms, before, limit)
        return [AuditEntry(*r) for r in await self.rdb.execute_fetchall(sql, args)]

    async def pending_count(self, region: str) -> int:
        return (await self.counts(region))["deliveries_pending"]

    async def pending_by_tenant(self, region: str) -> dict[str, int]:
        return {t: n for t, n in await self.rdb.execute_fetchall(*Q.pending_by_tenant(region))}

    async def counts(self, region: str) -> dict[str, int]:
        rows = await self.rdb.execute_fetchall("SELECT kind, region, status, n FROM row_counts")
        return counts_of(rows, region)
