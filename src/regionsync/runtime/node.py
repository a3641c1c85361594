"""One regionsync node: wires its parts from the ports, starts and stops them.

The parts (each its own module) receive only what they use:

| part | owns |
|---|---|
| ``writer`` (writepath.WritePath) | lock, HLC, actor, version vectors, group commit, log wake-ups |
| ``capabilities`` (core.capabilities.Negotiation, on the writer) | the cluster's feature set |
| ``catalog`` (state.Catalog) | registry and subscription index |
| ``registry_ops`` (registry_ops.RegistryOps) | tenant, endpoint and source operations |
| ``event_types`` (event_types.EventTypeOps) | tenants' event-type catalogs |
| ``offload`` (offload.Offload) | threads for tenants' costly checks (schemas, filters), in turn |
| ``ingest`` (ingest.Ingest) | publish, inbound, Idempotency-Keys, admission, ack policies |
| ``recovery`` (recovery.Recovery) | retry, recover and replay-missing jobs, attempt purge |
| ``replica`` (replica.Replica) | applying peers' records, held-back records, truncation |
| ``anti_entropy`` (antientropy.AntiEntropy) | state tree, items, state merges |
| ``custody`` (custody.Custody) | contact gossip, suspicion, custody records (failover) |
| ``removals`` (removal.Removals) | regions removed for good, retired actors, refused Hellos |
| ``tokens`` (tokens.TokenOps) | API tokens: create, list, revoke |
| ``portal`` (portal.PortalOps) | consumer portal sessions: create, verify |
| ``view`` (cluster.ClusterView) | the ``/v1/cluster`` view |
| ``listing`` (listing.Listing) | newest-first list and search pages |
| ``delivery`` (delivery.DeliveryWorker) | attempts, lanes, health |
| ``ops`` (operational.OperationalEvents) | operational webhooks (queue, publishing task) |
| ``health_reports`` (health_reports.HealthReports) | endpoint health events for the cluster |
| ``telemetry`` (telemetry.Telemetry, on the writer) | latency histograms, spans |
| ``cohort`` (cohort.Cohort, processes sharing a database) | following the others, the role |

The node never touches a socket, a file or the system clock itself, so the simulator and
the production CLI run this same code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from ..config import Settings
from ..core.backpressure import tenant_backlog_limit
from ..core.capabilities import ALL, BASELINE, announced
from ..core.clock_offset import ClockView
from ..core.operational import clock_transition
from . import heap
from .antientropy import AntiEntropy
from .cluster import ClusterView
from .cohort import Cohort, Coordinator
from .custody import Custody
from .delivery import DeliveryWorker
from .event_types import EventTypeOps
from .health_reports import HealthReports
from .ingest import Ingest
from .links import Links
from .listing import Listing
from .offload import Offload
from .operational import OperationalEvents
from .portal import PortalOps
from .ports import Clock, IdSource, PeerTransport, Resolver, Rng, Sender, Store
from .pruning import Pruner
from .recovery import Recovery
from .registry_ops import RegistryOps
from .removal import Removals
from .replica import Replica
from .replication import PeerLink, serve_stream
from .retention import EventRetention
from .state import Catalog, DeliveryQueue, IdempotencyKeys, PeerStatus
from .tokens import TokenOps
from .writepath import ClusterClock, WritePath

__all__ = ["Node", "PeerStatus"]

STOP_TIMEOUT_S = 15.0  # a stop or a role change waits this long for its cancelled tasks
log = logging.getLogger("regionsync.node")


class Node:
    """A region's node. Construct with adapters, ``await start()``, ``await stop()``.

    The HTTP API calls the parts directly; their public coroutines raise
    ``regionsync.errors.ClientError`` subclasses for bad input or missing objects.

    With a ``coordinator`` (a PostgreSQL store shared by several processes of the region,
    runtime/cohort.py) the node writes as an actor of its own allocated at each start,
    follows the other processes' records, claims deliveries with a lease, and runs the
    replication role (gRPC server, peer links, anti-entropy, custody, truncation, jobs)
    only while it holds the region's lock.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        clock: Clock,
        rng: Rng,
        ids: IdSource,
        transport: PeerTransport,
        sender: Sender,
        resolver: Resolver,
        coordinator: Coordinator | None = None,
        reads: frozenset[str] = ALL,
    ):
        self.reads = reads  # the features this node reads (core.capabilities; tests restrict)
        self.settings, self.region = settings, settings.region
        self.store, self.clock, self.transport, self.sender = store, clock, transport, sender
        self._wire_shared(coordinator)
        self._wire_api_parts(rng, ids, resolver)
        self._wire_region_parts(rng, ids, coordinator)
        self._tasks: list[asyncio.Task[None]] = []
        self._role: list[asyncio.Task[None]] = []  # the replication role's tasks
        self.coordinator = coordinator
        self.cohort: Cohort | None = None
        if coordinator is not None:
            # the region's other processes may run another release: the baseline until
            # ``_local_reads`` finds none older than this one (README "Upgrading")
            self.capabilities.set_local(BASELINE)
            self.cohort = Cohort(
                settings, coordinator, self.writer, self.catalog, self.keys, store=store,
                clock=self.cluster_clock, start_role=self._start_role, stop_role=self._stop_role,
                tree_stale=self.anti_entropy.drop_tree, tree_kept=self.anti_entropy.kept,
            )  # fmt: skip
            self.view.cohort = self.cohort
            self.removals.processes = self._processes
            self.ingest.following = lambda: self.following
        self.health_reports: HealthReports | None = None
        if self.ops.enabled:  # no watcher when off (simulator traces stay as they were)
            self._wire_health_reports()
        self.started = False

    def _wire_health_reports(self) -> None:
        """Endpoint health events, once per transition for the cluster: reported by the
        endpoint's reporter among the regions this one does not suspect, by the process
        holding the replication role (runtime/health_reports.py)."""
        opts = self.settings.replication

        def live() -> list[str]:
            suspects = self.custody.suspects()
            return [self.region, *(p for p in self.peers if p not in suspects)]

        reports = HealthReports(
            self.region, self.catalog, self.ops, self.cluster_clock, live,
            lambda: self.cohort is None or self.cohort.leading,
            2 * opts.failover_after_s + opts.custody_interval_s,
        )  # fmt: skip
        self.catalog.watchers.append(reports.changed)
        self.delivery.recorder.reports = reports
        self.health_reports = reports

    def _wire_shared(self, coordinator: Coordinator | None) -> None:
        """What the parts share: counters, peer statuses, the catalog, the delivery queue,
        Idempotency-Keys and the write path."""
        settings, store, clock = self.settings, self.store, self.clock
        self.counters = dict.fromkeys(
            ("records_rejected", "clock_drift", "log_truncated", "state_rejected",
             "anti_entropy_items", "anti_entropy_passes", "ack_timeouts",
             "digest_mismatches", "unknown_fields"), 0,
        )  # fmt: skip
        self.peers = {p.region: PeerStatus(p.region, p.address) for p in settings.peers}
        opts = settings.ingest
        limit = tenant_backlog_limit(opts.backlog_capacity, opts.tenant_backlog_share)
        self.catalog = Catalog(decoded_keys=settings.registry.decoded_cache_keys)
        self.queue = DeliveryQueue(tenant_limit=limit)
        self.keys = IdempotencyKeys(
            store,
            opts.idempotency_cache_entries,
            # the filter sees this process's commits only: none beside other processes
            0 if coordinator is not None else opts.idempotency_filter_entries,
            int(opts.idempotency_ttl_s * 1000),
        )
        self.writer = writer = WritePath(settings, store, clock, self.catalog, self.reads)
        # the corrected clock every part shows outside; the raw one measures (README
        # "Clocks and conflicts", docs/design.md "The stamp rule")
        self.cluster_clock = ClusterClock(clock, writer)
        self.capabilities = writer.capabilities  # ``enabled(feature)`` for every part
        writer.commit_observers.append(self.keys.committed)  # durable rows: the store's
        self.telemetry = writer.telemetry

    def _wire_api_parts(self, rng: Rng, ids: IdSource, resolver: Resolver) -> None:
        """Operational events, the offload threads and the parts the API writes through:
        registry, event types, tokens, ingest."""
        settings, writer, opts = self.settings, self.writer, self.settings.ingest
        clock = self.cluster_clock
        parts: dict[str, Any] = {"store": self.store, "clock": clock}
        self.ops = OperationalEvents(settings, clock)
        writer.on_clock = self._clock_changed
        # CPU work whose cost a tenant controls (schemas, filters), off the event loop
        self.offload = Offload(opts.offload_threads, opts.offload_queue_per_tenant)
        self.registry_ops = RegistryOps(
            settings, self.catalog, writer, self.queue, rng=rng, ids=ids, resolver=resolver,
            offload=self.offload,
        )  # fmt: skip
        self.event_types = EventTypeOps(self.catalog, writer, self.offload)
        self.tokens = TokenOps(self.catalog, writer, rng=rng, ids=ids, clock=clock)
        self.portal = PortalOps(self.region, self.catalog, writer, rng=rng, ids=ids, clock=clock)
        self.ids = ids  # test events' ids (runtime/test_event.py)
        self.ingest = Ingest(
            settings, self.catalog, writer, self.queue, self.keys, self.peers,
            rng=rng, ids=ids, ops=self.ops, offload=self.offload, **parts,
        )  # fmt: skip
        self.ops.publish = self.ingest.publish_internal

    def _wire_region_parts(self, rng: Rng, ids: IdSource, coordinator: Coordinator | None) -> None:
        """Custody, recovery, replication (replica, anti-entropy, peer links), delivery and
        the listing and cluster views."""
        settings, store, writer = self.settings, self.store, self.writer
        clock, raw = self.cluster_clock, self.clock
        parts: dict[str, Any] = {"store": store, "clock": clock}
        self.custody = Custody(
            settings, self.catalog, writer, self.queue, self.peers, self.counters, ops=self.ops,
            **parts,
        )  # fmt: skip
        self.recovery = Recovery(
            settings, self.catalog, writer, self.queue, ids=ids, spawn=self._spawn,
            runs_here=self.custody.runs,
            runs_jobs=lambda: self.cohort is None or self.cohort.leading, **parts,
        )  # fmt: skip
        self.replica = Replica(
            settings, self.catalog, writer, self.keys, self.peers, self.counters, **parts
        )
        self.anti_entropy = AntiEntropy(
            settings, self.catalog, writer, self.replica, self.keys, self.queue, self.counters,
            store=store,
        )  # fmt: skip
        self.retention = EventRetention(settings, store, clock, self.anti_entropy, self.counters)
        self.listing = Listing(self.catalog, store)
        self.view = ClusterView(
            self.region, writer, self.replica, self.catalog, self.peers, self.custody, raw
        )
        self.delivery = DeliveryWorker(
            settings, self.catalog, writer, self.queue, self.custody, rng=rng, sender=self.sender,
            ops=self.ops, claims=coordinator, **parts,
        )  # fmt: skip
        self.removals = Removals(
            settings, self.catalog, writer, self.peers, clock, writer.capabilities.enabled_without
        )
        self.removals.pruner = Pruner(self.catalog, writer, store, self.removals, self.replica)
        self.links = Links(
            self.region, settings.replication, writer, store, self.replica, self.anti_entropy,
            self.peers, self.counters, self.ingest.notify_ack, raw, rng, self.transport,
            self.custody, self.removals,
        )  # fmt: skip

    async def _processes(self) -> tuple[frozenset[str], dict[int, str]]:
        """This region's connected processes and its process actors (removal.Removals)."""
        assert self.coordinator is not None
        live = frozenset(h for h, _ in await self.coordinator.processes())
        return live, await self.coordinator.actor_holders()

    @property
    def following(self) -> bool:
        """False while this process cannot read its region's records (runtime/cohort.py):
        it acknowledges no publish and is unready until it can again."""
        return self.cohort is None or self.cohort.following

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def start(self) -> None:
        """Open the store, load state, start serving peers, replicating and delivering."""
        store, writer = self.store, self.writer
        info = await store.open(self.region, new_incarnation=self.clock.wall_ms())
        incarnation, fresh = info.incarnation, info.fresh
        self.removals.pruner.born_ms = info.born_ms  # which retired actors it held
        if self.coordinator is not None:  # an actor of its own, never used before
            incarnation, fresh = await self.coordinator.allocate_actor(self.clock.wall_ms()), True
        # the version vector first: the registry read after it holds every record it
        # counts, even when another process of the region commits between the two reads
        vv = await store.load_version_vector()
        self.catalog.load(await store.load_registry())
        heap.settle(len(self.catalog.registry))  # not walked by every full collection
        if self.health_reports is not None:
            self.health_reports.load()
        self.view.registry_hash.read()  # a large registry's hash: in slices from now on
        writer.open(self.region, incarnation, vv, await store.load_usage_carry())
        writer.expect_peers([p.region for p in self.settings.peers], fresh)
        self.replica.log_floor = await store.load_log_floor()
        # the total is a kept count (no scan); per tenant one read of the pending index
        self.queue.recount(
            await store.pending_count(self.region), await store.pending_by_tenant(self.region)
        )
        self._spawn(writer.start_committer(self._on_commit_failure).run(), "committer")
        if self.settings.ingest.usage_record_ms > 0:
            self._spawn(writer.run_usage_records(), "usage-records")
        await writer.resume_hlc()
        self.custody.start()
        log.info(
            "node %s started (actor %s, %s store)",
            self.region, writer.actor, "fresh" if info.fresh else "existing",
        )  # fmt: skip
        if not writer.actor_checked.is_set():
            self._spawn(self._actor_check(), "actor-check")
        if self.cohort is None:
            await self._start_role()
        else:
            # the replication holder decides custody; the others deliver what it says
            self.custody.ready = True
            # its processes do not all hear the peers: no lease fence (README, failover)
            self.custody.fencing = False
            self._spawn(self.cohort.run_follow(), "follow")
            # what the region reads, before a Hello of the role it may take says it
            await self._check_local_reads()
            await self.cohort.step_leader()
            self._spawn(self.cohort.run_leader(), "replication-role")
            for coro, name in self._parts(role=False):
                self._spawn(coro, name)
        self.started = True

    def _parts(self, role: bool | None) -> list[tuple[Coroutine[Any, Any, None], str]]:
        """The background tasks in start order: the replication role's (``role`` True),
        the others (False) or all (None)."""
        parts = [
            (False, self._purge_loop, "purge"),
            (True, self.replica.run_truncation, "truncate"),
            (False, self.delivery.run, "delivery"),
            (True, self.custody.run, "custody"),
            (True, self.recovery.run, "jobs"),
        ]
        if self.ops.enabled:  # no task when off (simulator traces stay as they were)
            parts.append((False, self.ops.run, "operational"))
        if self.health_reports is not None:
            beat_s = self.settings.replication.custody_interval_s
            reports = self.health_reports
            parts.append((False, lambda: reports.run(beat_s), "health-reports"))
        if self.coordinator is not None:
            parts.append((False, self._local_reads, "local-reads"))
        if self.settings.peers:  # the anti-entropy tree, built once, then kept by commits
            parts.append((True, self.anti_entropy.warm, "state-tree"))
            parts.append((True, self._upgrade_watch, "upgrade-watch"))
            # retired actors of removed regions go into their removal records (runtime/removal.py)
            beat = self.settings.replication.heartbeat_s
            parts.append((True, lambda: self.removals.run(beat), "retire"))
        for peer in self.settings.peers:
            parts.append((True, PeerLink(self.links, self.peers[peer.region]).run,
                          f"peer-{peer.region}"))  # fmt: skip
        return [(fn(), name) for r, fn, name in parts if role is None or r == role]

    async def _start_role(self) -> None:
        """Serve peers and start replicating, anti-entropy, truncation, custody and jobs
        (raises OSError if the gRPC address cannot be bound). A single process (no
        cohort) starts every background task here, in the order it always had."""
        await self.transport.serve(lambda stream: serve_stream(self.links, stream))
        if self.cohort is None:
            for coro, name in self._parts(role=None):
                self._spawn(coro, name)
            return
        # what the previous holder did is in the store
        self.replica.log_floor = await self.store.load_log_floor()
        self.replica.held.clear()
        for coro, name in self._parts(role=True):
            self._role.append(asyncio.create_task(coro, name=name))

    async def _stop_role(self) -> None:
        """Stop what ``_start_role`` started (the role went to another process)."""
        role, self._role = self._role, []
        await _cancelled(role, "giving up the replication role")
        await self.transport.stop()
        for status in self.peers.values():
            status.connected = False
        # only the holder keeps the anti-entropy tree: without it this process's follow
        # rounds skip the delivery rows; built again from the store if the role comes back
        self.anti_entropy.drop_tree()

    async def stop(self, crash: bool = False) -> None:
        """Record the carried usage moves (not if ``crash``: the simulator's crash writes
        nothing more; a store that keeps a carry has them for the next start anyway),
        stop background tasks and the transport, then close the store."""
        if self.started and not crash:
            try:
                await asyncio.wait_for(self.writer.record_usage(), STOP_TIMEOUT_S)
            except Exception as exc:
                log.warning("usage moves not recorded at stop (the next start will): %r", exc)
        self.started = False
        await _cancelled(self._tasks, "stopping")
        self._tasks.clear()
        self.offload.close()
        await self._stop_role()
        if self.coordinator is not None:
            await self.coordinator.close()
        async with self.writer.lock:
            await self.store.close()

    def _clock_changed(self, before: ClockView, after: ClockView) -> None:
        """This clock's status changed (WritePath.peer_clock): log once, tell the owner."""
        event = clock_transition(before.status, after.status)
        if event is None:
            return
        log.warning(
            "clock %s: this clock is %d ms %s the cluster's reference (%s); stamps use %s",
            after.status, abs(after.error_ms), "ahead of" if after.error_ms > 0 else "behind",
            after.reference or "this region",
            "the reference" if after.correction_ms else "this clock",
        )  # fmt: skip
        self.ops.emit(event, {"error_ms": after.error_ms, "offsets_ms": dict(after.offsets)})

    def _on_commit_failure(self, exc: BaseException) -> None:
        # memory ran ahead of the store: go back to what is durable
        self._spawn(self._reload(), "reload")

    async def _reload(self) -> None:
        """Go back to the store's state, trying again every second until it can (the
        committer refuses every batch meanwhile: GroupCommitter.resume)."""
        while True:
            try:
                return await self._reload_once()
            except Exception:
                log.exception("reloading state from the store failed; trying again in 1 s")
                await self.clock.sleep(1.0)

    async def _reload_once(self) -> None:
        async with self.writer.lock:
            vv = await self.store.load_version_vector()  # first: as in start
            self.catalog.load(await self.store.load_registry())
            self.writer.version_vector, self.writer.durable_vv = dict(vv), dict(vv)
            self.writer.reload_usage(await self.store.load_usage_carry())
            self.keys.reset()
            self.replica.held.clear()
            # what this reload merged reached no commit observer: the tree is built again
            self.anti_entropy.drop_tree()
            if self.writer.committer is not None:  # refused every batch since the failure
                self.writer.committer.resume()
            log.warning("state reloaded from the store after a failed commit")

    async def _local_reads(self) -> None:
        """What the region's other processes read: the baseline while a session of an
        older release (or one that does not say) is on the store, else what this one
        reads (a newer release reads at least as much); re-checked every custody step."""
        while True:
            await self.clock.sleep(self.settings.replication.custody_interval_s)
            await self._check_local_reads()

    async def _check_local_reads(self) -> None:
        """One step of ``_local_reads`` (also at start, before the role: peers keep the
        features a Hello announced for the whole session)."""
        assert self.coordinator is not None
        caps = self.capabilities
        try:
            older = await self.coordinator.older_sessions()
        except Exception as exc:  # the store unreachable: keep what was decided
            log.warning("cannot list the region's sessions: %s", exc)
            return
        local = BASELINE if older else caps.reads
        if local != caps.local:
            log.warning("this region's processes read %s (older sessions: %s)",
                        sorted(local - BASELINE) or "the baseline", older[:5])  # fmt: skip
            caps.set_local(local)

    async def _upgrade_watch(self) -> None:
        """Report, once per episode, a cluster feature set held below what this node
        reads for ``replication.upgrade_held_back_after_s`` (core.capabilities)."""
        caps, after_s = self.capabilities, self.settings.replication.upgrade_held_back_after_s
        caps.start(self.clock.wall_ms())
        while True:
            await self.clock.sleep(min(after_s / 4, 60.0))
            due = caps.held_back_due(self.clock.wall_ms(), int(after_s * 1000))
            if due:
                log.warning(
                    "cluster feature set held back for %ss or more by %s (they lack %s)",
                    after_s, sorted(due), due,
                )  # fmt: skip
                self.ops.emit(
                    "cluster.upgrade_held_back",
                    {"regions": sorted(due), "missing": due,
                     "effective": announced(caps.effective)},
                )  # fmt: skip

    async def _actor_check(self) -> None:
        # local writes wait for every peer's Hello, at most actor_check_s (WritePath)
        await self.clock.sleep(self.settings.replication.actor_check_s)
        await self.writer.actor_check_expired()

    async def _purge_loop(self) -> None:
        interval = min(self.settings.ingest.idempotency_ttl_s / 4, 3600.0)
        while True:
            try:  # until filled, a publish with a new key reads the store
                await self.keys.fill(self.cluster_clock.wall_ms())
            except Exception:
                log.exception("filling the Idempotency-Key filter failed; retrying later")
            await self.clock.sleep(interval)
            try:
                await self.ingest.purge_idempotency()
                await self.recovery.purge_attempts()
                if self.cohort is None or self.cohort.leading:  # it holds the state tree
                    await self.retention.run()
            except Exception:
                log.exception("purge (keys, attempts or events) failed; retrying later")


async def _cancelled(tasks: list[asyncio.Task[None]], doing: str) -> None:
    """Cancel ``tasks`` and wait for them, at most ``STOP_TIMEOUT_S``: a task that ignores
    its cancellation must not hold a stop (and the store) or a role change forever; it
    is named in the log so that the bug can be found."""
    for t in tasks:
        t.cancel()
    if not tasks:
        return
    done, stuck = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
    for t in done:  # retrieved, as gather(return_exceptions=True) did
        if not t.cancelled():
            t.exception()
    if stuck:
        names = sorted(t.get_name() for t in stuck)
        log.error("%s: tasks %s did not end within %ss", doing, names, STOP_TIMEOUT_S)
