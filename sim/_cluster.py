"""N regions of the real Node runtime over simulated adapters, with crash and lost disk.

A crash stops the Node object (its tasks die, its transport closes) and keeps the
MemoryStore, like a process whose disk survives; a restart builds a new Node over the same
store. A lost disk wipes the store first, so the region comes back as a new incarnation.
A restore puts back an older copy of the store (``snapshot``), as from a backup: same
incarnation, fewer records than its peers have seen.
"""

from __future__ import annotations

import asyncio
import copy
import random
from dataclasses import dataclass, field
from typing import Any

import httpx

from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.sender import GuardedTransport, HttpxSender
from regionsync.adapters.system import UlidSource
from regionsync.config import load_settings
from regionsync.core.capabilities import ALL
from regionsync.core.model import WriteBatch
from regionsync.runtime.node import Node

from ._net import SimNetwork
from ._receivers import ReceiverTransport
from ._world import SimClock, derive_rng

__all__ = ["SimCluster", "SimRegion", "SimResolver"]


class SimResolver:
    """Every receiver host resolves to one public address (never contacted)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        return ["93.184.216.34"]


class SimStore:
    """MemoryStore whose commits take virtual time (an fsync), so a crash can land while a
    group commit is in flight. Everything else is delegated (``wipe`` included)."""

    def __init__(self, inner: MemoryStore, rng: random.Random, fsync_s: tuple[float, float]):
        self.inner, self.rng, self.fsync_s = inner, rng, fsync_s

    async def commit(self, batch: WriteBatch) -> None:
        await asyncio.sleep(self.rng.uniform(*self.fsync_s))
        await self.inner.commit(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class SimRegion:
    name: str
    store: SimStore
    clock: SimClock
    node: Node | None = None
    boots: int = 0
    wipes: int = 0
    restores: int = 0  # older copies of the store put back (``crash(restore=...)``)
    incarnations: list[int] = field(default_factory=list)
    reads: frozenset[str] = ALL  # the features its next boot reads (a rolling upgrade)
    # origin region -> its records this region refused, over every boot (check_refusals)
    refused: dict[str, int] = field(default_factory=dict)
    state_rejected: int = 0

    @property
    def up(self) -> bool:
        return self.node is not None and self.node.started


class SimCluster:
    """Builds and runs the regions; ``node_classes`` may swap a region's Node class."""

    def __init__(
        self,
        seed: int,
        names: list[str],
        net: SimNetwork,
        receivers: ReceiverTransport,
        clocks: dict[str, SimClock],
        node_classes: dict[str, type[Node]] | None = None,
        fsync_s: tuple[float, float] = (0.0005, 0.005),
        replication: dict[str, float] | None = None,
        delivery: dict[str, object] | None = None,
        ingest: dict[str, object] | None = None,
    ):
        self.replication = {"batch_records": 32, **(replication or {})}
        self.delivery = dict(delivery or {})
        self.ingest = dict(ingest or {})
        self.seed = seed
        self.net = net
        self.receivers = receivers
        self.node_classes = node_classes or {}
        self.force_new_form = False  # pin each node's written set to what it reads
        self.rebased: set[str] = set()  # actors whose HLC restarted in any boot (harvest)
        self.regions = {
            n: SimRegion(
                n, SimStore(MemoryStore(), derive_rng(seed, "disk", n), fsync_s), clocks[n]
            )
            for n in names
        }
        self.resolver = SimResolver()
        # the sender's destination guard, as in production, in front of the receivers
        self.client = httpx.AsyncClient(
            transport=GuardedTransport(self.resolver, inner=receivers),
            timeout=None, follow_redirects=False, trust_env=False,
        )  # fmt: skip

    def _build(self, r: SimRegion) -> Node:
        settings = load_settings(
            None,
            region=r.name,
            peers=[{"region": p, "address": p} for p in self.regions if p != r.name],
            replication=self.replication,
            delivery=self.delivery,
            ingest=self.ingest,
        )
        rng = derive_rng(self.seed, "node", r.name, r.boots)
        cls = self.node_classes.get(r.name, Node)
        extra: dict[str, Any] = {"reads": r.reads} if r.reads != ALL else {}
        node = cls(
            settings,
            store=r.store,
            clock=r.clock,
            rng=rng,
            ids=UlidSource(r.clock, derive_rng(self.seed, "ids", r.name, r.boots)),
            transport=self.net.transport(r.name),
            sender=HttpxSender(self.client, timer=r.clock.monotonic),
            resolver=self.resolver,
            **extra,
        )
        if self.force_new_form:
            node.capabilities.pin(r.reads)
        return node

    def harvest(self, r: SimRegion) -> None:
        """Add the running node's refusals to the region's totals, and note whether its
        HLC restarted (WritePath.stamp), before it stops."""
        if r.node is None:
            return
        if getattr(r.node.writer, "hlc_rebases", 0):  # 0: a release before it
            self.rebased.add(r.node.writer.actor)
        for origin, note in r.node.replica.refusals.items():
            region = origin.partition(":")[0]
            r.refused[region] = r.refused.get(region, 0) + note.count
        r.node.replica.refusals.clear()  # harvested once
        r.state_rejected += r.node.counters["state_rejected"]
        r.node.counters["state_rejected"] = 0

    async def boot(self, name: str) -> Node:
        r = self.regions[name]
        r.boots += 1
        node = self._build(r)
        await node.start()
        r.node = node
        r.incarnations.append(node.writer.incarnation)
        return node

    def snapshot(self, name: str) -> MemoryStore:
        """A copy of the region's store as it is now (what a backup would hold)."""
        return copy.deepcopy(self.regions[name].store.inner)

    async def crash(
        self, name: str, wipe: bool = False, restore: MemoryStore | None = None
    ) -> None:
        r = self.regions[name]
        self.harvest(r)
        node, r.node = r.node, None
        if node is not None and node.started:
            await node.stop(crash=True)
        if wipe:
            r.wipes += 1
            r.store.wipe()
        if restore is not None:
            r.restores += 1
            r.store.inner = copy.deepcopy(restore)

    async def stop_all(self) -> None:
        for name in sorted(self.regions):
            await self.crash(name)
        await self.client.aclose()

    def up(self) -> list[SimRegion]:
        return [r for _, r in sorted(self.regions.items()) if r.up]
