"""Removing a region for good (core/removal.py decides; this is its run-time part).

``remove`` writes the replicated removal record and the removed region's custody record
(its deliveries go to the remaining regions for good: it never hands them back).
``retired`` is the set of actors every remaining region has acknowledged; the replication
sessions leave them out of the version vectors they send and cover them in the ones they
receive (runtime/replication.py), and ``refusal`` says why a Hello is refused.

Gate (issue 40 capability negotiation): ``Removals.enabled`` is the one call site; the
previous release refuses the ``x/<region>`` key, so nothing is written or pruned on the
wire until every region announces ``REGION_REMOVAL``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from ..config import Settings
from ..core.custody import CustodyRecord
from ..core.removal import (
    REGION_REMOVAL,
    RETIRED_SEQ,
    ProcessMarker,
    RemovalRecord,
    compact,
    fill_retired,
    hello_refusal,
    incarnations,
    prune_vv,
    region_of,
    removal_problem,
    retired_actors,
    settled_counts,
    stopped_actors,
)
from ..errors import Conflict, NotFound
from .audit import audit_section
from .ports import Clock
from .state import Catalog, PeerStatus
from .writepath import WritePath

__all__ = ["Removals"]

log = logging.getLogger("regionsync.removal")


class Removals:
    """This node's removals: writes them, refuses removed regions, retires their actors."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        writer: WritePath,
        peers: Mapping[str, PeerStatus],
        clock: Clock,
        capability: Callable[[str, Iterable[str]], bool],
    ):
        self.region, self.catalog, self.writer = settings.region, catalog, writer
        self.peers, self.clock = peers, clock
        self.capability = capability  # core.capabilities: Negotiation.enabled_without
        self._retired: frozenset[str] = frozenset()
        self.refused = 0  # Hellos refused because their region was removed
        self._seen: dict[str, dict[str, int]] = {}  # peer -> max of its version vectors
        # this region's processes on PostgreSQL: (connected holders, incarnation -> holder)
        self.processes: Callable[[], Awaitable[tuple[frozenset[str], dict[int, str]]]] | None
        self.processes = None
        self._absent: dict[str, int] = {}  # actor -> ms its process was first seen gone
        self.grace_ms = int(settings.replication.failover_after_s * 1000)
        self._admitted: set[str] = set()  # wiped incarnations of removed regions, let in
        # the removal records and markers as last read: (their states, explicit retired
        # actors, region -> process marker); read again only when a state changed
        self._view: tuple[tuple[Any, ...], frozenset[str], dict[str, ProcessMarker]] = (
            (), frozenset(), {},
        )  # fmt: skip
        self.pruner: Any = None  # runtime/pruning.Pruner, run by ``run`` after ``publish``

    def _marks(self) -> tuple[frozenset[str], dict[str, ProcessMarker]]:
        """(actors the removal records and markers list, region -> process marker)."""
        registry = self.catalog.registry
        states = registry.removal_states()
        cached = self._view[0]
        if len(states) == len(cached) and all(a is b for a, b in zip(states, cached, strict=True)):
            return self._view[1], self._view[2]
        listed = set().union(*(rec.retired for rec in registry.removals().values()))
        markers = registry.process_markers()
        for marker in markers.values():
            listed.update(marker.retired)
        self._view = (states, frozenset(listed), markers)
        return self._view[1], markers

    def any_retired(self) -> bool:
        """True if any actor is retired (a removal record or a marker exists)."""
        return bool(self._retired or self.catalog.registry.has_removal_keys())

    def is_retired(self, actor: str) -> bool:
        """True if ``actor`` is retired for good: this node decided it, or a removal
        record or a stopped-process marker (its compacted part too) lists it."""
        return actor in self._retired or self.marked(actor)

    def marked(self, actor: str) -> bool:
        """True if a removal record or a stopped-process marker retires ``actor`` (the
        replicated marker every region reads: what pruning waits for)."""
        listed, markers = self._marks()
        if actor in listed:
            return True
        region = region_of(actor)
        marker = markers.get(region)
        return marker is not None and marker.covers(region, actor)

    def remaining_seen(self) -> dict[str, dict[str, int] | None]:
        """Each remaining peer's highest version vector sent (None: never heard)."""
        removed = self.removed()
        return {r: self._seen.get(r) for r in self.peers if r not in removed}

    def forget(self, actors: Iterable[str]) -> None:
        """Drop what is kept per actor once ``actors`` are pruned (runtime/pruning.py)."""
        for actor in actors:
            self._absent.pop(actor, None)
            for seen in self._seen.values():
                seen.pop(actor, None)

    def pruned_here(self, actor: str) -> bool:
        """True if ``actor`` is retired and no longer in this node's version vector."""
        return actor not in self.writer.version_vector and self.is_retired(actor)

    def enabled(self) -> bool:
        """The capability gate: True once every region reads removal records."""
        return self.enabled_removing(())

    def enabled_removing(self, regions: Iterable[str]) -> bool:
        """The gate once ``regions`` are removed too: the regions removed, or being
        removed, need not read removal records."""
        return self.capability(REGION_REMOVAL, {*self.removed(), *regions})

    def removed(self) -> dict[str, RemovalRecord]:
        return self.catalog.registry.removals()

    async def remove(self, name: str) -> RemovalRecord:
        """Remove region ``name`` for good: NotFound/Conflict for bad input, Conflict while
        a region's release cannot read removal records."""
        vv = self.writer.version_vector
        known = set(self.peers) | {region_of(a) for a in vv}
        problem = removal_problem(name, self.region, known, self.removed())
        if problem is not None:
            status, _code, detail = problem
            raise (NotFound if status == 404 else Conflict)(detail, field="name")
        if not self.enabled_removing((name,)):
            raise Conflict(f"a region does not support {REGION_REMOVAL} yet (upgrade it first)",
                           field="name", code="capability_missing")  # fmt: skip
        remaining = sorted({*self.peers, self.region} - {name})
        async with self.writer.local_lock():
            stamp, actor = self.writer.stamp(), self.writer.actor
            incs = incarnations(self.writer.version_vector, name)
            rec = RemovalRecord(name, incs[-1] if incs else 0, stamp.wall_ms, self.region,
                                actor, self.writer.version_vector.get(actor, 0))  # fmt: skip
            registry = self.catalog.registry
            deltas = {
                **registry.set_removal(rec, actor, stamp),
                **registry.set_custody(name, CustodyRecord(tuple(remaining), stamp.wall_ms,
                                                           self.region), actor, stamp),
            }  # fmt: skip
            durable = self.writer.commit_local(
                "registry", stamp, deltas, audit=audit_section("region.remove", f"region/{name}")
            )
        await durable
        log.warning("region %s removed for good (incarnation %d)", name, rec.incarnation)
        return rec

    def refusal(self, region: str, incarnation: int, vv: Mapping[str, int]) -> str | None:
        """Why a Hello from ``region`` is refused (a removed region with old state)."""
        actor = f"{region}:{incarnation}"
        # admitted: its first Hello was clean, or this node merged its records already
        admitted = actor in self._admitted or self.writer.version_vector.get(actor, 0) > 0
        reason = hello_refusal(self.removed(), region, incarnation, vv, admitted)
        if reason is None and region in self.removed():
            self._admitted.add(actor)
        if reason is not None:
            self.refused += 1
            log.warning("refused hello: %s", reason)
        return reason

    def retired(self) -> frozenset[str]:
        """The actors retired for good (grows only): those the removal records and the
        stopped-process markers list (some region decided them; read again after a
        restart), and those this node decides from its peers' version vectors."""
        if not self.enabled():
            return self._retired
        removed = self.removed()
        before = self._retired | self._marks()[0]
        if removed:
            acked = {r: self._seen.get(r) for r in self.peers if r not in removed}
            before = retired_actors(self.writer.version_vector, before, removed, acked)
        self._retired = frozenset(before)
        return self._retired

    async def publish(self) -> int:
        """Write the actors this node retired into their regions' removal records (the
        marker every region, and this one after a restart, reads), and its region's
        stopped processes' actors into ``p/<region>``; returns how many records."""
        retired, written = self.retired(), await self._retire_processes()
        for region, rec in self.removed().items():
            mine = tuple(sorted(a for a in retired if region_of(a) == region))
            if set(mine) <= set(rec.retired):
                continue
            async with self.writer.local_lock():
                stamp, actor = self.writer.stamp(), self.writer.actor
                done = replace(rec, retired=tuple(sorted({*rec.retired, *mine})))
                durable = self.writer.commit_local(
                    "registry", stamp, self.catalog.registry.set_removal(done, actor, stamp),
                    audit=audit_section("region.retire", f"region/{region}"),
                )  # fmt: skip
            await durable
            written += 1
            log.info("retired %s of removed region %s", ", ".join(mine), region)
        return written

    async def _retire_processes(self) -> int:
        """Retire the actors of this region's processes stopped for ``failover_after_s``
        once every remaining peer holds exactly this node's count of their records."""
        if self.processes is None or not self.enabled():
            return 0
        live, holders = await self.processes()
        vv, registry = self.writer.version_vector, self.catalog.registry
        stopped = stopped_actors(self.region, self.writer.actor, vv, holders, live,
                                 self._absent, self.clock.wall_ms(), self.grace_ms)  # fmt: skip
        old = self._marks()[1].get(self.region, ProcessMarker({}))
        stopped = {a for a in stopped if not old.covers(self.region, a)}
        new = settled_counts(stopped, vv, self.remaining_seen())
        # the processes not retired (kept below a compacted floor): every one allocated
        alive = {i for i in {*holders, self.writer.incarnation}
                 if not old.covers(self.region, f"{self.region}:{i}")}  # fmt: skip
        grown = ProcessMarker({**old.retired, **new}, old.floor, old.keep)
        marker = compact(grown, self.region, self.pruned_here, alive)
        if marker == old:
            return 0
        async with self.writer.local_lock():
            stamp, actor = self.writer.stamp(), self.writer.actor
            deltas = registry.set_process_retirements(self.region, marker, actor, stamp)
            durable = self.writer.commit_local(
                "registry", stamp, deltas, audit=audit_section("region.retire", "processes")
            )
        await durable
        if new:
            log.info("retired the actors of stopped processes %s", ", ".join(sorted(new)))
        return 1

    async def run(self, interval_s: float) -> None:
        """Publish retirements every ``interval_s`` (the replication role's task)."""
        while True:
            await self.clock.sleep(interval_s)
            try:
                await self.publish()
                if self.pruner is not None:
                    await self.pruner.prune()
            except Exception:  # a failed commit is retried at the next round
                log.exception("publishing or pruning retired actors failed")

    def outgoing(self, vv: Mapping[str, int]) -> dict[str, int]:
        """A version vector as Hello and Ack carry it: without the retired actors."""
        retired = self.retired()
        if not self.enabled():
            return prune_vv(vv, retired)
        return {a: n for a, n in vv.items() if a not in retired and not self.is_retired(a)}

    def _fill(self, vv: Mapping[str, int]) -> dict[str, int]:
        # a stopped process's actor at the count every region held (a process thought
        # stopped that writes again still has its later records pushed); the actors of
        # this node's version vector only: those are the origins it pushes
        retired = self.retired()
        if not self.enabled():
            return fill_retired(vv, retired)
        counts = self._marks()[1]
        out = dict(vv)
        for a in self.writer.version_vector:
            if a in retired or self.is_retired(a):
                marker = counts.get(region_of(a))
                n = marker.retired.get(a) if marker is not None else None
                out[a] = max(out.get(a, 0), RETIRED_SEQ if n is None else n)
        return out

    def incoming(self, peer: str, vv: Mapping[str, int]) -> dict[str, int]:
        """``peer``'s version vector (from its Hello, Ack or repair) with the retired
        actors covered; its entries are kept, by max, for the retirement decision (a
        peer that retired an actor first leaves it out of what it sends)."""
        seen = self._seen.setdefault(peer, {})
        for actor, n in vv.items():
            if n > seen.get(actor, 0):
                seen[actor] = n
        if peer in self.removed():  # a wiped, re-added region: it needs every record
            return dict(vv)
        return self._fill(vv)

    def view(self) -> dict[str, Any]:
        """For ``/v1/cluster``: the removed regions and the retired actors."""
        return {
            "removed": {r: rec.to_value() for r, rec in self.removed().items()},
            "retired_actors": sorted(self.retired()),
            "refused_hellos": self.refused,
            "pruned_actors": 0 if self.pruner is None else self.pruner.pruned_actors,
        }
