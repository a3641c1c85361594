"""The region's delivery worker: claims due deliveries, signs, sends, records, retries.

Claims the deliveries custody gives this region (runtime/custody.py): its own (the
origin's, or the region that started a retry/recovery generation) and, per endpoint, those
of regions it adopted. Every attempt's outcome is replicated, so a custodian that takes
over continues from the attempts made elsewhere. Attempts run concurrently up to
``delivery.concurrency`` per node, each endpoint within its lane and each tenant within
its cap (``delivery.tenant_max_in_flight`` or the tenant's ``delivery_max_in_flight``:
one tenant's flood leaves the rest to the others; core.lanes); what follows
an attempt is the pure ``core.retry.next_step`` and ``core.health.step``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from crdt import CRDT

from ..config import Settings
from ..core.health import Health, HealthPolicy, behind
from ..core.invariants import check
from ..core.lanes import Lane, TenantSlots, TokenBucket
from ..core.lanes import tenant_cap as cap_rule
from ..core.model import Delivery, DeliveryStatus, Event, WriteBatch
from ..core.registry import EndpointView, gen_live
from ..core.retry import DEADLINE_S
from .attempts import USER_AGENT, send_attempt
from .cohort import Claims
from .due import DueReads
from .operational import OperationalEvents
from .outcomes import Outcome, OutcomeRecorder
from .ports import Clock, CustodyView, LocalWriter, Rng, Sender, Store
from .ready import READ_AHEAD_ROWS, Reads, Ready, take_fresh
from .state import Catalog, DeliveryQueue
from .wakeup import sleep_until_due

__all__ = ["USER_AGENT", "DeliveryWorker"]

log = logging.getLogger("regionsync.delivery")
_CRASH_BACKOFF_S = 60.0
RECORDING_FACTOR = 4  # sent attempts awaiting their record per ``concurrency`` (64 x 4 = MAX_BATCH)
READ_AHEAD_S = 1.0  # rows read ahead are dropped (read again) once this old


class DeliveryWorker(DueReads):
    """Runs attempts for one node; ``run()`` loops until cancelled.

    With ``claims`` (several processes per region), due deliveries are claimed through
    it for ``delivery.claim_lease_s`` and renewed every third of it while their attempts
    run or wait to be recorded (so only a dead process's claims expire); those claimed
    but not started (a lane that filled meanwhile) are released at once.

    Without ``claims`` (one process per region), due deliveries and their events are read
    ahead into ``ready`` (``READ_AHEAD_ROWS x concurrency`` per read, one at a time, in the
    background; dropped after ``READ_AHEAD_S``), so a freed slot or token starts the next
    attempt without a query; a publish's deliveries join them by ``DeliveryQueue.hand_over``;
    a read that found nothing is not repeated while it holds (runtime/ready.py).

    Due deliveries are claimed round-robin across endpoints (``core.lanes.fair_order``),
    skipping endpoints whose lane is full (in-flight cap, rate limit, a failing endpoint's
    probe not yet due): a tarpit or a burst holds only its own lane, never the others.
    """

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        writer: LocalWriter,
        queue: DeliveryQueue,
        custody: CustodyView,
        *,
        store: Store,
        clock: Clock,
        rng: Rng,
        sender: Sender,
        ops: OperationalEvents | None = None,
        claims: Claims | None = None,
    ):
        self.custody, self.ops, self.claims = custody, ops, claims
        self.region, self.catalog, self.writer, self.queue = settings.region, catalog, writer, queue
        self.store, self.clock, self.rng, self.sender = store, clock, rng, sender
        self.opts = settings.delivery
        self.clock_tolerance_ms = settings.replication.clock_suspect_ms
        self.policy = HealthPolicy(
            failure_threshold=self.opts.failure_threshold,
            disable_after_s=self.opts.disable_after_s,
            probe_initial_s=self.opts.probe_initial_s,
            probe_max_s=self.opts.probe_max_s,
        )
        self.inflight: dict[str, str] = {}  # delivery id -> endpoint id
        self.slots: set[str] = set()  # of those, the ones holding a lane and tenant slot
        self.recording = 0  # of those, sent and waiting for their outcome to be durable
        # may a freed slot start something (else a success wakes no claim round)? From
        # what a round found: a delivery held back by a slot, the soonest a lane that ran
        # dry in its pass may go on
        self.slot_bound, self._slots, self._rate_wait = True, True, None
        self.lanes: dict[str, Lane] = {}
        self.tenants = TenantSlots()  # attempts in flight per tenant (core.lanes)
        self.recorder = OutcomeRecorder(
            self.region, catalog, writer, queue, store, clock, self.policy, ops,
            shared=claims is not None, linger_s=settings.ingest.commit_linger_ms / 1000,
        )  # fmt: skip
        self._tasks: dict[asyncio.Task[None], None] = {}  # ordered: deterministic cancel
        self._expired_at: float | None = None  # monotonic s of the last starvation check
        self._skew_read_at: dict[str, float] = {}  # DueReads._claimable_ahead's
        # without ``claims``: due deliveries read ahead with their events, not yet started
        # (in ``fair_order``), the monotonic s the first of them was read, and the read
        self.ready: Ready = {}
        self._ready_at, self._epoch = 0.0, 0
        self._fetch: asyncio.Task[None] | None = None
        self._handed: set[str] = set()  # fresh rows taken while ``_fetch`` was reading
        self.reads = Reads()  # when a read found nothing due (runtime/ready.py)
        catalog.watchers.append(self._registry_changed)
        writer.commit_observers.append(self._committed)

    def _registry_changed(self, changed: Mapping[str, CRDT]) -> None:
        """An endpoint's or a tenant's fields changed (rate, in-flight caps, pause...), or
        a custody record (another region's deliveries handed here, or this region's own
        handed back): claim again now, so the change counts at the next claim, also for a
        lane that waits on its bucket or cap (``_blocked`` reads the limits afresh)."""
        if any(key.startswith(("e/", "t/", "tenants", "c/")) for key in changed):
            self.queue.add()  # e.g. an endpoint resumed: its rows are due again

    def _committed(self, batch: WriteBatch) -> None:
        """Pending deliveries of another region that a custody record hands here arrived
        (the owner's records, replicated after the record): claim again now. A batch of
        this node's own records wakes nothing (it started or scheduled those rows)."""
        actor = self.writer.actor
        if all(r.origin == actor for r in batch.records):
            return
        custody, region = self.catalog.custody, self.region
        for d in batch.deliveries:
            rec = custody.get(d.region) if d.region != region else None
            if (
                rec is not None
                and d.status is DeliveryStatus.PENDING
                and rec.custodian(d.region, d.endpoint_id) == region
            ):
                self.queue.add()
                return

    async def run(self) -> None:
        recorder = asyncio.create_task(self.recorder.run())
        renewer = asyncio.create_task(self._renew_claims()) if self.claims else None
        self.queue.handoff = self.claims is None  # fresh deliveries come with no read
        try:
            while True:
                self.queue.wake.clear()
                soonest = await self._launch_due()
                if self.queue.wake.is_set():
                    continue  # attempts finished meanwhile: claim again, no sleep to plan
                if self._free() <= 0:  # every slot busy: the next one freed wakes us
                    await self.queue.wake.wait()
                    continue
                if self._fetch is not None:  # rows being read: they wake us
                    await self._fetch_or_wake()
                    if self.queue.wake.is_set():
                        continue
                    # the read found nothing to start: wait as planned below
                await sleep_until_due(self.queue.wake, self._next_due_ms, self.clock,
                                      self.opts.poll_interval_s, soonest)  # fmt: skip
        finally:
            self.queue.handoff = False
            self.queue.fresh.clear()
            tasks = list(self._tasks)
            if self._fetch is not None:
                tasks.append(self._fetch)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for t in (recorder, renewer):
                if t is not None:
                    t.cancel()
                    await asyncio.gather(t, return_exceptions=True)

    async def _fetch_or_wake(self) -> None:
        """Wait for a wake-up, or for the read under way (``_fetch``) to finish."""
        assert self._fetch is not None
        woken = asyncio.ensure_future(self.queue.wake.wait())
        try:
            await asyncio.wait((woken, self._fetch), return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()

    async def _renew_claims(self) -> None:
        """Every third of the lease, extend the claims of the attempts in flight."""
        lease_s = self.opts.claim_lease_s
        while True:
            await self.clock.sleep(lease_s / 3)
            if self.claims is not None and self.inflight:
                until = self.clock.wall_ms() + int(lease_s * 1000)
                try:
                    await self.claims.renew(list(self.inflight), until)
                except Exception:  # the next round tries again; the lease is longer
                    log.exception("renewing %d delivery claims failed", len(self.inflight))

    async def _next_due_ms(self) -> int | None:
        if self._quiet(None) and self.reads.quiet is not None:  # nothing due before this
            return self.reads.quiet.until_ms
        nxt = None
        for owner in self.custody.claimable():
            if (due_ms := await self.store.next_due_ms(owner)) is not None:
                nxt = due_ms if nxt is None else min(nxt, due_ms)
        return nxt

    def lane(self, endpoint_id: str, rate_per_s: float) -> Lane:
        lane = self.lanes.get(endpoint_id)
        if lane is None:
            lane = Lane(TokenBucket.new(rate_per_s, self.clock.monotonic()))
            self.lanes[endpoint_id] = lane
        return lane

    def tenant_cap(self, tenant: str) -> int:
        """The tenant's cap on attempts in flight here (its override or the default)."""
        return cap_rule(self.opts.tenant_max_in_flight, self.catalog.registry.delivery_cap(tenant))

    def _blocked(self, now_s: float, now_ms: int) -> tuple[set[str], float | None]:
        """Endpoints whose lane cannot start an attempt now, and the soonest (seconds) a
        rate-limited or probing one could; ``_slots`` if a cap holds one back."""
        blocked: set[str] = set()
        soonest: float | None = None
        idle: list[str] = []
        for eid, lane in self.lanes.items():
            view = self.catalog.registry.endpoint(eid)
            if view is not None:  # a changed rate counts now, also for a lane waiting on it
                lane.bucket.retune(view.rate_limit_per_s, now_s)
            health = self.queue.health.get(eid)
            failing = health is not None and health.state == "failing"
            wait = lane.wait_s(now_s)
            if lane.inflight == 0 and not failing and wait == 0:
                # an idle lane its bucket lets start blocks nothing; a full one is forgettable
                if lane.bucket.tokens >= lane.bucket.burst:
                    idle.append(eid)
                continue
            if view is None or view.paused or view.disabled:
                continue  # not sent to: its rows are only recorded, outside any lane
            if lane.inflight >= view.max_in_flight or (failing and lane.inflight > 0):
                blocked.add(eid)  # full; a failing endpoint gets one probe at a time
                self._slots = True
                continue
            if failing and health is not None and not health.probe_due(now_ms):
                wait = max(wait, (health.next_probe_ms or now_ms) / 1000 - now_ms / 1000)
            if wait > 0:
                blocked.add(eid)
                soonest = wait if soonest is None else min(soonest, wait)
        for eid in idle:  # bounded memory: lanes exist only for busy endpoints
            del self.lanes[eid]
        for tenant in self.tenants.saturated(self.tenant_cap):
            blocked.update(self.catalog.registry.endpoint_ids(tenant))  # others come first
            self._slots = True
        return blocked, soonest

    async def _launch_due(self) -> float | None:
        """Start what due deliveries the free slots and lanes allow; returns the soonest
        time (seconds) a blocked lane could start one (None: none waits)."""
        soonest = None
        self.slot_bound = True  # till this round ends: an attempt's end wakes the loop
        for _ in range(4):  # claims: re-read while lanes filled up under the rows we got
            free = self._free()
            if free <= 0:
                return soonest
            now_ms, now_s = self.clock.wall_ms(), self.clock.monotonic()
            self._forget_stale_health()
            await self._expire_starved(now_ms)
            self._slots, self._rate_wait = False, None
            blocked, soonest = self._blocked(now_s, now_ms)
            if self.claims is None:
                return self._launch_ready(free, blocked, soonest, now_ms, now_s)
            # claims are taken for this process alone: no more than it can start
            due, _ = await self._due(now_ms, free, blocked)
            launch, refill = self._select(due, free, blocked, now_ms, now_s)
            if len(launch) < len(due):
                await self._unclaim([d for d in due if d.id not in self.inflight])
            await self._spawn(launch)
            if not refill:
                return soonest
        return soonest

    def _launch_ready(
        self, free: int, blocked: set[str], soonest: float | None, now_ms: int, now_s: float
    ) -> float | None:
        """``_launch_due`` without claims: one pass over ``ready`` (another would find the
        same lanes), then a read ahead if due. Returns the soonest a lane blocked by its
        rate limit could start one (also one that ran dry in this pass), and notes in
        ``slot_bound`` whether a freed slot could start one sooner."""
        if self.ready and now_s - self._ready_at > READ_AHEAD_S:
            self.reads.drop(len(self.ready))  # custody or the registry may have moved
            self.ready.clear()
            self._epoch += 1  # a read under way is dropped too
        self._take_fresh(now_s)
        if not self.ready:
            if self._may_read(blocked):
                self._start_read(now_ms, blocked)  # it wakes the loop with its rows
        else:
            rows = [d for d, _ in self.ready.values()]
            launch, _ = self._select(rows, free, blocked, now_ms, now_s)
            for d, _ in launch:  # in the order of ``ready``
                self._start(d, self.ready.pop(d.id)[1])
            c = self.opts.concurrency  # no pass over ``ready`` unless it may drop or read:
            if len(self.ready) > READ_AHEAD_ROWS * c or self._may_read(blocked):
                others = self.reads.keep_blocked(self.ready, blocked, c)
                if others < 2 * c and self._may_read(blocked):
                    self._start_read(now_ms, blocked)  # while these attempts run
        if (wait := self._rate_wait) is not None:
            soonest = wait if soonest is None else min(soonest, wait)
        # a read under way skips this round's blocked lanes: a slot freed meanwhile must
        # wake a round, or the read's quiet answer would hold for lanes no longer full
        self.slot_bound = self._slots or self._free() <= 0 or self._fetch is not None
        return soonest

    def _may_read(self, blocked: set[str]) -> bool:
        """No read under way, and none that found nothing holds for ``blocked``?"""
        return self._fetch is None and not self._quiet(blocked)

    def _quiet(self, blocked: set[str] | None) -> bool:
        """Does the last read that found nothing still hold (``Reads.holds``)?"""
        now_s, now_ms = self.clock.monotonic(), self.clock.wall_ms()
        return self.reads.holds(self.queue.added, now_s, now_ms, self.opts.poll_interval_s, blocked)

    def _select(
        self, due: list[Delivery], free: int, blocked: set[str], now_ms: int, now_s: float
    ) -> tuple[list[tuple[Delivery, bool]], bool]:
        """Take lanes and tenant slots for up to ``free`` of ``due`` (in order), adding
        endpoints found full to ``blocked``; returns (delivery, sends) to start and
        whether rows were passed over for a full lane (a re-read may find others)."""
        refill = False
        launch: list[tuple[Delivery, bool]] = []
        claim = self.custody.claimable() if self.claims is None else None
        for d in due:
            if free <= 0:
                break
            if d.endpoint_id in blocked:
                refill = True
                continue
            if claim is not None and not self._custodian(claim, d):
                blocked.add(d.endpoint_id)  # read ahead before custody moved
                continue
            ep = self._endpoint_of(d)
            # paused, disabled and deleted endpoints are not sent to: the attempt
            # only records the delivery as skipped or cancelled, outside any lane
            sends = ep is not None and not (ep.paused or ep.disabled)
            if sends and ep is not None:
                share = self.tenant_cap(d.tenant)
                if self.tenants.full(d.tenant, share):
                    # the tenant has its share in flight: skip all its endpoints
                    blocked.update(self.catalog.registry.endpoint_ids(d.tenant))
                    refill = self._slots = True
                    continue
                health = self.queue.health.get(d.endpoint_id)
                if health is None and ep.failing_since_ms is not None:
                    # failing by the replicated view (another region's attempts, e.g.
                    # before this region adopted the endpoint): probe it, one at a time
                    health = Health("failing", failing_since_ms=ep.failing_since_ms)
                    self.queue.health[d.endpoint_id] = health
                    self.recorder.health_url[d.endpoint_id] = ep.url
                lane = self.lane(d.endpoint_id, ep.rate_limit_per_s)
                probing = health is not None and health.state == "failing"
                cap = 1 if probing else ep.max_in_flight
                if (probing and not health.probe_due(now_ms)) or not lane.admit(
                    ep.rate_limit_per_s, cap, now_s
                ):
                    blocked.add(d.endpoint_id)  # this lane is full; others go on
                    refill = True
                    wait = 0.0 if probing or lane.inflight >= cap else lane.wait_s(now_s)
                    if wait > 0:  # ran dry: ``_launch_ready`` sleeps till it may go on
                        self._rate_wait = min(wait, self._rate_wait or wait)
                    else:
                        self._slots = True
                    continue
                admitted = self.tenants.admit(d.tenant, share)  # not full: checked above
                check(admitted, "tenant %r over its cap %d in flight", d.tenant, share)
                self.slots.add(d.id)
            free -= 1
            if d.region != self.region:
                self.custody.adopted(d.id)
            self.inflight[d.id] = d.endpoint_id
            launch.append((d, sends))
        return launch, refill

    def _take_fresh(self, now_s: float) -> None:
        """Move the deliveries ingest handed over into ``ready`` (``ready.take_fresh``)."""
        if not self.queue.fresh:
            return
        self._ready_at = self._ready_at if self.ready else now_s
        handed = self._handed if self._fetch is not None else None
        self.ready = take_fresh(self.queue.fresh, self.ready, self.inflight, self.lanes, handed)

    def _start_read(self, now_ms: int, blocked: set[str]) -> None:
        """Start reading ahead (``_fetch``); never awaited by the claim loop, so fresh
        deliveries handed over meanwhile start without waiting for it."""
        self._handed.clear()
        self._fetch = asyncio.create_task(self._read_ahead(now_ms, blocked))
        self._fetch.add_done_callback(self._fetched)

    async def _read_ahead(self, now_ms: int, blocked: set[str]) -> None:
        """Read up to ``READ_AHEAD_ROWS x delivery.concurrency`` due deliveries not yet
        held, and their events, into ``ready``. One read at a time (``_fetch``): a row
        it returns was not held when it started, so it was not attempted since (an
        attempt holds its row until its outcome is durable), unless it was handed over
        since (``_handed``, emptied before each read: left out)."""
        epoch, seen = self._epoch, self.reads.start(self.queue.added)
        due, later_ms = await self._due(now_ms, READ_AHEAD_ROWS * self.opts.concurrency, blocked)
        events = await self.store.get_events([d.event_id for d in due]) if due else {}
        if epoch != self._epoch:
            return
        now_s = self.clock.monotonic()
        if not due:
            self.reads.found_nothing(now_s, later_ms, blocked, seen)
        if not self.ready:
            self._ready_at = now_s
        for d in due:
            if d.id not in self.inflight and d.id not in self.ready and d.id not in self._handed:
                self.ready[d.id] = (d, events.get(d.event_id))

    def _fetched(self, task: asyncio.Task[None]) -> None:
        self._fetch = None
        if task.cancelled():
            return
        if task.exception() is not None:
            log.error("reading due deliveries ahead failed", exc_info=task.exception())
        elif self.ready or self.reads.moved_since_start(self.queue.added):
            # rows to start, or rows added while it read (a wake-up its round spent
            # waiting for this read, which may not have seen them): claim and read again
            self.queue.wake.set()

    async def _spawn(self, launch: list[tuple[Delivery, bool]]) -> None:
        """Start the attempts of ``launch`` (claimed: in ``inflight``, lanes taken), with
        their events read in one query."""
        try:
            events = await self.store.get_events([d.event_id for d, _ in launch])
        except BaseException:
            for d, _ in launch:
                self._release(d)
            raise
        for d, _ in launch:
            self._start(d, events.get(d.event_id))

    def _start(self, d: Delivery, event: Event | None) -> None:
        task = asyncio.create_task(self._attempt(d, event))
        self._tasks[task] = None
        task.add_done_callback(lambda t: self._tasks.pop(t, None))

    def _held(self) -> list[str]:
        """Deliveries a due read must not return: in flight or read ahead."""
        return [*self.inflight, *self.ready]

    def _free(self) -> int:
        """Attempts that may start now: ``delivery.concurrency`` sending, and up to
        ``RECORDING_FACTOR`` times as many more sent and waiting to be recorded."""
        cap, busy = self.opts.concurrency, len(self.inflight)
        return min(cap - busy + self.recording, (1 + RECORDING_FACTOR) * cap - busy)

    def _free_slot(self, d: Delivery, wake: bool = True) -> None:
        """Give back ``d``'s lane and tenant slot (once), and wake the claim loop (unless
        not ``wake`` and no freed slot can start one: ``slot_bound``)."""
        if d.id in self.slots:
            self.slots.discard(d.id)
            self.tenants.release(d.tenant)
            lane = self.lanes.get(d.endpoint_id)  # a lane in use is never dropped
            check(lane is not None, "delivery %s held a slot of no lane", d.id)
            if lane is not None:
                lane.release()
        if wake or self.slot_bound:
            self.queue.wake.set()

    def _release(self, d: Delivery, wake: bool = True) -> None:
        self.inflight.pop(d.id, None)
        self._free_slot(d, wake)

    async def _attempt(self, d: Delivery, event: Event | None) -> None:
        out: Outcome | None = None
        retry_ms, freed = None, False  # pending again: due then; slot freed at the answer
        try:
            ep = self._endpoint_of(d)
            out = await self._outcome(d, event, ep)
            freed = await self._record(d, ep, out)
            if out.status is DeliveryStatus.PENDING:
                retry_ms = out.next_at_ms or 0
        except asyncio.CancelledError:
            raise
        except Exception:
            ids = {"delivery_id": d.id, "event_id": d.event_id, "endpoint_id": d.endpoint_id}
            log.exception("delivery %s: attempt crashed; retrying later", d.id, extra=ids)
            # never a hot loop: push the delivery back as a failed try would be, with the
            # attempt row of a request sent (its outcome was not recorded)
            later = retry_ms = self.clock.wall_ms() + int(_CRASH_BACKOFF_S * 1000)
            n, row = d.attempts, None
            if out is not None and out.attempt is not None:
                n, row = out.attempts, out.attempt
            with contextlib.suppress(Exception):
                await self.recorder.record(Outcome(d, DeliveryStatus.PENDING, later, n, row, None))
        finally:
            self._release(d, wake=not freed)  # freed at its answer: no news (``slot_bound``)
            if retry_ms is not None:
                self.reads.retried(retry_ms)

    async def _expire_starved(self, now_ms: int) -> None:
        """Pending deliveries due for longer than the retry horizon (``DEADLINE_S``)
        without an attempt (a lane too slow or blocked) become dead, counted as failed.
        Checked at most once per ``poll_interval_s`` (the horizon is days long)."""
        mono = self.clock.monotonic()
        if self._expired_at is not None and mono - self._expired_at < self.opts.poll_interval_s:
            return
        self._expired_at = mono
        cutoff = now_ms - DEADLINE_S * 1000
        starved = await self.store.due_deliveries(self.region, cutoff, 100, self._held())
        await asyncio.gather(*(
            self.recorder.record(Outcome(d, DeliveryStatus.DEAD, None, d.attempts, None, None))
            for d in starved
        ))  # fmt: skip

    def _forget_stale_health(self) -> None:
        """Drop this region's health view of endpoints deleted or given a new url (also
        a url changed in another region): failures at the old url do not count; and of
        those resumed, re-enabled or found healthy elsewhere (``core.health.behind``)."""
        for eid, health in list(self.queue.health.items()):
            view = self.catalog.registry.endpoint(eid)
            if (
                view is None
                or view.url != self.recorder.health_url.get(eid, view.url)
                or behind(health, view.state)
            ):
                del self.queue.health[eid]
                self.recorder.health_url.pop(eid, None)

    def _endpoint_of(self, d: Delivery) -> EndpointView | None:
        """The live endpoint ``d`` was fanned out to, or None if it was deleted (also when
        its id was re-created since: another generation, ``Registry.endpoint_gen``)."""
        reg = self.catalog.registry
        ep = reg.endpoint(d.endpoint_id, d.tenant)
        if ep is None or not gen_live(d.owner_gen, reg.endpoint_gen(d.endpoint_id, d.tenant)):
            return None
        return ep

    async def _outcome(self, d: Delivery, event: Event | None, ep: EndpointView | None) -> Outcome:
        """Send attempt ``d`` to ``ep`` (``_endpoint_of``) and return its outcome, or that
        it is skipped or cancelled (nothing sent)."""
        if event is None or ep is None:
            return Outcome(d, DeliveryStatus.CANCELLED, None, d.attempts, None, None)
        if ep.paused or ep.disabled:
            return Outcome(d, DeliveryStatus.SKIPPED, None, d.attempts, None, None)
        return await send_attempt(
            d, event, ep, region=self.region, opts=self.opts, sender=self.sender,
            writer=self.writer, clock=self.clock, rng=self.rng,
        )  # fmt: skip

    async def _record(self, d: Delivery, ep: EndpointView | None, out: Outcome) -> bool:
        """Record ``out``; True if ``d``'s slot was freed at its answer (a success at a
        healthy endpoint: no health to change, nothing to retry)."""
        health = self.queue.health.get(d.endpoint_id)
        if ep is None:  # nothing was sent
            healthy = False
        else:
            healthy = ep.failing_since_ms is None if health is None else health.state == "active"
        if out.health_event == "success" and healthy:
            # a success at a healthy endpoint: its lane slot goes to the next attempt
            # while this outcome is recorded (the delivery stays in ``inflight``, so it
            # is not claimed again); other outcomes may change health: held till durable
            self._free_slot(d, wake=False)
            self.recording += 1
            try:
                await self.recorder.record(out)
                return True
            finally:
                self.recording -= 1
        await self.recorder.record(out)
        return False
