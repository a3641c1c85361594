"""Custody at run time: contact gossip, suspicion, custody records, and which owners'
deliveries this region may claim (the rules are core.custody's).

Owns the contact table (``heard``) and the readiness latch; writes custody records only
through the local write path. Never sends a delivery: the delivery worker asks
``claimable()`` and ``delivers()``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..config import Settings
from ..core.custody import CustodyRecord, custody_writes, lagging, suspected
from ..core.fence import Fence, adopts, fence_input
from ..core.fence import step as fence_step
from ..core.model import Delivery
from ..core.operational import region_transitions
from .operational import OperationalEvents
from .ports import Clock, Store
from .state import Catalog, DeliveryQueue, PeerStatus
from .writepath import WritePath

__all__ = ["Custody"]

log = logging.getLogger("regionsync.custody")


class Custody:
    """Custody of this node's region and of the regions it adopted.

    ``counters`` (the node's shared table) gains ``custody_changes`` (records written
    here), ``deliveries_adopted`` (other regions' deliveries this region attempted first
    under custody) and ``deliveries_handed_back`` (own pending deliveries found held by
    successors at hand-back) and ``custody_fences`` (times this region fenced itself).

    The lease fence (core.fence): a region that heard no peer directly for
    ``failover_after_s - fence_margin_s`` claims no delivery (own or adopted) until it is
    caught up with a peer again, or until the fence lapses after ``fence_hold_s``; an
    adopter releases an owner it hears again until that owner hands back (at most
    ``failover_after_s``).
    """

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        writer: WritePath,
        queue: DeliveryQueue,
        peers: Mapping[str, PeerStatus],
        counters: dict[str, int],
        *,
        store: Store,
        clock: Clock,
        ops: OperationalEvents | None = None,
    ):
        self.region, self.opts, self.ops = settings.region, settings.replication, ops
        self._suspected: frozenset[str] = frozenset()  # as of the last step
        self._claimable: frozenset[str] = frozenset()  # owners claimable at the last step
        self.catalog, self.writer, self.queue = catalog, writer, queue
        self.peers, self.counters, self.store, self.clock = peers, counters, store, clock
        for name in (
            "custody_changes",
            "deliveries_adopted",
            "deliveries_handed_back",
            "custody_fences",
        ):
            counters.setdefault(name, 0)
        self.heard: dict[str, int] = {}  # region -> latest contact ms (own or gossiped)
        self.direct_ms = 0  # latest message from any peer itself (renews the fence lease)
        self.fence = Fence()
        self.fencing = True  # off in a multi-process region (its processes share no contact)
        self._heard_again: dict[str, int] = {}  # adopted owner -> since when heard again
        self.started_ms = 0
        self.ready = not peers  # latched once caught up with every unsuspected peer
        self._adopted_seen: dict[str, None] = {}  # delivery ids counted as adopted

    def start(self) -> None:
        self.started_ms = self.clock.wall_ms()

    # -- contact gossip ------------------------------------------------------------------

    def contact(self, region: str) -> None:
        """A message from ``region`` arrived now."""
        now = self.clock.wall_ms()
        self.heard[region] = max(self.heard.get(region, 0), now)
        self.direct_ms = max(self.direct_ms, now)

    def gossip(self) -> dict[str, int]:
        """The contact table to send a peer (this region heard from itself now)."""
        return {**self.heard, self.region: self.clock.wall_ms()}

    def merge_gossip(self, heard: Mapping[str, int]) -> None:
        """Merge a peer's contact table (max per region; our own entry is ignored). A
        contact time past this clock's now (gossiped by a clock that ran ahead) counts
        as now: kept, it would hide that region's silence for the skew (issue 41)."""
        now = self.clock.wall_ms()
        for region, ms in heard.items():
            if region != self.region and region in self.peers:
                self.heard[region] = max(self.heard.get(region, 0), min(int(ms), now))

    def suspects(self) -> frozenset[str]:
        return suspected(
            self.clock.wall_ms(),
            self.peers,
            self.heard,
            self.started_ms,
            int(self.opts.failover_after_s * 1000),
        )

    # -- decisions -----------------------------------------------------------------------

    def caught_up(self, suspects: frozenset[str]) -> bool:
        """This node is connected to each unsuspected peer and holds every record the
        peer's Hello said it held (the peer's own and this node's actor excepted, and
        records it refused: core.custody.lagging)."""
        vv = self.writer.durable_vv
        for name, p in self.peers.items():
            if name in suspects:
                continue
            if p.hello_vv is None or not p.connected:
                return False
            exclude = (p.actor or "", self.writer.actor)
            if lagging(vv, p.hello_vv, exclude):
                return False
        return True

    def records(self) -> dict[str, CustodyRecord]:
        return self.catalog.custody

    def custodian(self, d: Delivery) -> str:
        """The region that delivers ``d`` now: its owner ``d.region`` unless the owner's
        custody record hands it to another live region (core.custody)."""
        rec = self.records().get(d.region)
        return d.region if rec is None else rec.custodian(d.region, d.endpoint_id)

    def claimable(self) -> dict[str, CustodyRecord | None]:
        """owner region -> its record (None: own, undisputed) for every owner whose
        deliveries this node may claim now (adopted ones only for the endpoints
        ``delivers`` accepts; none while fenced, an adopted owner not while released:
        core.fence)."""
        suspects, now = self.suspects(), self.clock.wall_ms()
        if not self.ready or self.fenced(suspects):
            return {}  # fenced: neither its own nor adopted ones (it may be the cut-off one)
        out: dict[str, CustodyRecord | None] = {}
        release_ms = int(self.opts.failover_after_s * 1000)
        adopted = {
            owner for owner, rec in self.records().items()
            if owner != self.region and owner not in rec.live and self.region in rec.live
        }  # fmt: skip
        for owner in [o for o in self._heard_again if o not in adopted]:
            del self._heard_again[owner]  # handed back (or given to another region)
        for owner, rec in self.records().items():
            if owner in adopted:
                if owner in suspects:
                    self._heard_again.pop(owner, None)
                else:
                    self._heard_again.setdefault(owner, now)
                if adopts(owner in suspects, self._heard_again.get(owner), now, release_ms):
                    out[owner] = rec
        mine = self.records().get(self.region)
        if mine is None or self.region in mine.live:
            out[self.region] = None
        return dict(sorted(out.items()))

    def fenced(self, suspects: frozenset[str] | None = None) -> bool:
        """Step the lease fence (core.fence) to now; True while this region is fenced.
        Logs and counts each transition."""
        if not self.peers or not self.fencing:
            return False
        opts, now = self.opts, self.clock.wall_ms()
        lease_ms = int((opts.failover_after_s - opts.fence_margin) * 1000)
        hold_ms = int(opts.fence_hold * 1000)
        args = (now, self.direct_ms, self.started_ms, lease_ms, hold_ms)
        event = fence_input(self.fence, *args, False)
        if event == "heard" and self.fence.fenced:  # only a fenced region asks (a scan)
            caught_up = self.caught_up(self.suspects() if suspects is None else suspects)
            event = fence_input(self.fence, *args, caught_up)
        self.fence, action = fence_step(self.fence, event, now)
        silent_s = (now - max(self.direct_ms, self.started_ms)) / 1000
        if action == "fence":
            self.counters["custody_fences"] += 1
            log.warning(
                "fenced: no peer heard for %.1f s (lease: failover_after_s - fence_margin_s = "
                "%.1f s); no new attempts of this region's deliveries until a peer is heard "
                "and this region is caught up", silent_s, lease_ms / 1000,
            )  # fmt: skip
        elif action == "unfence":
            log.warning("unfenced: a peer heard and caught up; own deliveries resume")
            self.queue.add()
        elif action == "lapse":
            log.warning(
                "fence lapsed: no peer heard for %.1f s; delivering own deliveries again "
                "(perhaps the last region alive; those pending at the cut may go out twice)",
                silent_s,
            )
            self.queue.add()
        return self.fence.fenced

    def delivers(self, owner: str, rec: CustodyRecord | None, endpoint_id: str) -> bool:
        return rec is None or rec.custodian(owner, endpoint_id) == self.region

    def runs(self, owner: str, endpoint_id: str) -> bool:
        """Is this region the custodian of ``owner``'s work for ``endpoint_id`` now?"""
        claim = self.claimable()
        return owner in claim and self.delivers(owner, claim[owner], endpoint_id)

    def adopted(self, delivery_id: str) -> None:
        """An adopted delivery is attempted here (counted once per delivery)."""
        if delivery_id not in self._adopted_seen:
            self._adopted_seen[delivery_id] = None
            self.counters["deliveries_adopted"] += 1
            if len(self._adopted_seen) > 100_000:
                self._adopted_seen.pop(next(iter(self._adopted_seen)))

    async def step(self) -> int:
        """Decide once: latch readiness, wake the claim loop for an owner claimable since
        the last step, write the custody records core.custody asks for. Returns how many
        records were written."""
        suspects = self.suspects()
        if self.ops is not None:  # once per change of this region's suspicion
            for change, region in region_transitions(self._suspected, suspects):
                self.ops.emit(change, {"peer": region, "last_heard_ms": self.heard.get(region)})
        self._suspected = suspects
        self.fenced(suspects)
        caught_up = self.caught_up(suspects)
        if caught_up and not self.ready:
            self.ready = True
            self.queue.add()
        owners = frozenset(self.claimable())
        if owners - self._claimable:  # by time: an owner suspected, or taken up after release
            self.queue.add()
        self._claimable = owners
        writes = custody_writes(
            self.region, self.peers, suspects, self.records(), caught_up, self.clock.wall_ms()
        )
        if not writes:
            return 0
        if self.region in writes:
            pending = await self.store.pending_count(self.region)
            self.counters["deliveries_handed_back"] += pending
            # successors finished some while we were away
            self.queue.recount(pending, await self.store.pending_by_tenant(self.region))
        async with self.writer.local_lock():
            stamp = self.writer.stamp()
            deltas: dict[str, Any] = {}
            for owner, rec in writes.items():
                deltas.update(
                    self.catalog.registry.set_custody(owner, rec, self.writer.actor, stamp)
                )
            durable = self.writer.commit_local("registry", stamp, deltas)
        await durable
        for owner, rec in writes.items():
            log.warning(
                "custody of %s: %s (suspected: %s)",
                owner,
                "handed back" if owner in rec.live else f"adopted by {list(rec.live)}",
                sorted(suspects) or "none",
            )
        self.counters["custody_changes"] += len(writes)
        self.queue.add()
        return len(writes)

    async def run(self) -> None:
        while True:
            await self.clock.sleep(self.opts.custody_interval_s)
            try:
                await self.step()
            except Exception:
                log.exception("custody step failed; retrying")

    def view(self) -> dict[str, Any]:
        """Custody as ``/v1/cluster`` shows it (times in ms; the API renders them)."""
        suspects = self.suspects()
        return {
            "ready": self.ready,
            "fenced": self.fenced(suspects),
            "fenced_since_ms": self.fence.since_ms,
            "fences": self.counters["custody_fences"],
            "suspected": sorted(suspects),
            "last_heard_ms": dict(sorted(self.heard.items())),
            "records": {
                owner: {
                    "live": list(rec.live),
                    "since_ms": rec.since_ms,
                    "by": rec.by,
                    "state": "own" if owner in rec.live else "adopted",
                }
                for owner, rec in self.records().items()
            },
        }
