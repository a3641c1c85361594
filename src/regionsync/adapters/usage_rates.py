"""Cluster-wide publish rates of tenants for the API (``publish_rate_cluster_per_s`` in
tenant bodies): the replicated ``events_published`` PN-Counter sampled every
``SAMPLE_S`` seconds while the HTTP app runs, and on every read (core.rates)."""

from __future__ import annotations

import asyncio

from ..core.rates import CounterRate
from ..runtime.node import Node
from ..runtime.slicing import Slicer

__all__ = ["SAMPLE_S", "UsageRates"]

SAMPLE_S = 5.0  # seconds between samples of every tenant's counter
WINDOW_S = 60.0  # the rate is the mean over about this many seconds


class UsageRates:
    """Per tenant, a ``CounterRate`` of its ``events_published`` counter. Memory: one
    window (at most 64 samples) per live tenant; deleted tenants are dropped."""

    def __init__(self, node: Node):
        self.node = node
        self._rates: dict[str, CounterRate] = {}

    def sample(self) -> None:
        """Read every live tenant's counter now."""
        for tid in self._live():
            self._observe(tid, self.node.clock.monotonic())

    async def sample_in_slices(self) -> None:
        """``sample`` returning to the loop every 10 ms (runtime/slicing.py): 10k tenants
        took ~300 ms in one go (issue 42)."""
        slicer = Slicer(pause_ratio=0.0)
        for tid in self._live():  # (one deleted meanwhile is dropped by the next one)
            self._observe(tid, self.node.clock.monotonic())
            await slicer.tick()

    def _live(self) -> list[str]:
        """The live tenants, sorted; the rates of others dropped."""
        live = self.node.catalog.registry.tenant_ids()
        for tid in [t for t in self._rates if t not in live]:
            del self._rates[tid]
        return sorted(live)

    def rate(self, tenant_id: str) -> float | None:
        """Events/s accepted by all regions (as replicated here) over about the last
        minute; None until two samples a second apart exist (read it again shortly)."""
        self._observe(tenant_id, self.node.clock.monotonic())
        r = self._rates[tenant_id].rate()
        return None if r is None else round(r, 3)

    def _observe(self, tenant_id: str, now: float) -> None:
        rate = self._rates.get(tenant_id)
        if rate is None:
            rate = self._rates[tenant_id] = CounterRate(window_s=WINDOW_S)
        rate.observe(now, self.node.catalog.registry.usage(tenant_id, "events_published"))

    async def run(self) -> None:
        """Sample every ``SAMPLE_S`` seconds until cancelled."""
        while True:
            await self.sample_in_slices()
            await asyncio.sleep(SAMPLE_S)
