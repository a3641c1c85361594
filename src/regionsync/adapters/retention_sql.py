"""Event retention in the SQL stores (SQLite, PostgreSQL): which events may go, and the
deletes, in one short transaction per batch.

An event goes once it was received before the cutoff and none of its deliveries is
pending; its deliveries and their attempts go in the same transaction, so no delivery is
left without its event. An event a log record may still hold a cut body for stays
(``log_cut``: such a body is put back from the events row until log truncation deletes the
record): only events received ``LOG_MARGIN_MS`` before the oldest cut record's HLC time go.
Idempotency-Keys keep their own lifetime (``ingest.idempotency_ttl_s``, shorter).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from .sql_queries import POSTGRES, SQLITE, Dialect, Query
from .sqlite_schema import immediate

__all__ = [
    "LOG_MARGIN_MS",
    "PostgresPurge",
    "PurgeSql",
    "Purged",
    "SqlitePurge",
    "purge_postgres",
    "purge_sqlite",
]

# a record's HLC wall time and its event's received time differ by clock drift (bounded
# by replication.max_drift_ms, a minute by default): a day is far beyond it
LOG_MARGIN_MS = 24 * 3600 * 1000


class PurgeSql:
    """The statements of one retention batch in dialect ``d``."""

    def __init__(self, d: Dialect):
        self.d = d

    def log_floor(self) -> Query:
        # the records kept cut (a scan of the log, which truncation keeps short)
        return self.d.sql("SELECT min(hlc_wall) FROM log WHERE event_id IS NOT NULL"), []

    def cutoff(self, before_ms: int, log_floor: Any) -> int:
        """``before_ms``, lowered below the oldest cut log record's time (if any)."""
        return before_ms if log_floor is None else min(before_ms, int(log_floor) - LOG_MARGIN_MS)

    def candidates(self, cutoff: int, limit: int, tenant: str | None, skip: Sequence[str]) -> Query:
        """Ids of events received before ``cutoff`` with no pending delivery, of
        ``tenant`` only (if not None) and of none of ``skip`` (indexed: events_age or
        events_tenant, deliveries_event)."""
        where, args = "received_at_ms < ?", [cutoff]
        if tenant is not None:
            where, args = "tenant = ? AND " + where, [tenant, cutoff]
        if skip:
            cond, more = self.d.is_in("tenant", skip)
            where, args = f"{where} AND NOT ({cond})", [*args, *more]
        sql = (
            f"SELECT id FROM events e WHERE {where} AND NOT EXISTS ("
            "SELECT 1 FROM deliveries d WHERE d.event_id = e.id AND d.status = 'pending') "
            "ORDER BY received_at_ms LIMIT ?"
        )
        return self.d.sql(sql), [*args, limit]

    def delete_deliveries(self, event_ids: Sequence[str]) -> Query:
        """Deletes the deliveries of ``event_ids`` that are not pending, returning their ids
        (one made pending since the candidates were read stays, and so does its event)."""
        cond, args = self.d.is_in("event_id", event_ids)
        sql = f"DELETE FROM deliveries WHERE {cond} AND status <> 'pending' RETURNING id"
        return self.d.sql(sql), args

    def delete_attempts(self, event_ids: Sequence[str]) -> Query:
        """Deletes the attempts of the deliveries ``delete_deliveries`` deletes next (the
        arguments are the event ids: a fan-out's delivery ids could pass SQLite's limit)."""
        cond, args = self.d.is_in("event_id", event_ids)
        sql = (
            "DELETE FROM attempts WHERE delivery_id IN (SELECT id FROM deliveries "
            f"WHERE {cond} AND status <> 'pending')"
        )
        return self.d.sql(sql), args

    def delete_events(self, event_ids: Sequence[str]) -> Query:
        """Deletes those of ``event_ids`` left without deliveries, returning their ids."""
        cond, args = self.d.is_in("id", event_ids)
        sql = (
            f"DELETE FROM events WHERE {cond} AND NOT EXISTS ("
            "SELECT 1 FROM deliveries d WHERE d.event_id = events.id) RETURNING id"
        )
        return self.d.sql(sql), args


Purged = tuple[list[str], list[str], int]  # event ids, delivery ids, attempts deleted


def purge_sqlite(db: sqlite3.Connection, q: PurgeSql, before_ms: int, limit: int,
                 tenant: str | None, skip: Sequence[str]) -> Purged:  # fmt: skip
    """One batch on SQLite's writer connection (``immediate``: no commit in between)."""
    with immediate(db):
        floor = db.execute(*q.log_floor()).fetchone()[0]
        cutoff = q.cutoff(before_ms, floor)
        ids = [r[0] for r in db.execute(*q.candidates(cutoff, limit, tenant, skip))]
        if not ids:
            return [], [], 0
        attempts = db.execute(*q.delete_attempts(ids)).rowcount
        dids = [r[0] for r in db.execute(*q.delete_deliveries(ids)).fetchall()]
        eids = [r[0] for r in db.execute(*q.delete_events(ids)).fetchall()]
        return eids, dids, attempts


async def purge_postgres(conn: Any, q: PurgeSql, before_ms: int, limit: int,
                         tenant: str | None, skip: Sequence[str]) -> Purged:  # fmt: skip
    """One batch on a PostgreSQL connection (``psycopg.AsyncConnection``), one transaction."""
    async with conn.transaction():
        floor = (await (await conn.execute(*q.log_floor())).fetchone())[0]
        cur = await conn.execute(*q.candidates(q.cutoff(before_ms, floor), limit, tenant, skip))
        ids = [r[0] for r in await cur.fetchall()]
        if not ids:
            return [], [], 0
        attempts = (await conn.execute(*q.delete_attempts(ids))).rowcount
        dids = [r[0] for r in await (await conn.execute(*q.delete_deliveries(ids))).fetchall()]
        eids = [r[0] for r in await (await conn.execute(*q.delete_events(ids))).fetchall()]
        return eids, dids, attempts


_SQLITE = PurgeSql(SQLITE)
_POSTGRES = PurgeSql(POSTGRES)


class SqlitePurge:
    """``purge_events`` of ``SqliteStore`` (a base class: the store's module is at its size
    limit). Uses the store's writer connection, its lock and its writer thread."""

    async def purge_events(
        self, before_ms: int, limit: int, tenant: str | None = None, skip: Sequence[str] = ()
    ) -> Purged:
        async with self._write:  # type: ignore[attr-defined]
            return await self._run(  # type: ignore[attr-defined]
                purge_sqlite,
                self.db,
                _SQLITE,
                before_ms,
                limit,
                tenant,
                skip,  # type: ignore[attr-defined]
            )


class PostgresPurge:
    """``purge_events`` of ``PostgresStore`` (a base class, as ``SqlitePurge``)."""

    async def purge_events(
        self, before_ms: int, limit: int, tenant: str | None = None, skip: Sequence[str] = ()
    ) -> Purged:
        return await self._once_more(self._purge_once, before_ms, limit, tenant, skip)  # type: ignore[attr-defined]

    async def _purge_once(
        self, before_ms: int, limit: int, tenant: str | None, skip: Sequence[str]
    ) -> Purged:
        async with self.pool.connection() as conn:  # type: ignore[attr-defined]
            return await purge_postgres(conn, _POSTGRES, before_ms, limit, tenant, skip)
