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
        self.retention_ms = int((settings.delivery.event_retention_s or 0) * 1000)
        self.store, self.clock, self.anti_entropy, self.counters = (
            store,
            clock,
            anti_entropy,
            counters,
        )
        for name in ("events", "deliveries", "attempts"):
            counters.setdefault(f"retention_{name}_deleted", 0)
        anti_entropy.expired = self.expired

    def cutoff_ms(self) -> int | None:
        """Events received before this may go; None: kept forever."""
        return None if self.retention_ms <= 0 else self.clock.wall_ms() - self.retention_ms

    def expired(self, item: Event | Delivery) -> bool:
        """Whether a peer's state item is one the retention deleted (or would delete) here:
        an event received before the cutoff, or a final delivery created before it."""
        cutoff = self.cutoff_ms()
        if cutoff is None:
            return False
        if isinstance(item, Event):
            return item.received_at_ms < cutoff
        return item.status.final and item.created_at_ms < cutoff

    async def run(self, batch: int = BATCH, max_batches: int = 1_000_000) -> tuple[int, int, int]:
        """Delete in batches until nothing more may go (at most ``max_batches``); returns
        (events, deliveries, attempts) deleted and logs them when there were any."""
        cutoff = self.cutoff_ms()
        if cutoff is None:
            return 0, 0, 0
        events = deliveries = attempts = 0
        for _ in range(max_batches):
            async with self.anti_entropy.building:  # no tree build reads the store meanwhile
                eids, dids, n = await self.store.purge_events(cutoff, batch)
                self.anti_entropy.forget(eids, dids)
            events, deliveries, attempts = events + len(eids), deliveries + len(dids), attempts + n
            self.counters["retention_events_deleted"] += len(eids)
            self.counters["retention_deliveries_deleted"] += len(dids)
            self.counters["retention_attempts_deleted"] += n
            if not eids:
                break
            await asyncio.sleep(0)
        if events:
            log.info(
                "retention: deleted %d events, %d deliveries, %d attempts received before %d",
                events, deliveries, attempts, cutoff,
            )  # fmt: skip
        return events, deliveries, attempts
