"""The transactional outbox relay: publishes the rows a producer inserted into a
PostgreSQL outbox table (in the producer's own transaction) through the Python SDK, in
order per tenant, and marks them sent.

Never two ids for one row: a row gets its event id (``evt_`` + ULID) in a committed
UPDATE before its first publish, and every publish of the row (a retry, a failover to
another region, the relay restarted after a SIGKILL) sends that id, which every region
dedupes (README, "Client-chosen event ids"). A row a region refuses for good (a 4xx, e.g.
an unknown tenant) is marked failed with the error and skipped; a row no region accepts
now (unreachable, 429, 5xx) stays unsent and its tenant waits (order kept); a 401 or 403
stops the relay (its token). One relay per table at a time: it
holds a session advisory lock on the table's name. Talks HTTP only (the SDK) and SQL
(psycopg); README "Outbox relay" has the table and the operation.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import psycopg
from psycopg import sql

__all__ = [
    "DDL",
    "OutboxRelay",
    "Publisher",
    "Row",
    "ensure_table",
    "outbox_status",
    "producer_insert",
    "table_name",
]

log = logging.getLogger("regionsync.outbox")

# the table the producer writes (README "Outbox relay"); {t} is the table's name
DDL = """
CREATE TABLE IF NOT EXISTS {t} (
    id bigserial PRIMARY KEY,
    tenant text NOT NULL,
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    idempotency_key text,
    event_id text UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at timestamptz,
    failed_at timestamptz,
    last_error text
);
CREATE INDEX IF NOT EXISTS {unsent} ON {t} (id) WHERE sent_at IS NULL AND failed_at IS NULL;
"""

_NAME = re.compile(r"(?:[a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,62}")


class Publisher(Protocol):
    """What the relay publishes through (``regionsync_client.AsyncClient``)."""

    def publish(
        self, tenant: str, event_type: str, payload: Any, idempotency_key: str | None = None,
        *, event_id: str | None = None,
    ) -> Awaitable[Any]: ...  # fmt: skip


@dataclass(frozen=True, slots=True)
class Row:
    id: int
    tenant: str
    event_type: str
    payload: Any
    idempotency_key: str | None
    event_id: str | None


def table_name(name: str) -> sql.Composable:
    """The outbox table's (optionally schema-qualified) name as an SQL identifier;
    ValueError unless it is lower-case letters, digits and ``_`` (63 at most)."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"table {name!r}: use [a-z_][a-z0-9_]* (optionally schema.table)")
    return sql.Identifier(*name.split("."))


async def ensure_table(conn: psycopg.AsyncConnection[Any], name: str) -> None:
    """Create the outbox table and its index of unsent rows if missing."""
    unsent = sql.Identifier(name.rsplit(".", 1)[-1] + "_unsent")
    await conn.execute(sql.SQL(DDL).format(t=table_name(name), unsent=unsent))
    await conn.commit()


async def outbox_status(conn: psycopg.AsyncConnection[Any], name: str) -> dict[str, Any]:
    """Progress and lag: rows pending (unsent), sent, failed; the oldest pending row's age
    (the relay's lag, seconds), rows sent in the last minute, the last row id sent."""
    q = sql.SQL(
        "SELECT count(*) FILTER (WHERE sent_at IS NULL AND failed_at IS NULL), "
        "count(*) FILTER (WHERE sent_at IS NOT NULL), count(*) FILTER (WHERE failed_at "
        "IS NOT NULL), extract(epoch FROM now() - min(created_at) FILTER (WHERE sent_at "
        "IS NULL AND failed_at IS NULL)), count(*) FILTER (WHERE sent_at > now() - "
        "interval '1 minute'), max(id) FILTER (WHERE sent_at IS NOT NULL) FROM {t}"
    ).format(t=table_name(name))
    cur = await conn.execute(q)
    pending, sent, failed, lag, last_minute, last_id = await cur.fetchone()  # type: ignore[misc]
    await conn.commit()
    return {
        "table": name, "pending": pending, "sent": sent, "failed": failed,
        "lag_s": round(float(lag), 3) if lag is not None else 0.0,
        "sent_last_minute": last_minute, "last_sent_id": last_id,
    }  # fmt: skip


