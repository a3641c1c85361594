"""PostgreSQL Store (``store = "postgresql://..."`` in node.toml): for a region that
outgrows one SQLite file (issue 16).

Same contract as SqliteStore (tests/store runs one suite on memory, SQLite and this).
Connections come from a psycopg 3 async pool (``psycopg_pool.AsyncConnectionPool``);
every connection runs with ``synchronous_commit = on``, whatever the server default, so
``commit`` returns only after the WAL record of its transaction is flushed (PostgreSQL
docs, "synchronous_commit"): a publish acknowledged after ``commit`` survives a crash of
the server, as with SQLite's ``synchronous=FULL``. Each ``commit`` is one transaction
(all of a WriteBatch or nothing); rows are written in key order so concurrent
transactions of several processes lock them in one order (no deadlock between upserts).

Signing secrets are sealed at rest as in SqliteStore when the store has a key ring
(``keys``; the node passes the same one, adapters/secretbox.py ``AtRest``): registry rows
holding a secret and log records that may carry one are encrypted as they are written and
opened as they are read. Rows written before encryption are sealed at ``open``; their old
row versions stay in the table files until PostgreSQL reuses the space (``VACUUM FULL
registry, log`` rewrites both tables at once) and in WAL segments until they are recycled.

The schema is versioned (adapters/postgres_schema.py) and migrated at ``open``. One
database holds one region (the ``meta`` row); ``open`` on another region's database
raises ValueError.

Several node processes may share one database (issue 16; the runtime's part is
runtime/cohort.py): each allocates a CRDT actor of its own (``allocate_actor``), claims
due deliveries with a lease (``claim_due``), and registry rows are merged, not
overwritten, on commit (a process's in-memory state may lack another's latest change
for a moment: the row keeps the join of both). postgres_cluster.PostgresCoordinator
holds the rest (the replication role's advisory lock, LISTEN/NOTIFY).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from crdt import DecodeError as CrdtDecodeError
from crdt import decode as crdt_decode

from ..core.model import (
    _RANK,
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
from ..runtime.ports import StoreInfo
from .log_cut import CUT_MIN_BYTES, body_of, find_cuts, records_sql
from .postgres_cluster import REGISTRY_CHANNEL
from .postgres_schema import SCHEMA_LOCK, migrate
from .secretbox import KEY_CHECK, MAGIC, AtRest, NodeKeys
from .sqlite_store import _ATTEMPT_COLS, _AUDIT_COLS, _DELIVERY_COLS, _EVENT_COLS, _delivery

__all__ = ["PostgresStore"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_RECORD_COLS = "origin, seq, kind, body, hlc_wall, hlc_logical"
_RECORDS_OF = records_sql("%s")
_CHANGED = (
    "(excluded.status, excluded.attempts, excluded.next_attempt_at_ms, excluded.generation) "
    "IS DISTINCT FROM (deliveries.status, deliveries.attempts, deliveries.next_attempt_at_ms, "
    "deliveries.generation)"
)


def _join_key(table: str) -> str:
    """core.model._join_key of a row of ``table`` as an SQL row value."""
    rank = " ".join(f"WHEN '{st.value}' THEN {r}" for st, r in _RANK.items())
    t = table
    return (
        f"({t}.generation, CASE {t}.status {rank} END, {t}.status, {t}.attempts, "
        f"{t}.updated_at_ms, coalesce({t}.next_attempt_at_ms, -1), {t}.region, "
        f"{t}.created_at_ms, {t}.event_id, {t}.endpoint_id, {t}.tenant, {t}.id)"
    )


# pg_advisory_xact_lock key of the row-count fold (any constant; "rsyncfld" in ASCII)
_FOLD_LOCK = 0x7273796E63666C64
# move the row counts of slots (backends, migration 8) no transaction holds into slot 0
_FOLD_ROW_COUNTS = (
    "WITH moved AS (DELETE FROM row_counts WHERE ctid = ANY(ARRAY("
    "SELECT ctid FROM row_counts WHERE slot <> 0 FOR UPDATE SKIP LOCKED)) "
    "RETURNING kind, region, status, n) "
    "INSERT INTO row_counts(kind, region, status, slot, n) "
    "SELECT kind, region, status, 0, sum(n) FROM moved GROUP BY kind, region, status "
    "ON CONFLICT (kind, region, status, slot) DO UPDATE SET n = row_counts.n + excluded.n"
)
_D_COLS = ", ".join(f"d.{c}" for c in _DELIVERY_COLS.split(", "))


async def _merge_registry(
    cur: psycopg.AsyncCursor[Any], states: dict[str, bytes], at_rest: AtRest
) -> None:
    """Write registry ``states`` (key -> encoded CRDT, plaintext; sealed by ``at_rest`` as
    written) as the join with the stored rows:
    several processes write one database, and one's in-memory state may not yet hold
    another's last change to a key, so a plain overwrite could lose that change. Rows are
    inserted if absent, then locked in key order (no deadlock between processes) and
    replaced by the merge where it differs; ``states`` is set to what is stored. Bytes
    that do not decode as CRDTs (tests' placeholders) are written as given, as before."""
    items = sorted(states.items())
    await cur.executemany(
        "INSERT INTO registry(key, state) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
        [(k, at_rest.seal_state(k, v)) for k, v in items],
    )
    await cur.execute(
        "SELECT key, state FROM registry WHERE key = ANY(%s) ORDER BY key FOR UPDATE",
        ([k for k, _ in items],),
    )
    stored = {k: at_rest.open_state(k, bytes(v)) for k, v in await cur.fetchall()}
    updates: list[tuple[bytes, str]] = []
    for key, new in items:
        old = stored.get(key)
        if old is None or old == new:
            continue
        try:
            merged = crdt_decode(old).merge(crdt_decode(new)).to_bytes()
        except (CrdtDecodeError, TypeError, ValueError, AttributeError):
            merged = new
        if merged != old:
            updates.append((at_rest.seal_state(key, merged), key))
        if merged != new:
            states[key] = merged  # the batch says what is stored (its commit observers)
    if updates:
        await cur.executemany("UPDATE registry SET state = %s WHERE key = %s", updates)


async def _configure(conn: psycopg.AsyncConnection) -> None:
    # durability does not depend on the server's (or a role's) default
    await conn.execute("SET synchronous_commit = on")


class PostgresStore:
    """Store over the PostgreSQL database at ``url`` (a libpq URL or conninfo string);
    ``pool_max`` connections at most (reads and commits share them). With ``keys``,
    signing secrets are encrypted at rest (module docstring); reading a sealed row without
    the key it names raises ``secretbox.SealedKeyError``, without any ring ValueError."""

    def __init__(
        self, url: str, pool_min: int = 1, pool_max: int = 10, keys: NodeKeys | None = None
    ):
        self.url = url
        self.keys = keys
        self.at_rest = AtRest(keys, "postgresql")
        self._pool_min, self._pool_max = pool_min, pool_max
        self._pool_obj: AsyncConnectionPool | None = None
        self._open_timeout_s = 30.0  # open fails if no connection is made within this

    @property
    def pool(self) -> AsyncConnectionPool:
        """The connection pool (RuntimeError before ``open``)."""
        if self._pool_obj is None:
            raise RuntimeError("store is not open")
        return self._pool_obj

    async def _once_more(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``fn(*args)``, run once more after a connection error (a server restart or
        failover leaves stale pooled connections; the pool drops a broken one), a deadlock
        or a serialization failure (all ``psycopg.OperationalError``); the retry first
        checks the idle connections, so it does not meet another stale one. Safe because every
        write here is idempotent (upserts, insert-or-ignore, ``greatest``, conditional
        deletes), so a transaction whose outcome a lost connection hid may run again."""
        try:
            return await fn(*args)
        except psycopg.OperationalError as exc:
            log.warning("database error (%s); retrying once", exc)
            await self.pool.check()  # drops the other broken idle connections too
            return await fn(*args)

    async def _fetch(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await self._once_more(self._fetch_once, sql, args)

    async def _fetch_once(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, args)  # type: ignore[arg-type]
            return await cur.fetchall()

    async def _write(self, sql: str, args: Sequence[Any] = ()) -> int:
        return await self._once_more(self._write_once, sql, args)

    async def _write_once(self, sql: str, args: Sequence[Any]) -> int:
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(sql, args)  # type: ignore[arg-type]
            return cur.rowcount

    async def _fold_counts(self) -> None:
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (_FOLD_LOCK,))
            row = await cur.fetchone()
            if row and row[0]:  # else another process folds right now
                await conn.execute(_FOLD_ROW_COUNTS)

    async def open(self, region: str, new_incarnation: int) -> StoreInfo:
        pool = AsyncConnectionPool(
            self.url,
            min_size=self._pool_min,
            max_size=self._pool_max,
            kwargs={"autocommit": True},
            configure=_configure,
            open=False,
        )
        try:
            await pool.open(wait=True, timeout=self._open_timeout_s)  # else PoolTimeout
        except BaseException:
            await pool.close()
            raise
        self._pool_obj = pool
        try:
            async with pool.connection() as conn:
                await migrate(conn)
                async with conn.transaction():
                    # several processes may open a fresh database at once: one inserts
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                    cur = await conn.execute(
                        "INSERT INTO meta(key, value) VALUES ('region', %s), "
                        "('incarnation', %s) ON CONFLICT (key) DO NOTHING",
                        (region, str(new_incarnation)),
                    )
                    fresh = cur.rowcount == 2
                    cur = await conn.execute("SELECT key, value FROM meta")
                    rows = dict(await cur.fetchall())
                    if rows["region"] == region:
                        if self.keys is not None:
                            await self._seal_plaintext_rows(conn)
                        await self._agree_on_keys(conn, region, rows.get(KEY_CHECK))
        except BaseException:
            await self.close()
            raise
        if rows["region"] != region:
            await self.close()
            raise ValueError(f"database belongs to region {rows['region']!r}, not {region!r}")
        return StoreInfo(region, int(rows["incarnation"]), fresh=fresh)

    async def _agree_on_keys(
        self, conn: psycopg.AsyncConnection, region: str, stored: str | None
    ) -> None:
        """Check this ring against the region's key check (``AtRest.agree``; CannotStart
        if it cannot open it) and store the check it returns, inside ``open``'s
        transaction (under the schema lock: processes starting at once agree in turn)."""
        sealed: list[tuple[str, bytes]] = []
        if stored is None and self.keys is not None:
            cur = await conn.execute(
                "SELECT key, state FROM registry WHERE substring(state FROM 1 FOR 4) = %s",
                (MAGIC,),
            )
            sealed = [(k, bytes(v)) for k, v in await cur.fetchall()]
        check = self.at_rest.agree(region, stored, sealed)
        if check is not None:
            await conn.execute(
                "INSERT INTO meta(key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (KEY_CHECK, check),
            )

    async def _seal_plaintext_rows(self, conn: psycopg.AsyncConnection) -> None:
        """Seal the secret rows written before encryption (or without a key ring), inside
        ``open``'s transaction (which holds the schema lock: one process does it)."""
        seal = self.at_rest
        cur = await conn.execute("SELECT key, state FROM registry ORDER BY key")
        regs = [
            (sealed, key)
            for key, state in await cur.fetchall()
            if (sealed := seal.seal_state(key, bytes(state))) != bytes(state)
        ]
        cur = await conn.execute(
            # a body cut from its event (event_at) holds no secret (adapters.log_cut)
            "SELECT origin, seq, body FROM log WHERE event_at IS NULL "
            "AND position('/secret'::bytea IN body) > 0 ORDER BY origin, seq"
        )
        logs = [
            (sealed, origin, seq)
            for origin, seq, body in await cur.fetchall()
            if (sealed := seal.seal_body(origin, seq, bytes(body))) != bytes(body)
        ]
        if not regs and not logs:
            return
        log.warning("sealing %d registry rows and %d log records", len(regs), len(logs))
        async with conn.cursor() as c:
            await c.executemany("UPDATE registry SET state = %s WHERE key = %s", regs)
            await c.executemany("UPDATE log SET body = %s WHERE origin = %s AND seq = %s", logs)

    async def allocate_actor(self, wall_ms: int, holder: str) -> int:
        """A new incarnation for one node process on this database (its actor is
        ``region:<incarnation>``): greater than every incarnation used before on it (the
        ``meta`` one of a single-process node and every earlier allocation), at least
        ``wall_ms``; recorded in ``actors`` with ``holder`` (the process, for operators).
        Concurrent callers get distinct values (an advisory transaction lock)."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            cur = await conn.execute(
                "SELECT greatest(%s, (SELECT coalesce(max(incarnation), 0) FROM actors) + 1, "
                "(SELECT value::bigint FROM meta WHERE key = 'incarnation') + 1)",
                (wall_ms,),
            )
            row = await cur.fetchone()
            incarnation = int(row[0]) if row else wall_ms
            await conn.execute(
                "INSERT INTO actors(incarnation, holder, started_at_ms) VALUES (%s, %s, %s)",
                (incarnation, holder, wall_ms),
            )
        return incarnation

    async def records_of(self, after: Mapping[str, int], limit: int) -> list[Record]:
        """Log records of the origins in ``after`` with ``seq > after[origin]``, in seq
        order per origin, at most ``limit`` in all (other origins are not read)."""
        out: list[Record] = []
        for origin, seq in sorted(after.items()):
            if len(out) >= limit:
                break
            rows = await self._fetch(_RECORDS_OF, (origin, seq, limit - len(out)))
            # a cut record whose events row is gone raises psycopg.DataError
            out.extend(
                Record(r[0], r[1], r[2], body_of(r, self.at_rest, psycopg.DataError), (r[4], r[5]))
                for r in rows
            )
        return out

    async def renew_incarnation(self, incarnation: int) -> None:
        await self._write(
            "UPDATE meta SET value = %s WHERE key = 'incarnation'", (str(incarnation),)
        )

    async def close(self) -> None:
        if self._pool_obj is not None:
            pool, self._pool_obj = self._pool_obj, None
            await pool.close()

    async def commit(self, batch: WriteBatch) -> None:
        # shielded: a cancelled caller must not cut a transaction short
        await asyncio.shield(self._once_more(self._commit, batch))

    def _log_rows(self, b: WriteBatch, inserted: set[str]) -> list[tuple[Any, ...]]:
        """``b``'s log rows: an event record cut for an events row of ``inserted`` (the
        first event of each id in ``b``, ``CUT_MIN_BYTES`` or longer) goes without its
        payload, with that event's id and the byte offset (adapters.log_cut); any other
        goes whole, sealed if it may hold a secret."""
        events: list[Event] = []
        for e in b.events:
            if e.id in inserted:
                inserted.discard(e.id)  # later events of the id were not inserted
                if len(e.payload) >= CUT_MIN_BYTES:
                    events.append(e)
        rows: list[tuple[Any, ...]] = []
        cuts = find_cuts(b.records, [e.payload for e in events])
        for r, found in zip(b.records, cuts, strict=True):
            if found is None:
                body = self.at_rest.seal_body(r.origin, r.seq, r.body)
                rows.append((r.origin, r.seq, r.kind, body, *r.hlc, None, None))
            else:
                i, cut, rest = found
                rows.append((r.origin, r.seq, r.kind, rest, *r.hlc, events[i].id, cut))
        return rows

    async def _commit(self, b: WriteBatch) -> None:
        async with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            if b.registry:
                await _merge_registry(cur, b.registry, self.at_rest)
            inserted: set[str] = set()  # ids of the events rows this commit inserts
            if b.events:
                await cur.executemany(
                    f"INSERT INTO events({_EVENT_COLS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING RETURNING id",
                    [
                        (e.id, e.tenant, e.event_type, e.payload, e.region, e.received_at_ms,
                         e.owner_gen)
                        for e in sorted(b.events, key=lambda e: e.id)  # stable: first kept
                    ],
                    returning=True,
                )  # fmt: skip
                while True:
                    inserted.update(r[0] for r in await cur.fetchall())
                    if not cur.nextset():
                        break
            if b.records:
                await cur.executemany(
                    f"INSERT INTO log({_RECORD_COLS}, event_id, event_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    self._log_rows(b, inserted),
                )
            if b.version_vector:
                await cur.executemany(
                    "INSERT INTO version_vector(origin, seq) VALUES (%s, %s) ON CONFLICT "
                    "(origin) DO UPDATE SET seq = greatest(version_vector.seq, excluded.seq)",
                    sorted(b.version_vector.items()),
                )
            if b.deliveries:
                last = {d.id: d for d in b.deliveries}  # a later one of an id wins, as in SQLite
                await cur.executemany(
                    f"INSERT INTO deliveries({_DELIVERY_COLS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (id) DO UPDATE SET event_id = excluded.event_id, "
                    "endpoint_id = excluded.endpoint_id, tenant = excluded.tenant, "
                    "status = excluded.status, attempts = excluded.attempts, "
                    "next_attempt_at_ms = excluded.next_attempt_at_ms, "
                    "region = excluded.region, created_at_ms = excluded.created_at_ms, "
                    "updated_at_ms = excluded.updated_at_ms, "
                    "generation = excluded.generation, owner_gen = excluded.owner_gen, "
                    # a write that changes the delivery (an attempt's outcome) ends any
                    # claim on it; one that changes nothing (a record applied again,
                    # echoed back by a peer) leaves the claim of an attempt in flight
                    f"claimed_by = CASE WHEN {_CHANGED} THEN '' ELSE deliveries.claimed_by END, "
                    f"lease_until_ms = CASE WHEN {_CHANGED} THEN 0 "
                    "ELSE deliveries.lease_until_ms END "
                    # several processes write one row: a state read before another
                    # process recorded an outcome must not undo it (core.model
                    # delivery_join's order; every local write moves up in it)
                    f"WHERE {_join_key('excluded')} >= {_join_key('deliveries')}",
                    [
                        (d.id, d.event_id, d.endpoint_id, d.tenant, d.status.value, d.attempts,
                         d.next_attempt_at_ms, d.region, d.created_at_ms, d.updated_at_ms,
                         d.generation, d.owner_gen)
                        for _, d in sorted(last.items())
                    ],
                )  # fmt: skip
                # where another process's later state won, the batch says what is stored:
                # its commit observers (the anti-entropy tree) must see the store's rows
                await cur.execute(
                    f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE id = ANY(%s)", (list(last),)
                )
                stored = {r[0]: _delivery(r) for r in await cur.fetchall()}
                if any(stored.get(d.id, d) != d for d in b.deliveries):
                    b.deliveries[:] = [stored.get(d.id, d) for d in b.deliveries]
            if b.attempts:
                await cur.executemany(
                    f"INSERT INTO attempts({_ATTEMPT_COLS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING",
                    [
                        (a.delivery_id, a.n, a.at_ms, a.region, a.status_code, a.latency_ms,
                         a.error, a.response_excerpt, a.endpoint_id, a.generation,
                         a.response_headers, a.owner_gen, a.request_headers)
                        for a in b.attempts
                    ],
                )  # fmt: skip
            if b.audit:
                await cur.executemany(
                    f"INSERT INTO audit({_AUDIT_COLS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    [
                        (a.origin, a.seq, a.hlc_wall_ms, a.hlc_logical, a.who, a.op, a.object,
                         a.tenant, a.detail)
                        for a in b.audit
                    ],
                )  # fmt: skip
            if b.idempotency:
                # the earliest acceptance of a key wins, in every region alike
                await cur.executemany(
                    "INSERT INTO idempotency VALUES (%s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (tenant, key) DO UPDATE SET event_id = excluded.event_id, "
                    "body_sha256 = excluded.body_sha256, "
                    "created_at_ms = excluded.created_at_ms, region = excluded.region "
                    "WHERE (excluded.created_at_ms, excluded.event_id) "
                    "< (idempotency.created_at_ms, idempotency.event_id)",
                    sorted(b.idempotency),
                )
            if b.registry:
                # other processes on this database re-read the registry (delivered at
                # commit; postgres_cluster.RegistryListener)
                payload = json.dumps(b.version_vector, separators=(",", ":"))
                await cur.execute(
                    "SELECT pg_notify(%s, %s)",
                    (REGISTRY_CHANNEL, payload if len(payload) < 7900 else "{}"),
                )

    async def load_registry(self) -> dict[str, bytes]:
        rows = await self._fetch("SELECT key, state FROM registry")
        return {k: self.at_rest.open_state(k, bytes(v)) for k, v in rows}

    async def load_version_vector(self) -> dict[str, int]:
        return dict(await self._fetch("SELECT origin, seq FROM version_vector"))  # type: ignore[arg-type]

    async def records_after(self, after: Mapping[str, int], limit: int) -> list[Record]:
        # the distinct origins by a skip scan of the primary key (one probe per origin)
        origins = await self._fetch(
            "WITH RECURSIVE o(origin) AS (SELECT min(origin) FROM log UNION ALL "
            "SELECT (SELECT min(origin) FROM log WHERE origin > o.origin) FROM o "
            "WHERE o.origin IS NOT NULL) SELECT origin FROM o WHERE origin IS NOT NULL"
        )
        return await self.records_of({o: after.get(o, 0) for (o,) in origins}, limit)

    async def truncate_log(self, upto: Mapping[str, int]) -> int:
        return await self._once_more(self._truncate, dict(upto))

    async def _truncate(self, upto: dict[str, int]) -> int:
        n = 0
        async with self.pool.connection() as conn, conn.transaction():
            for origin, seq in sorted(upto.items()):
                cur = await conn.execute(
                    "DELETE FROM log WHERE origin = %s AND seq <= %s", (origin, seq)
                )
                n += cur.rowcount
                await conn.execute(
                    "INSERT INTO log_floor(origin, seq) VALUES (%s, %s) ON CONFLICT (origin) "
                    "DO UPDATE SET seq = greatest(log_floor.seq, excluded.seq)",
                    (origin, seq),
                )
        return n

    async def load_log_floor(self) -> dict[str, int]:
        return dict(await self._fetch("SELECT origin, seq FROM log_floor"))  # type: ignore[arg-type]

    async def list_event_ids(self, after: str = "", limit: int | None = None) -> list[str]:
        rows = await self._fetch(
            "SELECT id FROM events WHERE id > %s ORDER BY id LIMIT %s", (after, limit)
        )
        return [r[0] for r in rows]

    async def load_deliveries(self, after: str = "", limit: int | None = None) -> list[Delivery]:
        rows = await self._fetch(
            f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE id > %s ORDER BY id LIMIT %s",
            (after, limit),
        )
        return [_delivery(r) for r in rows]

    async def get_event(self, event_id: str) -> Event | None:
        rows = await self._fetch(f"SELECT {_EVENT_COLS} FROM events WHERE id = %s", (event_id,))
        return Event(*rows[0]) if rows else None

    async def get_events(self, event_ids: Sequence[str]) -> dict[str, Event]:
        rows = await self._fetch(
            f"SELECT {_EVENT_COLS} FROM events WHERE id = ANY(%s)", (list(set(event_ids)),)
        )
        return {r[0]: Event(*r) for r in rows}

    async def get_deliveries(self, delivery_ids: Sequence[str]) -> dict[str, Delivery]:
        rows = await self._fetch(
            f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE id = ANY(%s)",
            (list(set(delivery_ids)),),
        )
        return {r[0]: _delivery(r) for r in rows}

    async def list_audit(
        self,
        tenant: str | None,
        since_ms: int | None,
        before: tuple[int, int, str, int] | None,
        limit: int,
    ) -> list[AuditEntry]:
        sql = f"SELECT {_AUDIT_COLS} FROM audit WHERE true"
        args: list[object] = []
        if tenant is not None:
            sql += " AND tenant = %s"
            args.append(tenant)
        if since_ms is not None:
            sql += " AND hlc_wall >= %s"
            args.append(since_ms)
        if before is not None:
            sql += " AND (hlc_wall, hlc_logical, origin, seq) < (%s, %s, %s, %s)"
            args.extend(before)
        sql += " ORDER BY hlc_wall DESC, hlc_logical DESC, origin DESC, seq DESC LIMIT %s"
        args.append(limit)
        return [AuditEntry(*r) for r in await self._fetch(sql, args)]

    async def load_idempotency(
        self, after: tuple[str, str] | None = None, limit: int | None = None
    ) -> list[tuple[str, str, str, str, int, str]]:
        tenant, key = after or ("", "")
        rows = await self._fetch(
            "SELECT tenant, key, event_id, body_sha256, created_at_ms, region FROM idempotency"
            " WHERE (tenant, key) > (%s, %s) ORDER BY tenant, key LIMIT %s",
            (tenant, key, limit),
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]

    async def get_idempotency(
        self, tenant: str, key: str
    ) -> tuple[str, str, str, str, int, str] | None:
        rows = await self._fetch(
            "SELECT tenant, key, event_id, body_sha256, created_at_ms, region FROM idempotency "
            "WHERE tenant = %s AND key = %s",
            (tenant, key),
        )
        return tuple(rows[0]) if rows else None  # type: ignore[return-value]

    async def idempotency_of_events(
        self, event_ids: Sequence[str]
    ) -> list[tuple[str, str, str, str, int, str]]:
        rows = await self._fetch(
            "SELECT tenant, key, event_id, body_sha256, created_at_ms, region FROM idempotency "
            "WHERE event_id = ANY(%s) ORDER BY tenant, key",
            (list(event_ids),),
        )
        return sorted(tuple(r) for r in rows)  # type: ignore[misc]

    async def purge_idempotency(self, before_ms: int, limit: int) -> int:
        return await self._write(
            "DELETE FROM idempotency WHERE ctid = ANY(ARRAY("
            "SELECT ctid FROM idempotency WHERE created_at_ms < %s LIMIT %s))",
            (before_ms, limit),
        )

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        rows = await self._fetch(
            f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE id = %s", (delivery_id,)
        )
        return _delivery(rows[0]) if rows else None

    async def deliveries_of_event(self, event_id: str) -> list[Delivery]:
        rows = await self._fetch(
            f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE event_id = %s ORDER BY id",
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
        sql = f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE endpoint_id = %s"
        args: list[object] = [endpoint_id]
        if status is not None:
            sql += " AND status = %s"
            args.append(status.value)
        if since_ms is not None:
            sql += " AND created_at_ms >= %s"
            args.append(since_ms)
        if after_id is not None:
            sql += " AND id > %s"
            args.append(after_id)
        sql += " ORDER BY id LIMIT %s"
        args.append(limit)
        return [_delivery(r) for r in await self._fetch(sql, args)]

    async def list_events(
        self, q: EventQuery, before: tuple[int, str] | None, limit: int
    ) -> list[Event]:
        sql = f"SELECT {_EVENT_COLS} FROM events WHERE tenant = %s"
        args: list[object] = [q.tenant]
        if q.event_type is not None:
            sql += " AND event_type = %s"
            args.append(q.event_type)
        if q.type_prefix:
            # a range in the bytewise ("C") collation: "a." <= type < "a/"
            upper = q.type_prefix[:-1] + chr(ord(q.type_prefix[-1]) + 1)
            sql += " AND event_type >= %s AND event_type < %s"
            args.extend((q.type_prefix, upper))
        if q.since_ms is not None:
            sql += " AND received_at_ms >= %s"
            args.append(q.since_ms)
        if q.until_ms is not None:
            sql += " AND received_at_ms < %s"
            args.append(q.until_ms)
        if q.endpoint_id is not None or q.status is not None:
            sql += " AND EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id"
            if q.endpoint_id is not None:
                sql += " AND d.endpoint_id = %s"
                args.append(q.endpoint_id)
            if q.status is not None:
                sql += " AND d.status = %s"
                args.append(q.status.value)
            sql += ")"
        if before is not None:
            sql += " AND (received_at_ms, id) < (%s, %s)"
            args.extend(before)
        sql += " ORDER BY received_at_ms DESC, id DESC LIMIT %s"
        args.append(limit)
        return [Event(*r) for r in await self._fetch(sql, args)]

    async def list_tenant_deliveries(
        self, q: DeliveryQuery, before: tuple[int, str] | None, limit: int
    ) -> list[Delivery]:
        sql = f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE tenant = %s"
        args: list[object] = [q.tenant]
        if q.endpoint_id is not None:
            sql += " AND endpoint_id = %s"
            args.append(q.endpoint_id)
        if q.status is not None:
            sql += " AND status = %s"
            args.append(q.status.value)
        if q.since_ms is not None:
            sql += " AND created_at_ms >= %s"
            args.append(q.since_ms)
        if before is not None:
            sql += " AND (created_at_ms, id) < (%s, %s)"
            args.extend(before)
        sql += " ORDER BY created_at_ms DESC, id DESC LIMIT %s"
        args.append(limit)
        return [_delivery(r) for r in await self._fetch(sql, args)]

    async def deliveries_of_events(self, event_ids: Sequence[str]) -> list[Delivery]:
        if not event_ids:
            return []
        rows = await self._fetch(
            f"SELECT {_DELIVERY_COLS} FROM deliveries WHERE event_id = ANY(%s) ORDER BY id",
            (list(event_ids),),
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
        # per-endpoint due heads (index deliveries_due_endpoint, migration 5): the
        # endpoints with pending rows by a skip scan, then at most ``limit``
        # (``per_endpoint``) rows of each one not excluded (LATERAL), merged (round-robin
        # with ``per_endpoint``); a blocked endpoint's backlog is never read
        order = "d.next_attempt_at_ms, d.id"
        if per_endpoint is not None:
            order = f"row_number() OVER (PARTITION BY d.endpoint_id ORDER BY {order}), {order}"
        rows = await self._fetch(
            # ORDER BY ... LIMIT 1, not min(): without statistics (a table just filled)
            # the planner may aggregate min() over every pending row
            "WITH RECURSIVE e(ep) AS ("
            " (SELECT endpoint_id FROM deliveries WHERE region = %s AND status = 'pending'"
            " ORDER BY endpoint_id LIMIT 1)"
            " UNION ALL SELECT (SELECT endpoint_id FROM deliveries WHERE region = %s"
            " AND status = 'pending' AND endpoint_id > e.ep ORDER BY endpoint_id LIMIT 1)"
            " FROM e WHERE e.ep IS NOT NULL) "
            f"SELECT {_D_COLS} FROM e CROSS JOIN LATERAL ("
            f" SELECT {_DELIVERY_COLS} FROM deliveries WHERE region = %s AND status = 'pending'"
            " AND endpoint_id = e.ep AND next_attempt_at_ms <= %s AND NOT (id = ANY(%s))"
            " ORDER BY next_attempt_at_ms, id LIMIT %s) d "
            "WHERE e.ep IS NOT NULL AND NOT (e.ep = ANY(%s)) "
            f"ORDER BY {order} LIMIT %s",
            (region, region, region, now_ms, list(exclude), per_endpoint or limit,
             list(exclude_endpoints), limit),
        )  # fmt: skip
        return [_delivery(r) for r in rows]

    async def claim_due(
        self,
        region: str,
        now_ms: int,
        limit: int,
        holder: str,
        lease_ms: int,
        exclude_endpoints: Sequence[str] = (),
    ) -> list[Delivery]:
        """Claim at most ``limit`` due deliveries of ``region`` for ``holder`` (a process
        id) until ``now_ms + lease_ms``, in ``(next_attempt_at_ms, id)`` order, skipping
        endpoints in ``exclude_endpoints`` (full lanes).

        Several processes on one database never get the same delivery from concurrent
        calls (``FOR UPDATE SKIP LOCKED``: a row another claim transaction holds is
        skipped, not waited for), nor a delivery claimed by another process whose lease
        has not expired. A claim ends when the delivery is next written (``commit`` of
        its attempt's outcome) or when the lease expires: a delivery claimed by a process
        that died is claimed again ``lease_ms`` later. ``lease_ms`` must exceed the
        longest attempt (``delivery.timeout_s``) plus the clock skew between the
        processes' machines, since leases compare their wall clocks.
        """
        # the shape of due_deliveries (per-endpoint due heads, index of migration 5), so a
        # blocked endpoint's backlog is never read: candidates are the first ``2 * limit``
        # unclaimed due rows of the endpoints not excluded (read without locks); each is
        # then locked by its primary key (SKIP LOCKED: a row another claim holds is passed
        # over; twice the limit so that concurrent claims still fill their batches), with
        # status, due time and lease checked again on the locked row, and the first
        # ``limit`` of those in order are leased. Every step is by index, so a plan made
        # without statistics (a table just filled) cannot turn it into a scan.
        span = 2 * limit
        rows = await self._fetch(
            "WITH RECURSIVE e(ep) AS ("
            " (SELECT endpoint_id FROM deliveries WHERE region = %s AND status = 'pending'"
            " ORDER BY endpoint_id LIMIT 1)"
            " UNION ALL SELECT (SELECT endpoint_id FROM deliveries WHERE region = %s"
            " AND status = 'pending' AND endpoint_id > e.ep ORDER BY endpoint_id LIMIT 1)"
            " FROM e WHERE e.ep IS NOT NULL), "
            "cand AS (SELECT h.id, h.at FROM e CROSS JOIN LATERAL ("
            " SELECT id, next_attempt_at_ms AS at FROM deliveries WHERE region = %s"
            " AND status = 'pending' AND endpoint_id = e.ep AND next_attempt_at_ms <= %s"
            " AND lease_until_ms <= %s ORDER BY next_attempt_at_ms, id LIMIT %s) h"
            " WHERE e.ep IS NOT NULL AND NOT (e.ep = ANY(%s))"
            " ORDER BY h.at, h.id LIMIT %s), "
            "c AS (SELECT k.id FROM cand CROSS JOIN LATERAL ("
            " SELECT id FROM deliveries WHERE id = cand.id AND status = 'pending'"
            " AND next_attempt_at_ms <= %s AND lease_until_ms <= %s FOR UPDATE SKIP LOCKED) k"
            " ORDER BY cand.at, cand.id LIMIT %s) "
            # by the primary key: a join with c could be planned as a scan of the table
            "UPDATE deliveries d SET claimed_by = %s, lease_until_ms = %s "
            f"WHERE d.id = ANY(ARRAY(SELECT id FROM c)) RETURNING {_D_COLS}",
            (region, region, region, now_ms, now_ms, span, list(exclude_endpoints), span,
             now_ms, now_ms, limit, holder, now_ms + lease_ms),
        )  # fmt: skip
        return sorted((_delivery(r) for r in rows), key=lambda d: (d.next_attempt_at_ms, d.id))

    async def release_claims(self, holder: str, ids: Sequence[str] | None = None) -> int:
        """End the claims of ``holder``: every one (a process stopping cleanly), or those
        on ``ids`` (claimed but not attempted: a full lane); returns how many."""
        if ids is None:
            return await self._write(
                "UPDATE deliveries SET claimed_by = '', lease_until_ms = 0 WHERE claimed_by = %s",
                (holder,),
            )
        return await self._write(
            "UPDATE deliveries SET claimed_by = '', lease_until_ms = 0 "
            "WHERE claimed_by = %s AND id = ANY(%s)",
            (holder, sorted(ids)),
        )

    async def renew_claims(self, holder: str, ids: Sequence[str], until_ms: int) -> int:
        """Extend ``holder``'s claims on ``ids`` (attempts still running or not yet
        recorded) to ``until_ms``; returns how many it still held."""
        return await self._write(
            "UPDATE deliveries SET lease_until_ms = greatest(lease_until_ms, %s) "
            "WHERE claimed_by = %s AND id = ANY(%s)",
            (until_ms, holder, sorted(ids)),
        )

    async def next_due_ms(self, region: str) -> int | None:
        rows = await self._fetch(
            "SELECT min(next_attempt_at_ms) FROM deliveries "
            "WHERE region = %s AND status = 'pending'",
            (region,),
        )
        return rows[0][0] if rows else None

    async def attempts_of(self, delivery_id: str) -> list[Attempt]:
        rows = await self._fetch(
            f"SELECT {_ATTEMPT_COLS} FROM attempts WHERE delivery_id = %s "
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
        sql = f"SELECT {_ATTEMPT_COLS} FROM attempts WHERE endpoint_id = %s"
        args: list[object] = [endpoint_id]
        if succeeded is not None:
            sql += " AND error IS NULL" if succeeded else " AND error IS NOT NULL"
        if since_ms is not None:
            sql += " AND at_ms >= %s"
            args.append(since_ms)
        if after is not None:
            sql += " AND (at_ms, delivery_id, n) > (%s, %s, %s)"
            args.extend(after)
        sql += " ORDER BY at_ms, delivery_id, n LIMIT %s"
        args.append(limit)
        return [Attempt(*r) for r in await self._fetch(sql, args)]

    async def purge_attempts(self, before_ms: int, limit: int) -> int:
        return await self._write(
            "DELETE FROM attempts WHERE ctid = ANY(ARRAY("
            "SELECT ctid FROM attempts WHERE at_ms < %s LIMIT %s))",
            (before_ms, limit),
        )

    async def pending_count(self, region: str) -> int:
        return (await self.counts(region))["deliveries_pending"]

    async def pending_by_tenant(self, region: str) -> dict[str, int]:
        rows = await self._fetch(
            "SELECT tenant, count(*) FROM deliveries WHERE region = %s AND status = 'pending' "
            "GROUP BY tenant",
            (region,),
        )
        return {t: int(n) for t, n in rows}

    async def counts(self, region: str) -> dict[str, int]:
        # fold the rows of other backends' slots that no transaction holds into slot 0
        # (migration 8), one folder at a time, so the rows stay few: kinds x regions x
        # statuses x live backends
        await self._once_more(self._fold_counts)
        out = {"events": 0, "events_accepted": 0}
        out.update((f"deliveries_{s.value}", 0) for s in DeliveryStatus)
        for kind, r, status, n in await self._fetch(
            "SELECT kind, region, status, sum(n) FROM row_counts GROUP BY kind, region, status"
        ):
            if kind == "event":
                out["events"] += int(n)
                if r == region:
                    out["events_accepted"] += int(n)
            elif r == region:
                out[f"deliveries_{status}"] = int(n)
        return out
