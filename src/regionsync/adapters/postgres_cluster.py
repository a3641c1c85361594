"""Coordination of several node processes on one PostgreSQL database (issue 16): one
holder per region of a role (the replication links and anti-entropy), and notifications
of registry changes committed by another process.

**The CRDT actor when several processes write one region (decided, issue 16): one actor
per process**, ``region:incarnation`` with an incarnation of its own for each process
start (allocated from the ``actors`` table, PostgresStore.allocate_actor), not one actor
per region with a database sequence for the log seq. Reasons:

- An actor must be a sequential writer. OR-Set dots are minted in memory as
  ``(actor, context.max(actor) + 1)`` (crdt/_orset.py) and LWW ties break on the actor;
  two processes sharing an actor would mint the same dot for different adds, or tie on
  different values, unless every registry write of the region were serialized through one
  database lock held across catching up, stamping and committing.
- A region actor's log seq must be gapless (replicas hold back records until the gap
  closes, so a gap stalls that origin everywhere). A PostgreSQL SEQUENCE is not gapless (a
  rolled-back transaction loses its value); a gapless counter means one row locked by
  every commit of every process: the publish path of all processes in one queue, which is
  what several processes are meant to remove.
- Per-process actors reuse what exists: a process merges another local process's log
  records into its memory per origin in seq order, as it applies a peer region's, but
  without writing them again (runtime/cohort.py), and the one process holding the
  replication role ships every origin in the shared log, as it already forwards
  third-region records.

The cost: version vectors carry one entry per process incarnation of a region instead of
one per region incarnation. Everything that is per region stays per region (delivery
ownership, custody, an event's ``region``), and version vectors, truncation and
anti-entropy are per origin already, so a SQLite region and a PostgreSQL region with
several processes replicate as any regions do.

Both keep a dedicated connection outside the store's pool (a session advisory lock and
``LISTEN`` belong to one session). Neither decides anything about the node: the runtime
asks ``AdvisoryLeader.poll`` and reads ``CommitListener``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator

import psycopg

from .postgres_schema import APP_PREFIX, LEVEL

__all__ = ["COMMIT_CHANNEL", "AdvisoryLeader", "CommitListener", "lock_key"]

log = logging.getLogger(__name__)

# NOTIFY channel of commits that wrote the log or the registry (postgres_commit sends it;
# named when only registry commits were sent, and the previous release listens on it)
COMMIT_CHANNEL = "regionsync_registry"

# the server drops the session of a holder it no longer hears from after about
# idle + interval * count seconds (a crashed host, a partition); a killed process's
# socket is closed by its kernel, so its lock is freed at once
_KEEPALIVE = {"tcp_keepalives_idle": 5, "tcp_keepalives_interval": 2, "tcp_keepalives_count": 2}


def lock_key(name: str) -> int:
    """The signed 64-bit advisory lock key of ``name`` (first 8 bytes of its BLAKE2b)."""
    return int.from_bytes(
        hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True
    )


class AdvisoryLeader:
    """At most one holder of ``name`` among the processes on the database at ``url``: a
    session-level ``pg_try_advisory_lock`` on a dedicated connection.

    Call ``poll`` every few seconds: it acquires the lock when free and confirms it is
    still held (a round trip within ``check_timeout_s``). When the holder dies its session
    ends and the lock is free for the next ``poll`` of another process (PostgreSQL docs,
    "Advisory Locks": session locks are released when the session ends). A holder that
    cannot confirm (connection lost) reports False at once and must stop acting as
    holder: the server frees its lock only once it drops that session (TCP keepalive,
    about 9 s), so another process takes over after that, never while it might still act.
    """

    def __init__(
        self, url: str, name: str, check_timeout_s: float = 2.0, application_name: str = ""
    ):
        self.url, self.name, self.key = url, name, lock_key(name)
        # the session's application_name (pg_stat_activity): who holds or polls the lock
        self.application_name = application_name[:63]  # NAMEDATALEN - 1
        self.check_timeout_s = check_timeout_s
        self.held = False
        self._conn: psycopg.AsyncConnection | None = None

    async def poll(self) -> bool:
        """True if this process holds the lock now (acquiring it if free). Never raises
        for database errors: they mean "not held" (logged)."""
        try:
            async with asyncio.timeout(self.check_timeout_s):
                if self._conn is None or self._conn.closed:
                    self.held = False
                    self._conn = await psycopg.AsyncConnection.connect(
                        self.url, autocommit=True, keepalives=1, keepalives_idle=5,
                        keepalives_interval=2, keepalives_count=2,
                        application_name=self.application_name,
                    )  # fmt: skip
                    for setting, value in _KEEPALIVE.items():
                        await self._conn.execute(f"SET {setting} = {int(value)}")
                if self.held:
                    await self._conn.execute("SELECT 1")
                else:
                    cur = await self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,))
                    row = await cur.fetchone()
                    self.held = bool(row and row[0])
        except (psycopg.Error, OSError, TimeoutError) as exc:
            if self.held:
                log.warning("lost %s: %s", self.name, exc)
            self.held = False
            await self._drop()
        return self.held

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except (psycopg.Error, OSError):
                pass

    async def close(self) -> None:
        """Release now (unlock, then end the session)."""
        if self.held and self._conn is not None:
            try:
                await self._conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
            except psycopg.Error:
                pass  # a lost session released it already
        self.held = False
        await self._drop()


class CommitListener:
    """Notifications of the commits that write the log or the registry, by any process on
    the database at ``url``: iterate to get, per commit, its version vector ``{origin
    actor: seq}`` (``{}`` when it did not fit a notification). ``NOTIFY`` makes committing
    transactions take one server-wide lock through their WAL flush; most of a region's
    publish commits paid it already (their usage counters are registry keys), and the
    other processes' polls cost more (bench/README.md "idle.py").

    ``start`` before committing what must be seen (LISTEN takes effect at once); a
    notification is delivered only after the notifying transaction committed.
    """

    def __init__(self, url: str):
        self.url = url
        self._conn: psycopg.AsyncConnection | None = None

    async def start(self) -> None:
        """Connect and LISTEN; raises psycopg.OperationalError if the database is down."""
        # named like the pool's sessions: a process of this release (postgres_schema)
        self._conn = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, application_name=f"{APP_PREFIX}{LEVEL}"
        )
        await self._conn.execute(f"LISTEN {COMMIT_CHANNEL}")

    async def __aiter__(self) -> AsyncIterator[dict[str, int]]:
        if self._conn is None:
            raise RuntimeError("listener is not started")
        async for n in self._conn.notifies():
            try:  # anything else on the channel: unknown, so read
                vv = json.loads(n.payload)
                yield {str(k): int(v) for k, v in vv.items()} if isinstance(vv, dict) else {}
            except (ValueError, TypeError):
                yield {}

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
