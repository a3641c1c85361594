"""Event retention of one region: deletes the events (and their payloads) received more
than ``delivery.event_retention_s`` ago whose deliveries are all final, with those
deliveries and their attempts (the store decides per batch: ``Store.purge_events``).

Each region applies its own setting to its own stored rows; nothing is replicated. The
anti-entropy hash tree forgets what was deleted, and a state item from a peer that still
holds such an event or final delivery is not merged back (``expired``), so a repair pass
never resurrects it. Never deletes a pending delivery or anything younger than the
retention; 0 keeps events forever. Runs in bounded batches with a yield to the event loop
between them, as the attempt retention does (``runtime/recovery.py``).
"""

from __future__ import annotations

import asyncio
import logging

from ..config import Settings
from ..core.model import Delivery, Event
from .antientropy import AntiEntropy
from .ports import Clock, Store

__all__ = ["EventRetention"]

log = logging.getLogger("regionsync.node")

BATCH = 500  # events per transaction: short, so commits and deliveries go on between


class EventRetention:
    """``run()`` deletes what the retention lets go; ``counters`` (the node's table)
    counts it as ``retention_events_deleted``, ``retention_deliveries_deleted`` and
    ``retention_attempts_deleted`` (``/metrics``: ``regionsync_<name>``)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        clock: Clock,
        anti_entropy: AntiEntropy,
        counters: dict[str, int],
    ):
        opts = settings.delivery
        self.retention_ms = int((opts.event_retention_s or 0) * 1000)
        # tenant -> its own retention (ms; 0: forever), instead of ``retention_ms``
        self.by_tenant_ms = {t: int(v * 1000) for t, v in opts.event_retention_by_tenant_s.items()}
        self.store, self.clock, self.anti_entropy, self.counters = (
            store,
            clock,
            anti_entropy,
            counters,
        )
        for name in ("events", "deliveries", "attempts"):
            counters.setdefault(f"retention_{name}_deleted", 0)
        anti_entropy.expired = self.expired

    def cutoff_ms(self, tenant: str | None = None) -> int | None:
        """Events of ``tenant`` (None: of a tenant without its own retention) received
        before this may go; None: kept forever."""
        keep = self.by_tenant_ms.get(tenant, self.retention_ms) if tenant else self.retention_ms
        return None if keep <= 0 else self.clock.wall_ms() - keep

    def passes(self) -> list[tuple[int, str | None, tuple[str, ...]]]:
        """``(cutoff, tenant, skip)`` of each purge pass: one per tenant with its own
        retention, then one for every other tenant."""
        out: list[tuple[int, str | None, tuple[str, ...]]] = []
        for tenant in sorted(self.by_tenant_ms):
            cutoff = self.cutoff_ms(tenant)
            if cutoff is not None:
                out.append((cutoff, tenant, ()))
        cutoff = self.cutoff_ms()
        if cutoff is not None:
            out.append((cutoff, None, tuple(sorted(self.by_tenant_ms))))
        return out

    def expired(self, item: Event | Delivery) -> bool:
        """Whether a peer's state item is one the retention deleted (or would delete) here:
        an event received before its tenant's cutoff, or a final delivery created before
        it."""
        cutoff = self.cutoff_ms(item.tenant)
        if cutoff is None:
            return False
        if isinstance(item, Event):
            return item.received_at_ms < cutoff
        return item.status.final and item.created_at_ms < cutoff

    async def run(self, batch: int = BATCH, max_batches: int = 1_000_000) -> tuple[int, int, int]:
        """Delete in batches until nothing more may go (at most ``max_batches`` per pass);
        returns (events, deliveries, attempts) deleted and logs them when there were any."""
        total = [0, 0, 0]
        for cutoff, tenant, skip in self.passes():
            for _ in range(max_batches):
                async with self.anti_entropy.building:  # no tree build reads the store now
                    eids, dids, n = await self.store.purge_events(cutoff, batch, tenant, skip)
                    self.anti_entropy.forget(eids, dids)
                for i, (name, k) in enumerate(
                    (("events", len(eids)), ("deliveries", len(dids)), ("attempts", n))
                ):
                    total[i] += k
                    self.counters[f"retention_{name}_deleted"] += k
                if not eids:
                    break
                await asyncio.sleep(0)
        events, deliveries, attempts = total
        if events:
            log.info(
                "retention: deleted %d events, %d deliveries and %d attempts",
                events, deliveries, attempts,
            )  # fmt: skip
        return events, deliveries, attempts
