"""The delivery worker's reads of due deliveries (runtime/delivery.py): which rows are due
now, round-robin across endpoints (``core.lanes.fair_order``), and whose they are to
deliver (custody: an adopted owner's rows only for the endpoints this region is the
custodian of), claimed for this process when ``claims`` is set. A part of
``DeliveryWorker`` (it mixes this in), reading the worker's state.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..core.custody import CustodyRecord
from ..core.invariants import check
from ..core.lanes import Lane, fair_order
from ..core.model import Delivery
from ..core.retry import due_now, max_step_ms

if TYPE_CHECKING:
    from ..config import DeliverySettings
    from .cohort import Claims
    from .ports import Clock, CustodyView, Store
    from .state import Catalog

__all__ = ["SKEW_READ_S", "DueReads"]

log = logging.getLogger("regionsync.delivery")

_FAR_MS = 1 << 62  # a due cutoff past every schedule
SKEW_READ_S = 1.0  # with claims: the read for schedules written ahead, per owner, at most


class DueReads:
    """``DeliveryWorker``'s due reads; the attributes below are the worker's."""

    custody: CustodyView
    claims: Claims | None
    store: Store
    catalog: Catalog
    opts: DeliverySettings
    clock_tolerance_ms: int
    lanes: dict[str, Lane]
    clock: Clock
    _skew_read_at: dict[str, float]  # owner -> monotonic s of its last read (claims)

    def _held(self) -> list[str]:
        """Deliveries a due read must not return (the worker's: in flight or read ahead)."""
        raise NotImplementedError

    async def _due(
        self, now_ms: int, limit: int, blocked: set[str]
    ) -> tuple[list[Delivery], int | None]:
        """Due deliveries of every owner custody gives this region, round-robin; an
        adopted owner's only for the endpoints whose custodian this region is (claimed
        for this process when ``claims`` is set); and, when none is due, the earliest
        time (Unix ms) one not held nor skipped is (None: no such row is pending)."""
        owners = self.custody.claimable()
        due: list[Delivery] = []
        later: list[int] = []
        for owner, rec in owners.items():
            skip = blocked if rec is None else blocked | self._foreign(owner, rec)
            if self.claims is not None:
                lease_ms = int(self.opts.claim_lease_s * 1000)
                rows = await self.claims.claim_due(owner, now_ms, limit, lease_ms, sorted(skip))
                if not rows and (ids := await self._claimable_ahead(owner, now_ms, limit, skip)):
                    rows = await self.claims.claim_ids(owner, ids, now_ms, lease_ms)
            else:
                rows = await self.store.due_deliveries(
                    owner, now_ms, limit, self._held(), sorted(skip),
                    per_endpoint=max(1, limit // 2),
                )  # fmt: skip
                if not rows:
                    rows, at_ms = await self._skewed(owner, now_ms, limit, skip)
                    later += [] if at_ms is None else [at_ms]
            # custody gives the others to another region (or their lane is full): a row of
            # them would be sent twice; in production it is left to its custodian
            due += [d for d in rows if check(d.region == owner and d.endpoint_id not in skip,
                    "due read of %s returned %s (%s, %s)", owner, d.id, d.region,
                    d.endpoint_id)]  # fmt: skip
        busy = {eid: lane.inflight for eid, lane in self.lanes.items() if lane.inflight}
        due = fair_order(due, busy)
        if self.claims is not None and len(due) > limit:
            await self._unclaim(due[limit:])
        return due[:limit], min(later, default=None)

    async def _skewed(
        self, owner: str, now_ms: int, limit: int, skip: set[str]
    ) -> tuple[list[Delivery], int | None]:
        """With nothing due: the earliest scheduled rows whose schedule a clock that ran
        ahead wrote, or that lies past the largest retry step (``core.retry.due_now``),
        due at once. Read only when idle; stored rows stay as they are (the delivery
        join keeps the later schedule), the attempt writes the next one. Also the
        earliest schedule of the rows read (None: none is pending)."""
        step = max_step_ms(self.opts.retry_schedule_s)
        rows = await self.store.due_deliveries(owner, _FAR_MS, limit, self._held(), sorted(skip))
        due = [d for d in rows if due_now(d, now_ms, step, self.clock_tolerance_ms)]
        return due, min((t for d in rows if (t := d.next_attempt_at_ms) is not None), default=None)

    async def _claimable_ahead(
        self, owner: str, now_ms: int, limit: int, skip: set[str]
    ) -> list[str]:
        """With claims, after a claim round found nothing: the ids of rows written ahead
        (``_skewed``), read at most every ``SKEW_READ_S`` per owner (the read cost a
        statement and up to ``limit`` rows in every empty round). Rows due by their
        schedule are left to claim_due: it passed them over because another process
        holds them (asking claim_ids for them failed, 0.79 times per event at 4
        processes), or because a concurrent claim had them locked (then the next round
        claims what that one did not lease)."""
        now_s = self.clock.monotonic()
        last = self._skew_read_at.get(owner)
        if last is not None and now_s - last < SKEW_READ_S:
            return []
        self._skew_read_at[owner] = now_s
        rows, _ = await self._skewed(owner, now_ms, limit, skip)
        return [d.id for d in rows if (d.next_attempt_at_ms or 0) > now_ms]

    async def _unclaim(self, rows: list[Delivery]) -> None:
        """Release claims taken but not attempted (else they wait for their lease)."""
        if self.claims is not None and rows:
            try:
                await self.claims.release([d.id for d in rows])
            except Exception:  # they expire with their lease
                log.exception("releasing %d delivery claims failed", len(rows))

    def _custodian(self, claim: dict[str, CustodyRecord | None], d: Delivery) -> bool:
        """Does this region deliver ``d`` under ``claim`` (``custody.claimable()``)? As
        ``_due`` reads them: its own owner's rows while it keeps them, an adopted owner's
        for the endpoints rendezvous gives it, and an endpoint no longer in the registry
        is nobody's, so any custodian of the owner finishes (cancels) its rows."""
        if d.region not in claim:
            return False
        rec = claim[d.region]
        if rec is None or self.catalog.registry.endpoint(d.endpoint_id, d.tenant) is None:
            return True
        return self.custody.delivers(d.region, rec, d.endpoint_id)

    def _foreign(self, owner: str, rec: CustodyRecord) -> set[str]:
        """Endpoints of the registry whose ``owner`` deliveries another region delivers."""
        reg = self.catalog.registry
        return {
            eid
            for tenant in sorted(reg.tenant_ids())
            for eid in reg.endpoint_ids(tenant)
            if not self.custody.delivers(owner, rec, eid)
        }