@dataclass
class OutboxRelay:
    """Relays one outbox table. ``run(stop)`` loops until ``stop`` is set; ``step()``
    relays one batch and returns the rows it handled."""

    conn: psycopg.AsyncConnection[Any]
    table: str
    client: Publisher
    batch: int = 500
    concurrency: int = 16  # tenants published at once (each in row order)
    poll_s: float = 0.2
    progress_s: float = 5.0
    new_id: Callable[[], str] = field(default=lambda: _new_id())
    sent_total: int = 0
    failed_total: int = 0
    _last_progress: float = 0.0

    async def lock(self) -> bool:
        """Take the table's advisory lock (False: another relay holds it)."""
        key = int.from_bytes(hashlib.sha256(self.table.encode()).digest()[:8], "big", signed=True)
        cur = await self.conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))
        row = await cur.fetchone()
        await self.conn.commit()
        return bool(row and row[0])

    async def step(self) -> int:
        rows = await self._assign_ids(await self._unsent())
        if not rows:
            return 0
        by_tenant: dict[str, list[Row]] = {}
        for r in rows:
            by_tenant.setdefault(r.tenant, []).append(r)
        gate = asyncio.Semaphore(self.concurrency)
        results = await asyncio.gather(*(self._tenant(rs, gate) for rs in by_tenant.values()))
        sent = [i for ok, _bad in results for i in ok]
        failed = [b for _ok, bad in results for b in bad]
        await self._mark(sent, failed)
        return len(sent) + len(failed)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            handled = await self.step()
            now = time.monotonic()
            if now - self._last_progress >= self.progress_s:
                self._last_progress = now
                s = await outbox_status(self.conn, self.table)
                log.info(
                    "outbox %s: sent %d (total %d, %d in the last minute), pending %d, "
                    "failed %d, lag %.1f s", self.table, self.sent_total, s["sent"],
                    s["sent_last_minute"], s["pending"], s["failed"], s["lag_s"],
                )  # fmt: skip
            if not handled:
                try:
                    await asyncio.wait_for(stop.wait(), self.poll_s)
                except TimeoutError:
                    pass

    async def _unsent(self) -> list[Row]:
        q = sql.SQL(
            "SELECT id, tenant, event_type, payload, idempotency_key, event_id FROM {t} "
            "WHERE sent_at IS NULL AND failed_at IS NULL ORDER BY id LIMIT %s"
        ).format(t=table_name(self.table))
        cur = await self.conn.execute(q, (self.batch,))
        rows = [Row(*r) for r in await cur.fetchall()]
        await self.conn.commit()
        return rows

    async def _assign_ids(self, rows: list[Row]) -> list[Row]:
        """Every row with its event id, the new ones committed before any publish."""
        fresh = {r.id: self.new_id() for r in rows if r.event_id is None}
        if fresh:
            q = sql.SQL("UPDATE {t} SET event_id = %s WHERE id = %s AND event_id IS NULL")
            async with self.conn.cursor() as cur:
                await cur.executemany(
                    q.format(t=table_name(self.table)), [(e, i) for i, e in fresh.items()]
                )
            await self.conn.commit()
        return [r if r.event_id else replace(r, event_id=fresh[r.id]) for r in rows]

    async def _tenant(
        self, rows: Sequence[Row], gate: asyncio.Semaphore
    ) -> tuple[list[int], list[tuple[int, str]]]:
        """Publish one tenant's rows in order; stop at the first that no region takes
        now (it and the rest wait for the next step). Returns (sent, failed with why)."""
        from regionsync_client import ApiError, RegionsUnavailable

        sent: list[int] = []
        failed: list[tuple[int, str]] = []
        async with gate:
            for r in rows:
                try:
                    await self.client.publish(
                        r.tenant, r.event_type, r.payload, r.idempotency_key, event_id=r.event_id
                    )
                except ApiError as exc:
                    if exc.status in (401, 403):  # the relay's token: nothing would pass
                        raise
                    if exc.status >= 500 or exc.status == 429:
                        log.warning("outbox row %d (tenant %s) waits: %s", r.id, r.tenant, exc)
                        break
                    log.warning("outbox row %d refused for good: %s", r.id, exc)
                    failed.append((r.id, str(exc)[:1000]))
                    continue
                except RegionsUnavailable as exc:
                    log.warning("outbox row %d (tenant %s) waits: %s", r.id, r.tenant, exc)
                    break
                sent.append(r.id)
        return sent, failed

    async def _mark(self, sent: list[int], failed: list[tuple[int, str]]) -> None:
        t = table_name(self.table)
        if sent:
            q = sql.SQL("UPDATE {t} SET sent_at = now() WHERE id = ANY(%s)").format(t=t)
            await self.conn.execute(q, (sent,))
        if failed:
            q = sql.SQL("UPDATE {t} SET failed_at = now(), last_error = %s WHERE id = %s")
            async with self.conn.cursor() as cur:
                await cur.executemany(q.format(t=t), [(why, i) for i, why in failed])
        await self.conn.commit()
        self.sent_total += len(sent)
        self.failed_total += len(failed)


def _new_id() -> str:
    from regionsync_client import new_event_id

    return new_event_id()


def producer_insert(table: str) -> sql.Composable:
    """The producer's INSERT (tests and the README's example): tenant, event_type,
    payload (``Jsonb``), idempotency_key."""
    return sql.SQL(
        "INSERT INTO {t} (tenant, event_type, payload, idempotency_key) VALUES (%s, %s, %s, %s)"
    ).format(t=table_name(table))
