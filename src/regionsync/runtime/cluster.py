"""The cluster view: this node's replication state towards each peer, as
``GET /v1/cluster`` and the metrics show it. Reads only; owns nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.peering import repair_backoff
from .cohort import Cohort
from .custody import Custody
from .ports import Clock
from .registry_hash import RegistryHash
from .replica import Replica
from .state import Catalog, PeerStatus
from .writepath import WritePath

__all__ = ["ClusterView"]


class ClusterView:
    """Read-only view over the write path, the replica, the catalog and the peers."""

    def __init__(
        self,
        region: str,
        writer: WritePath,
        replica: Replica,
        catalog: Catalog,
        peers: Mapping[str, PeerStatus],
        custody: Custody,
        clock: Clock,
    ):
        self.region, self.writer, self.replica = region, writer, replica
        self.catalog, self.peers, self.custody, self.clock = catalog, peers, custody, clock
        self.cohort: Cohort | None = None  # set by the node when the store is shared
        self.registry_hash = RegistryHash(catalog, clock)  # cached off the loop (issue 42)

    async def process(self) -> dict[str, Any]:
        """This process among its region's (``process`` of ``GET /v1/cluster``):
        ``actor``; ``holder`` (the process's name, ``host/pid/random``; None when it is the
        region's only process: a store not shared); ``replication_role`` (it runs the
        gRPC links, anti-entropy and the jobs now: always for a sole process);
        ``processes``: ``[{holder, replication_role}]`` of the processes connected to the
        shared database now, by holder (Coordinator.processes), None for a sole process.
        Raises the database's errors when it cannot be asked."""
        if self.cohort is None:
            return {"actor": self.writer.actor, "holder": None, "replication_role": True,
                    "processes": None}  # fmt: skip
        coordinator = self.cohort.coordinator
        return {
            "actor": self.writer.actor,
            "holder": coordinator.holder,
            "replication_role": self.cohort.leading,
            "processes": [
                {"holder": h, "replication_role": role} for h, role in await coordinator.processes()
            ],
        }

    def records_behind(self, peer: PeerStatus) -> int:
        """Records this node holds that ``peer`` has not acknowledged (its own excluded)."""
        return sum(
            max(seq - peer.acked.get(origin, 0), 0)
            for origin, seq in self.writer.durable_vv.items()
            if origin != peer.actor
        )

    def repair(self, p: PeerStatus) -> dict[str, Any]:
        """Anti-entropy towards ``p``: ``wanted`` (a digest differed), ``futile`` (passes
        in a row that left the digests differing) and ``backoff_s`` (seconds left before
        the next pass may start; 0: none)."""
        wait = 0.0
        if p.last_repair_at is not None and p.futile_repairs:
            interval = self.writer.settings.replication.digest_interval_s
            due = p.last_repair_at + repair_backoff(p.futile_repairs, interval)
            wait = max(due - self.clock.monotonic(), 0.0)
        return {"wanted": p.repair_wanted, "futile": p.futile_repairs, "backoff_s": wait}

    def cluster(self) -> dict[str, Any]:
        """The ``GET /v1/cluster`` answer (docs/api.md; times as ms, the API renders them)."""
        now = self.clock.wall_ms()
        caps = self.writer.capabilities.view()
        heard: dict[str, Any] = caps.pop("peers")  # type: ignore[assignment]
        registry_hash, age = self.registry_hash.read()
        return {
            "region": self.region,
            # release, features read, the cluster's effective set (core.capabilities)
            "capabilities": caps,
            "actor": self.writer.actor,
            "incarnation": self.writer.incarnation,
            "version_vector": dict(sorted(self.writer.durable_vv.items())),
            "log_floor": dict(sorted(self.replica.log_floor.items())),
            # O(1) (issue 42): the order-free digest kept by every apply, and the sorted
            # hash that earlier releases compare, cached (its age: 0 when current)
            "registry_digest": self.catalog.registry.digest(),
            "registry_hash": registry_hash,
            "registry_hash_age_s": round(age, 3),
            # what this node refused of each origin (issue 41): the receiving side
            "refused": self.replica.refusals_view(),
            "peers": [
                {
                    "region": p.region,
                    "address": p.address,
                    "connected": p.connected,
                    "records_behind": self.records_behind(p),
                    "last_ack_at_ms": p.last_ack_at_ms,
                    "seconds_since_ack": None
                    if p.last_ack_at_ms is None
                    else (now - p.last_ack_at_ms) / 1000,
                    "last_contact_at_ms": p.last_contact_at_ms,
                    "seconds_since_contact": None
                    if p.last_contact_at_ms is None
                    else (now - p.last_contact_at_ms) / 1000,
                    "last_error": p.last_error,
                    # issue 12 item 3: state roots compared at equal version vectors
                    "state_agrees": p.state_agrees,
                    "last_digest_at_ms": p.last_digest_at_ms,
                    # what the peer refused of each origin and moved past: the sending side
                    "refused": {o: dict(n) for o, n in sorted(p.refused.items())},
                    "repair": self.repair(p),
                    # its last Hello's release and features (null: not heard since start)
                    "version": heard[p.region]["version"] if p.region in heard else None,
                    "features": heard[p.region]["features"] if p.region in heard else None,
                }
                for p in self.peers.values()
            ],
            "custody": self.custody.view(),
            "clock": self.clock_view(),
        }

    def clock_view(self) -> dict[str, Any]:
        """This clock against the cluster's (core/clock_offset.py): ``status`` (ok or
        suspect), ``error_ms`` (this clock minus the reference), ``correction_ms`` (added
        to stamps' physical time), ``reference`` (whose clock), ``offsets_ms`` (peer ->
        its clock minus this one), ``stamps_ahead_ms`` (origin -> how far past physical
        time + max_drift_ms its last such record was stamped), ``hlc_rebases``."""
        w = self.writer
        repl = w.settings.replication
        v = w.clock_view
        return {
            "status": v.status, "error_ms": v.error_ms, "correction_ms": v.correction_ms,
            "reference": v.reference or self.region, "offsets_ms": dict(v.offsets),
            "suspect_ms": repl.clock_suspect_ms, "max_drift_ms": repl.max_drift_ms,
            "stamps_ahead_ms": dict(sorted(w.stamps_ahead.items())),
            "hlc_rebases": w.hlc_rebases,
        }  # fmt: skip
