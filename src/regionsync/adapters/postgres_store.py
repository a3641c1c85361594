"""PostgreSQL Store (``store = "postgresql://..."`` in node.toml): for a region that
outgrows one SQLite file (issue 16).

Same contract as SqliteStore (tests/store runs one suite on memory, SQLite and this).
Connections come from a psycopg 3 async pool (``psycopg_pool.AsyncConnectionPool``);
every connection runs with ``synchronous_commit = on``, whatever the server default, so
``commit`` returns only after the WAL record of its transaction is flushed (PostgreSQL
docs, "synchronous_commit"): a publish acknowledged after ``commit`` survives a crash of
the server, as with SQLite's ``synchronous=FULL``. Each ``commit`` is one transaction
(all of a WriteBatch or nothing), written by adapters/postgres_commit.py.

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
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

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
from ..runtime.ports import StoreInfo
from .log_cut import PAYLOAD_JOIN, RECORD_COLS, body_of
from .postgres_claims import DeliveryClaims
from .postgres_commit import Fence, write_batch
from .postgres_schema import APP_PREFIX, LEVEL, ROLE_APP, SCHEMA_LOCK, migrate
from .retention_sql import PostgresPurge
from .secretbox import KEY_CHECK, MAGIC, AtRest, NodeKeys
from .sql_queries import (
    DELIVERY_COLS,
    EVENT_COLS,
    POSTGRES,
    Queries,
    counts_of,
    delivery_of,
    prefixed,
)

__all__ = ["PostgresStore"]

log = logging.getLogger(__name__)
T = TypeVar("T")

Q = Queries(POSTGRES)
# every wanted origin's records in one round trip (a link's read asks for several):
# each origin's, in seq order, after its own seq, origins in the order given, at most
# the outer LIMIT in all. The keys are chosen first (a range of the primary key per
# origin), so only the bodies of the records returned are read
_RECORDS_OF = (
    f"SELECT {RECORD_COLS} FROM (SELECT w.i, w.origin, g.seq FROM unnest(%s::text[], "
    "%s::bigint[]) WITH ORDINALITY AS w(origin, after, i) CROSS JOIN LATERAL (SELECT seq "
    "FROM log WHERE origin = w.origin AND seq > w.after ORDER BY seq LIMIT %s) g "
    "ORDER BY w.i, g.seq LIMIT %s) k JOIN log l ON l.origin = k.origin AND l.seq = k.seq "
    f"{PAYLOAD_JOIN} ORDER BY k.i, k.seq"
)
# the ``processes`` rows of the previous release's processes (no incarnation recorded)
# whose holder ran a retired actor and has no session now: stopped for good (a holder
# reused by a live process has its role session, ``ROLE_APP`` + holder)
_FORGET_UNNUMBERED = (
    "DELETE FROM processes p WHERE p.incarnation IS NULL"
    " AND p.holder IN (SELECT holder FROM actors WHERE incarnation = ANY(%s))"
    " AND NOT EXISTS (SELECT 1 FROM pg_stat_activity s WHERE s.datname = current_database()"
    " AND s.application_name = left(%s || p.holder, 63))"
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
_D_COLS = prefixed(DELIVERY_COLS, "d")


async def _configure(conn: psycopg.AsyncConnection) -> None:
    # durability does not depend on the server's (or a role's) default
    await conn.execute("SET synchronous_commit = on")


class PostgresStore(DeliveryClaims, PostgresPurge):
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
        # registry rows joined with new states: the node's merge that prunes retired
        # actors (runtime/pruning.py); None: the plain merge
        self.join_states: Callable[[Any, Any], Any] | None = None
        self.fence = Fence()  # registry writes of a process that stopped following
        self._pool_min, self._pool_max = pool_min, pool_max
        self._pool_obj: AsyncConnectionPool | None = None
        self._open_timeout_s = 30.0  # open fails if no connection is made within this
        self._region = ""  # set by ``open``
        # this process's row in ``processes``: host/pid/region unless set before ``open``
        # (tests running several nodes in one OS process give each its own)
        self.process_name = ""

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
            # the schema level this process runs (postgres_schema: contract steps)
            kwargs={"autocommit": True, "application_name": f"{APP_PREFIX}{LEVEL}"},
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
                if not self.process_name:
                    self.process_name = f"{socket.gethostname()}/{os.getpid()}/{region}"
                self._region = region
                await migrate(conn, holder=self.process_name)
                async with conn.transaction():
                    # several processes may open a fresh database at once: one inserts
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                    cur = await conn.execute(
                        "INSERT INTO meta(key, value) VALUES ('region', %s), "
                        "('incarnation', %s) ON CONFLICT (key) DO NOTHING",
                        (region, str(new_incarnation)),
                    )
                    fresh = cur.rowcount == 2
                    if fresh:  # when it started empty (runtime/pruning.py ``held``)
                        await conn.execute(
                            "INSERT INTO meta(key, value) VALUES ('born', %s) "
                            "ON CONFLICT (key) DO NOTHING",
                            (str(new_incarnation),),
                        )
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
        born = int(rows.get("born", new_incarnation if fresh else 0))
        return StoreInfo(region, int(rows["incarnation"]), fresh=fresh, born_ms=born)

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
            await conn.execute(
                "UPDATE processes SET incarnation = %s WHERE holder = %s",
                (incarnation, self.process_name),
            )
        return incarnation

    async def actor_holders(self) -> dict[int, str]:
        """incarnation -> holder of every process actor allocated on this database."""
        rows = await self._fetch("SELECT incarnation, holder FROM actors", ())
        return {int(i): str(h) for i, h in rows}

    async def records_of(self, after: Mapping[str, int], limit: int) -> list[Record]:
        """Log records of the origins in ``after`` with ``seq > after[origin]``, in seq
        order per origin, at most ``limit`` in all (other origins are not read)."""
        if not after or limit <= 0:
            return []
        origins = sorted(after)
        rows = await self._fetch(_RECORDS_OF, (origins, [after[o] for o in origins], limit, limit))
        # a cut record whose events row is gone raises psycopg.DataError
        return [
            Record(r[0], r[1], r[2], body_of(r, self.at_rest, psycopg.DataError), (r[4], r[5]))
            for r in rows
        ]

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

    async def _commit(self, b: WriteBatch) -> None:
        async with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            await write_batch(cur, b, self.at_rest, self.join_states, self.fence)

    async def load_registry(self) -> dict[str, bytes]:
        rows = await self._fetch(Q.registry)
        return {k: self.at_rest.open_state(k, bytes(v)) for k, v in rows}

    async def load_version_vector(self) -> dict[str, int]:
        return dict(await self._fetch(Q.version_vector))  # type: ignore[arg-type]

    async def load_usage_carry(self) -> None:
        """None: a region's processes each record their own moves with every commit (a
        carry kept here would need an owner once its process is gone)."""
        return None

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

    async def forget_origins(self, origins: Iterable[str]) -> None:
        """Delete the version vector rows, log records and log floors of ``origins``."""
        await self._once_more(self._forget, sorted(origins))

    async def _forget(self, origins: list[str]) -> None:
        # this region's process actors among them: their ``processes`` and ``actors``
        # rows go too (the highest incarnation stays: allocate_actor counts on from it)
        mine = [int(i) for r, _, i in (o.rpartition(":") for o in origins)
                if r == self._region and i.isdigit()]  # fmt: skip
        async with self.pool.connection() as conn, conn.transaction():
            for table in ("version_vector", "log", "log_floor"):
                await conn.execute(
                    f"DELETE FROM {table} WHERE origin = ANY(%s)",  # noqa: S608
                    (origins,),
                )
            if mine:
                await conn.execute("DELETE FROM processes WHERE incarnation = ANY(%s)", (mine,))
                await conn.execute(_FORGET_UNNUMBERED, (mine, ROLE_APP))
                await conn.execute(
                    "DELETE FROM actors WHERE incarnation = ANY(%s) "
                    "AND incarnation < (SELECT max(incarnation) FROM actors)",
                    (mine,),
                )

    async def load_log_floor(self) -> dict[str, int]:
        return dict(await self._fetch(Q.log_floor))  # type: ignore[arg-type]

    async def list_event_ids(self, after: str = "", limit: int | None = None) -> list[str]:
        return [r[0] for r in await self._fetch(*Q.event_ids(after, limit))]

    async def load_deliveries(self, after: str = "", limit: int | None = None) -> list[Delivery]:
        return [delivery_of(r) for r in await self._fetch(*Q.deliveries_after(after, limit))]

    async def get_event(self, event_id: str) -> Event | None:
        rows = await self._fetch(*Q.event(event_id))
        return Event(*rows[0]) if rows else None

    async def get_events(self, event_ids: Sequence[str]) -> dict[str, Event]:
        rows = await self._fetch(*Q.by_ids(EVENT_COLS, "events", list(set(event_ids))))
        return {r[0]: Event(*r) for r in rows}

    async def get_deliveries(self, delivery_ids: Sequence[str]) -> dict[str, Delivery]:
        rows = await self._fetch(*Q.by_ids(DELIVERY_COLS, "deliveries", list(set(delivery_ids))))
        return {r[0]: delivery_of(r) for r in rows}

    async def list_audit(
        self,
        tenant: str | None,
        since_ms: int | None,
        before: tuple[int, int, str, int] | None,
        limit: int,
    ) -> list[AuditEntry]:
        return [
            AuditEntry(*r) for r in await self._fetch(*Q.audit(tenant, since_ms, before, limit))
        ]

    async def load_idempotency(
        self, after: tuple[str, str] | None = None, limit: int | None = None
    ) -> list[tuple[str, str, str, str, int, str]]:
        return [tuple(r) for r in await self._fetch(*Q.idempotency_after(after, limit))]  # type: ignore[misc]

    async def get_idempotency(
        self, tenant: str, key: str
    ) -> tuple[str, str, str, str, int, str] | None:
        rows = await self._fetch(*Q.idempotency(tenant, key))
        return tuple(rows[0]) if rows else None  # type: ignore[return-value]

    async def idempotency_of_events(
        self, event_ids: Sequence[str]
    ) -> list[tuple[str, str, str, str, int, str]]:
        rows = await self._fetch(*Q.idempotency_of_events(event_ids))
        return sorted(tuple(r) for r in rows)  # type: ignore[misc]

    async def purge_idempotency(self, before_ms: int, limit: int) -> int:
        return await self._write(*Q.purge("idempotency", "created_at_ms", before_ms, limit))

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        rows = await self._fetch(*Q.delivery(delivery_id))
        return delivery_of(rows[0]) if rows else None

    async def deliveries_of_event(self, event_id: str) -> list[Delivery]:
        return [delivery_of(r) for r in await self._fetch(*Q.deliveries_of_event(event_id))]

    async def list_deliveries(
        self,
        endpoint_id: str,
        status: DeliveryStatus | None,
        since_ms: int | None,
        after_id: str | None,
        limit: int,
    ) -> list[Delivery]:
        sql, args = Q.endpoint_deliveries(endpoint_id, status, since_ms, after_id, limit)
        return [delivery_of(r) for r in await self._fetch(sql, args)]

    async def list_events(
        self, q: EventQuery, before: tuple[int, str] | None, limit: int
    ) -> list[Event]:
        return [Event(*r) for r in await self._fetch(*Q.tenant_events(q, before, limit))]

    async def list_tenant_deliveries(
        self, q: DeliveryQuery, before: tuple[int, str] | None, limit: int
    ) -> list[Delivery]:
        return [delivery_of(r) for r in await self._fetch(*Q.tenant_deliveries(q, before, limit))]

    async def deliveries_of_events(self, event_ids: Sequence[str]) -> list[Delivery]:
        if not event_ids:
            return []
        return [delivery_of(r) for r in await self._fetch(*Q.deliveries_of_events(event_ids))]

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
            f" SELECT {DELIVERY_COLS} FROM deliveries WHERE region = %s AND status = 'pending'"
            " AND endpoint_id = e.ep AND next_attempt_at_ms <= %s AND NOT (id = ANY(%s))"
            " ORDER BY next_attempt_at_ms, id LIMIT %s) d "
            "WHERE e.ep IS NOT NULL AND NOT (e.ep = ANY(%s)) "
            f"ORDER BY {order} LIMIT %s",
            (region, region, region, now_ms, list(exclude), per_endpoint or limit,
             list(exclude_endpoints), limit),
        )  # fmt: skip
        return [delivery_of(r) for r in rows]

    async def next_due_ms(self, region: str) -> int | None:
        rows = await self._fetch(*Q.next_due_ms(region))
        return rows[0][0] if rows else None

    async def attempts_of(self, delivery_id: str) -> list[Attempt]:
        return [Attempt(*r) for r in await self._fetch(*Q.attempts_of(delivery_id))]

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
        return [Attempt(*r) for r in await self._fetch(sql, args)]

    async def purge_attempts(self, before_ms: int, limit: int) -> int:
        return await self._write(*Q.purge("attempts", "at_ms", before_ms, limit))

    async def pending_count(self, region: str) -> int:
        return (await self.counts(region))["deliveries_pending"]

    async def pending_by_tenant(self, region: str) -> dict[str, int]:
        return {t: int(n) for t, n in await self._fetch(*Q.pending_by_tenant(region))}

    async def counts(self, region: str) -> dict[str, int]:
        # fold the rows of other backends' slots that no transaction holds into slot 0
        # (migration 8), one folder at a time, so the rows stay few: kinds x regions x
        # statuses x live backends
        await self._once_more(self._fold_counts)
        return counts_of(
            await self._fetch(
                "SELECT kind, region, status, sum(n) FROM row_counts GROUP BY kind, region, status"
            ),
            region,
        )
