"""The coordinator of one node process among several on one PostgreSQL database (issue
16): what runtime/cohort.py asks of the database, over PostgresStore and the two
dedicated sessions of postgres_cluster (the replication role's advisory lock and the
LISTEN of commits that write the log)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence

import psycopg

from ..core.model import Delivery, Record
from .log_cut import RECORD_COLS, body_of
from .postgres_cluster import AdvisoryLeader, CommitListener
from .postgres_schema import LEVEL, ROLE_APP, older_sessions
from .postgres_store import PostgresStore

__all__ = ["PostgresCoordinator"]

log = logging.getLogger(__name__)

# one follow round in one statement (one snapshot): a first row of the database's clock
# (when its transaction began: before the snapshot) and the stored version vector,
# then the records of every origin but %s (the reader's own) past the seqs given (0 for
# an origin not given), in seq order per origin, origins in Python's order (bytes: "C"),
# at most %s per origin and %s in all. The log row and the payload (log_cut's
# ``PAYLOAD_JOIN``) are looked up per key by LATERAL ... LIMIT 1: joined plainly, the
# version vector's row estimate made the planner hash-join the whole log and events
# tables (2.4 ms a round against 0.2 in EXPLAIN ANALYZE; bench/README.md "Scale-out")
_FOLLOW = (
    "WITH v AS (SELECT origin, seq FROM version_vector), "
    "w AS (SELECT v.origin, coalesce(h.seq, 0) AS after FROM v LEFT JOIN "
    "unnest(%s::text[], %s::bigint[]) AS h(origin, seq) ON h.origin = v.origin "
    "WHERE v.origin <> %s AND v.seq > coalesce(h.seq, 0)), "
    "k AS (SELECT w.origin, g.seq FROM w CROSS JOIN LATERAL (SELECT seq FROM log "
    "WHERE origin = w.origin AND seq > w.after ORDER BY seq LIMIT %s) g "
    'ORDER BY w.origin COLLATE "C", g.seq LIMIT %s) '
    "SELECT * FROM (SELECT NULL AS origin, NULL AS seq, NULL, NULL, NULL, NULL, NULL, NULL, "
    "extract(epoch FROM transaction_timestamp())::float8, "
    "coalesce((SELECT json_object_agg(origin, seq) FROM v), '{}'::json) "
    f"UNION ALL SELECT {RECORD_COLS}, NULL, NULL FROM k CROSS JOIN LATERAL (SELECT * "
    "FROM log WHERE origin = k.origin AND seq = k.seq LIMIT 1) l LEFT JOIN LATERAL (SELECT "
    "payload FROM events WHERE l.event_at IS NOT NULL AND id = l.event_id LIMIT 1) e ON true) r "
    'ORDER BY r.origin COLLATE "C" NULLS FIRST, r.seq'
)


class PostgresCoordinator:
    """``holder`` names this process (``host/pid/random``: delivery claims and the
    ``actors`` table show it); the replication role of ``region`` is the advisory lock
    ``regionsync/replication/<region>``. ``fence_s``: the store refuses this process's
    registry writes when it has not followed the region for that long (``followed``;
    None: never). Implements runtime.cohort.Coordinator."""

    def __init__(
        self, store: PostgresStore, region: str, holder: str, fence_s: float | None = None
    ):
        self.store, self.region, self.holder = store, region, holder
        store.fence.bound_s = fence_s
        self._leader = AdvisoryLeader(
            store.url, f"regionsync/replication/{region}", application_name=ROLE_APP + holder
        )
        self._listener: CommitListener | None = None
        self._read_at: float | None = None  # database clock of the last version vector read

    async def allocate_actor(self, wall_ms: int) -> int:
        """A new incarnation for this process (PostgresStore.allocate_actor)."""
        return await self.store.allocate_actor(wall_ms, self.holder)

    async def is_leader(self) -> bool:
        """Acquire or confirm the region's replication role (AdvisoryLeader.poll); False
        when another process holds it or the database cannot confirm."""
        return await self._leader.poll()

    async def changes(self) -> AsyncIterator[dict[str, int]]:
        """Yields once per commit that writes the log, of any process (NOTIFY), the
        commit's version vector (``{}``: unknown), reconnecting after a lost session (a
        second later); never ends."""
        while True:
            listener = CommitListener(self.store.url)
            self._listener = listener
            try:
                await listener.start()
                yield {}  # (re)connected: whatever was missed meanwhile is read now
                async for vv in listener:
                    yield vv
            except (psycopg.Error, OSError) as exc:
                log.warning("registry notifications lost (%s); reconnecting", exc)
            finally:
                await listener.close()
            await asyncio.sleep(1.0)

    async def actor_holders(self) -> dict[int, str]:
        """incarnation -> holder of every process actor of the region (PostgresStore)."""
        return await self.store.actor_holders()

    async def older_sessions(self) -> list[str]:
        """Sessions announcing no schema level of this release's or more
        (postgres_schema.older_sessions)."""
        async with self.store.pool.connection() as conn:
            return await older_sessions(conn, LEVEL)

    async def processes(self) -> list[tuple[str, bool]]:
        """``(holder, holds the replication role)`` of every process of the region now
        connected to the database, by holder: the sessions of the role's advisory lock
        (every process polls it on a session of its own, named ``regionsync <holder>``,
        at most 63 characters; pg_stat_activity), and which one holds the lock
        (pg_locks: a bigint key is its high 32 bits in ``classid``, its low 32 bits in
        ``objid``, ``objsubid`` 1; PostgreSQL docs, "pg_locks"). A process whose session
        is down (reconnecting, or not yet polled once) is not listed. Raises psycopg
        errors when the database cannot be asked."""
        key = self._leader.key
        rows = await self.store._fetch(
            "SELECT substr(s.application_name, %s), EXISTS (SELECT 1 FROM pg_locks l"
            " WHERE l.pid = s.pid AND l.locktype = 'advisory' AND l.granted"
            " AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 1) "
            "FROM pg_stat_activity s WHERE s.datname = current_database()"
            " AND starts_with(s.application_name, %s) ORDER BY 1",
            (len(ROLE_APP) + 1, (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF, ROLE_APP),
        )
        return [(str(h), bool(r)) for h, r in rows]

    async def follow_read(
        self, have: Mapping[str, int], own: str, limit: int
    ) -> tuple[dict[str, int], list[Record]]:
        """One follow round's read (``_FOLLOW``); the database's clock then is kept for
        ``followed``."""
        origins = sorted(have)
        args = (origins, [have[o] for o in origins], own, limit, limit)
        rows = await self.store._fetch(_FOLLOW, args)
        self._read_at = float(rows[0][8])
        # a cut record whose events row is gone raises psycopg.DataError
        at_rest = self.store.at_rest
        records = [
            Record(r[0], r[1], r[2], body_of(r[:8], at_rest, psycopg.DataError), (r[4], r[5]))
            for r in rows[1:]
        ]
        return {str(o): int(n) for o, n in rows[0][9].items()}, records

    def followed(self) -> None:
        """The follow round that began with the last ``follow_read`` succeeded: this
        process's registry writes are fresh from then (``postgres_commit.Fence``)."""
        if self._read_at is not None:
            self.store.fence.followed(self._read_at)

    async def claim_due(
        self,
        region: str,
        now_ms: int,
        limit: int,
        lease_ms: int,
        exclude_endpoints: Sequence[str] = (),
    ) -> list[Delivery]:
        """PostgresStore.claim_due for this process (``holder``)."""
        return await self.store.claim_due(
            region, now_ms, limit, self.holder, lease_ms, exclude_endpoints
        )

    async def claim_ids(
        self, region: str, delivery_ids: Sequence[str], now_ms: int, lease_ms: int
    ) -> list[Delivery]:
        """PostgresStore.claim_ids for this process (``holder``)."""
        return await self.store.claim_ids(region, delivery_ids, now_ms, self.holder, lease_ms)

    async def release(self, delivery_ids: Sequence[str]) -> None:
        """End this process's claims on ``delivery_ids`` (claimed, not attempted)."""
        await self.store.release_claims(self.holder, delivery_ids)

    async def renew(self, delivery_ids: Sequence[str], until_ms: int) -> None:
        """Extend this process's claims on ``delivery_ids`` to ``until_ms``."""
        await self.store.renew_claims(self.holder, delivery_ids, until_ms)

    async def close(self) -> None:
        """Give up the role and this process's claims (a clean stop); the store stays
        open (the node closes it)."""
        await self._leader.close()
        try:
            await self.store.release_claims(self.holder)
        except (psycopg.Error, RuntimeError) as exc:
            log.warning("delivery claims not released (%s): they expire with their lease", exc)
