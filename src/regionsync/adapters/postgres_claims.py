"""Delivery claims of the processes of one PostgreSQL region (``PostgresStore``'s; the
runtime's port is runtime/cohort.Claims): a due delivery is leased to one process at a
time, until its outcome is written or the lease expires."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..core.model import Delivery
from .sql_queries import DELIVERY_COLS, delivery_of, prefixed

__all__ = ["DeliveryClaims"]

_D_COLS = prefixed(DELIVERY_COLS, "d")


class DeliveryClaims:
    """The claim statements, over the store's ``_fetch`` and ``_write``."""

    _fetch: Callable[..., Awaitable[list[tuple[Any, ...]]]]  # PostgresStore's
    _write: Callable[..., Awaitable[int]]

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
        return await self._claim(
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
            " ORDER BY cand.at, cand.id LIMIT %s)",
            (region, region, region, now_ms, now_ms, span, list(exclude_endpoints), span,
             now_ms, now_ms, limit), holder, now_ms + lease_ms,
        )  # fmt: skip

    async def claim_ids(
        self, region: str, ids: Sequence[str], now_ms: int, holder: str, lease_ms: int
    ) -> list[Delivery]:
        """``claim_due`` of those of ``ids`` still pending and unclaimed, whatever their
        due time (``core.retry.due_now``: a schedule written by a clock that ran ahead)."""
        return await self._claim(
            "WITH c AS (SELECT id FROM deliveries WHERE id = ANY(%s) AND region = %s"
            " AND status = 'pending' AND lease_until_ms <= %s FOR UPDATE SKIP LOCKED)",
            (sorted(ids), region, now_ms), holder, now_ms + lease_ms,
        )  # fmt: skip

    async def _claim(self, cte: str, args: tuple[Any, ...], holder: str, until_ms: int
                     ) -> list[Delivery]:  # fmt: skip
        """Lease the rows the CTE ``c`` of ``cte`` names to ``holder``; in due order. By
        the primary key: a join with c could be planned as a scan of the table."""
        rows = await self._fetch(
            f"{cte} UPDATE deliveries d SET claimed_by = %s, lease_until_ms = %s "
            f"WHERE d.id = ANY(ARRAY(SELECT id FROM c)) RETURNING {_D_COLS}",
            (*args, holder, until_ms),
        )
        return sorted((delivery_of(r) for r in rows), key=lambda d: (d.next_attempt_at_ms, d.id))

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
