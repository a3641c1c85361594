"""The local write path: one lock, HLC stamps, own log records, group commit, durability
futures and the wake-ups of replication links waiting for new log records.

Owns the HLC, this node's actor and its version vectors (``version_vector``: what
memory holds, ``durable_vv``: what the store committed). Never decides what to write:
callers build deltas and batches under ``lock`` and await the returned future after
releasing it (a caller is answered only once its change is durable).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping

from crdt import CRDT, HLC, Timestamp

from ..config import Settings
from ..core.capabilities import ALL, RELEASE, Negotiation
from ..core.clock_offset import ClockView, Sample, assess, keep_best
from ..core.invariants import check
from ..core.model import Attempt, AuditEntry, Delivery, Event, Record, WriteBatch, add_moves
from ..core.peering import actor_reused, next_incarnation
from ..core.records import decode_body, encode_body
from ..core.removal import removed_by
from .commit import GroupCommitter
from .ports import Clock, Store
from .state import Catalog, IdempotencyRow
from .telemetry import Telemetry
from .unsettled import UnsettledDeliveries

__all__ = ["ClusterClock", "WritePath"]

log = logging.getLogger("regionsync.node")


class WritePath:
    """Serializes local writes; see the module docstring. ``open`` before use."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        clock: Clock,
        catalog: Catalog,
        reads: frozenset[str] = ALL,
    ):
        self.settings, self.store, self.clock, self.catalog = settings, store, clock, catalog
        # what this node reads and what the cluster writes (core.capabilities): every
        # record form newer than the baseline is written only once ``enabled``
        self.capabilities = Negotiation(reads, tuple(p.region for p in settings.peers))
        # the HLC's bound: a peer's stamp moves it at most this far past physical time
        repl = settings.replication
        self.hlc_bound_ms = min(repl.max_drift_ms, repl.clock_suspect_ms)
        self.hlc = HLC(max_drift_ms=self.hlc_bound_ms)
        self.lock = asyncio.Lock()
        self.incarnation = 0
        self.actor = ""
        self.version_vector: dict[str, int] = {}
        self.durable_vv: dict[str, int] = {}
        self._log_waiters: dict[asyncio.Event, None] = {}  # ordered: deterministic wake-ups
        self.committer: GroupCommitter | None = None
        # the actor check (issue 12 item 3): local writes wait until it is done
        self.actor_checked = asyncio.Event()
        self._unheard: set[str] = set()
        self.renewals = 0  # incarnations taken because a peer had seen more of the actor
        self.commits = 0  # group commits so far (keys caches of derived state)
        self.telemetry = Telemetry()  # the node's histograms and tracer (runtime/telemetry)
        # usage counter moves committed and not yet in a record (the registry shows them:
        # Catalog.pending_usage, changed in place only), whether the store keeps them
        # too (``carry_kept``: then they are recorded at most every usage_record_ms),
        # when they were last recorded, and the moves of the commit in flight with the
        # carry it records, or None (see _before_commit)
        self._usage_carry = catalog.pending_usage
        self.carry_kept = False
        # after a failed commit, no usage record until the node reloaded its state
        # (``reload_usage``), and the moves the failed record held, if the store keeps
        # no carry
        self._usage_held = False
        self._unrecorded: dict[tuple[str, str], int] = {}
        self._recorded_at = float("-inf")
        self._in_flight: tuple[dict[tuple[str, str], int], dict[tuple[str, str], int] | None]
        self._in_flight = ({}, None)
        # called with every committed batch, after durable_vv moved (antientropy's tree)
        self.commit_observers: list[Callable[[WriteBatch], None]] = []
        self.unsettled = UnsettledDeliveries()
        # the peers' clocks (core/clock_offset.py): kept samples and the current decision;
        # ``on_clock`` (set by the node) hears every change of status
        self.clock_samples: dict[str, Sample] = {}
        self.clock_view = ClockView(0, "ok", 0, {}, None)
        self.on_clock: Callable[[ClockView, ClockView], None] | None = None
        self.hlc_rebases = 0  # times the HLC was found past the bound and restarted
        self.stamps_ahead: dict[str, int] = {}  # origin region -> ms its last far stamp led

    def open(
        self,
        region: str,
        incarnation: int,
        version_vector: Mapping[str, int],
        usage_carry: Mapping[tuple[str, str], int] | None = None,
    ) -> None:
        """Take the actor ``region:incarnation``, the stored version vector and the
        store's usage carry (``Store.load_usage_carry``; None: the store keeps none)."""
        self.incarnation = incarnation
        self.actor = f"{region}:{incarnation}"
        self.version_vector = dict(version_vector)
        self.durable_vv = dict(version_vector)
        self.carry_kept = usage_carry is not None
        self._usage_carry.clear()
        self._usage_carry.update(usage_carry or {})

    def expect_peers(self, peers: Iterable[str], fresh: bool) -> None:
        """Start the actor check: local writes are held until every one of ``peers`` sent
        a Hello (``peer_hello``) or ``actor_check_expired`` ran. A fresh store's actor is
        new, so it needs no check; neither does a node without peers or with
        ``replication.actor_check_s`` 0 (the check is then off).

        Why hold writes rather than re-stamp them: a write issued under a reused actor
        has already put its dot into OR-Sets and LWW clocks; re-stamping it would need to
        rewrite merged CRDT state, while holding costs at most ``actor_check_s`` of write
        latency after a restart (peers answer a Hello within one round trip).
        """
        self._unheard = set(peers)
        if fresh or not self._unheard or self.settings.replication.actor_check_s <= 0:
            self.actor_checked.set()

    async def peer_hello(self, region: str, version_vector: Mapping[str, int]) -> None:
        """A peer's Hello: renew the actor if the peer has seen more of it than we hold
        (core.peering.actor_reused); the check is done once every peer was heard."""
        if actor_reused(self.actor, self.version_vector, version_vector):
            await self.renew_actor(
                f"peer {region} has seen {self.actor} up to "
                f"{version_vector.get(self.actor, 0)}, this store only up to "
                f"{self.version_vector.get(self.actor, 0)} (restored from an older copy?)"
            )
        self._unheard.discard(region)
        if not self._unheard:
            self.actor_checked.set()

    async def actor_check_expired(self) -> None:
        """The check's time is up: if some peer was not heard, it may have seen more of
        this actor, so take a new one (an extra version vector entry, never a reused dot)."""
        if not self.actor_checked.is_set():
            await self.renew_actor(f"peers {sorted(self._unheard)} not heard since start")
            self.actor_checked.set()

    async def renew_actor(self, why: str) -> None:
        """Take a new incarnation (and actor) on this store; the old actor's records stay
        as those of any other origin, so peers send back what the store lacks."""
        async with self.lock:
            old = self.actor
            self.incarnation = next_incarnation(self.clock.wall_ms(), self.incarnation)
            await self.store.renew_incarnation(self.incarnation)
            self.actor = f"{old.rpartition(':')[0]}:{self.incarnation}"
            self.renewals += 1
        self.notify_log()
        log.warning("new actor %s replaces %s: %s", self.actor, old, why)

    def local_lock(self) -> _LocalLock:
        """``lock`` for a local write (one with an own record): waits for the actor check.
        Use as ``async with writer.local_lock():``."""
        return _LocalLock(self)

    def start_committer(self, on_failure: Callable[[BaseException], None]) -> GroupCommitter:
        """Create the group committer (the caller runs its ``run()`` as a task)."""
        opts = self.settings.ingest
        self.committer = GroupCommitter(
            self.store,
            max_batches=opts.commit_max_batches,
            linger_s=opts.commit_linger_ms / 1000,
            on_commit=self._on_commit,
            on_failure=lambda exc: (
                self._commit_outcome(False),
                self.unsettled.failed(),
                on_failure(exc),
            ),
            monotonic=self.clock.monotonic,
            observe=self.telemetry.commit.observe,
            before_commit=self._before_commit,
        )
        return self.committer

    async def resume_hlc(self) -> None:
        """Resume the HLC from this actor's last own record, if the log keeps one. A
        saved stamp ahead of physical time by more than ``hlc_bound_ms`` (written by a
        clock that ran ahead) is not followed: ``stamp`` restarts from physical time."""
        own_seq = self.version_vector.get(self.actor, 0)
        if own_seq:
            skip = {o: 1 << 62 for o in self.version_vector}  # other origins skipped
            last = await self.store.records_after({**skip, self.actor: own_seq - 1}, 1)
            if last:  # truncation keeps an actor's last own record, unless forced
                self.hlc = HLC(self.hlc_bound_ms, Timestamp(*last[0].hlc))

    def _before_commit(self, merged: WriteBatch, whole_queue: bool) -> None:
        """Turn the usage counter moves carried and the group's (``WriteBatch.usage``,
        summed) into one own ``registry`` record in the same transaction: one CRDT delta
        per (tenant, counter) instead of one per publish (issue 17), and, where the
        store keeps the carry, at most every ``ingest.usage_record_ms`` (issue 44: a
        record per commit was an eighth of a publish's CPU). In between, the store adds
        each commit's moves to its carry with its events, so a crash loses none, and the
        registry shows them here (``Catalog.pending_usage``).

        Only after the actor check (a record under a reused actor is what it prevents),
        not between a failed commit and the reload of the state it left (the registry
        in memory holds that commit's record), when no one holds ``lock`` (a holder
        between taking a seq and submitting would otherwise commit after this record's
        higher seq) and the group took the whole queue (records queued behind it have
        lower seqs); else the moves wait for a later group. Moves of a failed commit's
        events are dropped with them; moves carried before it stay carried."""
        group, carry = merged.usage, self._usage_carry
        record = whole_queue and not self.lock.locked() and self.actor_checked.is_set()
        record = record and not self._usage_held
        record = record and (any(carry.values()) or any(group.values()))
        record = record and (not self.carry_kept or self._record_due())
        self._in_flight = (group, dict(carry) if record else None)
        if not record:
            return
        moves = add_moves(dict(carry), group)
        carry.clear()  # in the record now: shown once
        self.record_local("registry", self.stamp(), self.usage_deltas(moves), merged)
        merged.usage_recorded = True
        self._recorded_at = self.clock.monotonic()

    def usage_deltas(self, moves: Mapping[tuple[str, str], int]) -> dict[str, CRDT]:
        """The counter deltas of ``moves`` (by tenant and counter) as this actor's."""
        reg, deltas = self.catalog.registry, {}
        for (tenant, counter), n in sorted(moves.items()):
            deltas.update(reg.count(tenant, counter, n, self.actor))
        return deltas

    def add_usage(self, batch: WriteBatch, moves: Mapping[tuple[str, str], int]) -> None:
        """Add usage ``moves`` to ``batch`` (lock held, before its submit): carried and
        recorded with other commits' (``_before_commit``) where the store keeps a carry,
        else recorded in this batch's own transaction (a held lock would otherwise keep
        them in memory only, as it does a publish's)."""
        if self.carry_kept:
            batch.usage.update((key, n) for key, n in moves.items() if n)
        elif deltas := self.usage_deltas(moves):
            self.record_local("registry", self.stamp(), deltas, batch)

    def _commit_outcome(self, durable: bool) -> None:
        """After the commit ``_before_commit`` saw: its moves are recorded (with the
        carry), carried (durable, not recorded), or dropped with its events (failed).
        A failed commit's record of the carry is undone by ``reload_usage``: until then
        the registry in memory still shows it."""
        own, recorded = self._in_flight
        self._in_flight = ({}, None)
        if not durable:
            self._usage_held = True
            add_moves(self._unrecorded, recorded or {})
        elif recorded is None:  # committed, not recorded: carried
            add_moves(self._usage_carry, own)

    def reload_usage(self, stored: Mapping[tuple[str, str], int] | None) -> None:
        """The registry was reloaded from the store after a failed commit (call with
        ``lock`` held): the carry is the store's (``Store.load_usage_carry``), or, where
        the store keeps none, what is carried plus what the failed record held."""
        if stored is not None:
            moves = dict(stored)
        else:
            moves = add_moves(dict(self._usage_carry), self._unrecorded)
        self._usage_carry.clear()
        self._usage_carry.update(moves)
        self._unrecorded.clear()
        self._usage_held = False

    def _record_due(self) -> bool:
        """Has ``usage_record_ms`` passed since the last usage record?"""
        every_s = self.settings.ingest.usage_record_ms / 1000
        return self.clock.monotonic() - self._recorded_at >= every_s

    async def record_usage(self) -> None:
        """Commit the carried usage moves into a record, unless someone holds ``lock``,
        a commit is queued or the node reloads after a failed commit (they then go with
        a later commit). Raises what the commit raises."""
        if self.committer is not None and any(self._usage_carry.values()):
            self._recorded_at = float("-inf")
            await self.submit(WriteBatch())

    async def run_usage_records(self) -> None:
        """Record carried usage moves that no commit took within ``usage_record_ms``
        (a quiet node's last moves, or moves a held lock kept out of their commit's
        record on a store that keeps no carry). Runs while the node runs."""
        every_s = max(self.settings.ingest.usage_record_ms / 4000, 0.05)
        while True:
            await self.clock.sleep(every_s)
            if any(self._usage_carry.values()) and self._record_due():
                try:
                    await self.record_usage()
                except Exception as exc:  # the commit's failure is handled by the committer
                    log.debug("usage record not committed: %r", exc)

    def _on_commit(self, batch: WriteBatch) -> None:
        self._commit_outcome(True)
        self.commits += 1
        if self.committer is not None:
            self.unsettled.durable(self.committer.batches)
        for origin, seq in batch.version_vector.items():
            # memory is ahead of the store: else this actor's next seq would be reused
            ahead = seq <= self.version_vector.get(origin, 0)
            if not check(ahead, "committed %s#%d past memory's version vector", origin, seq):
                self.version_vector[origin] = seq  # production: never reuse it
            self.durable_vv[origin] = max(self.durable_vv.get(origin, 0), seq)
        for observe in self.commit_observers:
            observe(batch)
        self.notify_log()

    @property
    def queued(self) -> int:
        """Submissions waiting for the next group commit."""
        return self.committer.queued if self.committer is not None else 0

    def physical_ms(self) -> int:
        """Physical time for HLC stamps: the wall clock plus the correction of a clock
        found wrong by its peers (``clock_view``, core/clock_offset.py)."""
        return max(0, self.clock.wall_ms() + self.clock_view.correction_ms)

    def peer_clock(self, region: str, sample: Sample | None) -> None:
        """A peer's clock sample (from its Hello or Ack): keep the best, decide again."""
        repl = self.settings.replication
        window = int(repl.failover_after_s * 1000)
        kept = keep_best(self.clock_samples.get(region), sample, window)
        if kept is None:
            return
        self.clock_samples[region] = kept
        before = self.clock_view
        self.clock_view = assess(
            self.clock_samples, self.clock.wall_ms(), window, repl.clock_suspect_ms,
            self.actor.split(":")[0], before.status, len(self.settings.peers) + 1,
        )  # fmt: skip
        if before.status != self.clock_view.status and self.on_clock is not None:
            self.on_clock(before, self.clock_view)

    def stamp_ahead(self, origin: str, ahead_ms: int) -> None:
        """A record of ``origin`` (an actor) was stamped ``ahead_ms`` past physical time
        + ``max_drift_ms``: applied, HLC clamped (runtime/replica.py). Logged the first
        time per region; the latest lead is shown by /v1/cluster."""
        region = origin.split(":")[0]
        if region not in self.stamps_ahead:
            log.warning(
                "records of %s are stamped %d ms ahead of this clock (max_drift_ms %d): "
                "applied, this HLC not moved past the bound; see /v1/cluster clock",
                region, ahead_ms, self.settings.replication.max_drift_ms,
            )  # fmt: skip
        self.stamps_ahead[region] = ahead_ms

    def stamp(self) -> Timestamp:
        """A new HLC stamp for a local write. The HLC never passes (corrected) physical
        time + ``hlc_bound_ms`` through a peer's stamp (runtime/replica.py clamps); when
        it is further ahead all the same (resumed from a stamp a clock that ran ahead
        wrote, or this clock found wrong and corrected back, or stepped back), it
        restarts at physical time (``hlc_rebases``): this node's stamps are never more
        than ``hlc_bound_ms`` ahead of it. Stamps of one actor then go back once; that
        is safe because last-writer-wins orders one actor's writes by version vector,
        not stamp (crdt/_lww.py), and no other reader needs them increasing (docs/design.md
        "Actors, stamps, generations")."""
        pt = self.physical_ms()
        if self.hlc.last.wall_ms - pt > self.hlc_bound_ms:
            self.hlc_rebases += 1
            log.warning(
                "HLC %s is %d ms ahead of physical time %d ms; stamping from physical time",
                self.hlc.last, self.hlc.last.wall_ms - pt, pt,
            )  # fmt: skip
            self.hlc = HLC(self.hlc_bound_ms, Timestamp(pt, 0))
        return self.hlc.now(pt)

    def submit(self, batch: WriteBatch) -> asyncio.Future[None]:
        """Queue ``batch`` (replicated or local state, no own record) for group commit."""
        assert self.committer is not None, "open the write path first"
        self.unsettled.submitted(batch.deliveries)
        return self.committer.submit(batch)

    def commit_local(
        self,
        kind: str,
        stamp: Timestamp,
        deltas: Mapping[str, CRDT],
        batch: WriteBatch | None = None,
        event: Event | None = None,
        delivery: Delivery | None = None,
        idempotency: IdempotencyRow | None = None,
        deliveries: list[Delivery] | None = None,
        attempt: Attempt | None = None,
        audit: dict[str, str] | None = None,
    ) -> asyncio.Future[None]:
        """Apply ``deltas`` in memory and queue them, with a new own record, for the next
        group commit. Call with ``lock`` held; await the returned future after releasing
        it (it resolves once the change is durable). The record carries ``event``,
        ``delivery``, ``deliveries``, ``attempt``, ``idempotency`` and ``audit`` (core.records;
        ``runtime.audit.audit_section``), which also goes into this store's audit log."""
        batch = batch or WriteBatch()
        self.record_local(kind, stamp, deltas, batch, event, delivery, idempotency, deliveries,
                          attempt, audit)  # fmt: skip
        if not batch:  # a change that changed nothing: nothing to wait for
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return self.submit(batch)

    def record_local(
        self,
        kind: str,
        stamp: Timestamp,
        deltas: Mapping[str, CRDT],
        batch: WriteBatch,
        event: Event | None = None,
        delivery: Delivery | None = None,
        idempotency: IdempotencyRow | None = None,
        deliveries: list[Delivery] | None = None,
        attempt: Attempt | None = None,
        audit: dict[str, str] | None = None,
    ) -> None:
        """``commit_local`` without the submit: apply ``deltas`` in memory and append the
        new own record (and the registry states it changed) to ``batch``, which the
        caller submits once with every record it added (one atomic group commit). Call
        with ``lock`` held and submit before releasing it (records go out in seq order).

        A registry change without deltas (an empty PATCH) adds no record and no audit
        entry. A registry record is checked with the decoder every peer applies
        (``core.records.decode_body``) before anything is applied: a record its peers
        refuse would stop replication of every later record of this node to them. Raises
        ValueError (nothing applied or queued) if it is refused."""
        if (
            kind == "registry"
            and not deltas
            and not (event or delivery or idempotency or deliveries or attempt)
        ):
            return
        writer = None
        if kind == "registry" and deltas and self.capabilities.enabled("optional-fields"):
            writer = RELEASE  # every region reads _ sections (core.capabilities)
        body = encode_body(
            dict(deltas), event, delivery, idempotency, deliveries, attempt, audit, writer
        )
        if kind == "registry":
            try:
                # a region removed (or being removed) for good reads nothing more of ours
                gone = {*self.catalog.registry.removals(), *removed_by(deltas)}
                decode_body(kind, body, self.capabilities.effective_without(gone))
            except ValueError as exc:
                raise ValueError(f"a registry record the peers would refuse: {exc}") from None
        changed = self.catalog.apply(deltas)
        seq = self.version_vector.get(self.actor, 0) + 1
        batch.records.append(Record(self.actor, seq, kind, body, (stamp.wall_ms, stamp.logical)))
        if audit is not None:
            batch.audit.append(AuditEntry(self.actor, seq, stamp.wall_ms, stamp.logical, **audit))
        batch.version_vector[self.actor] = seq
        batch.registry.update({k: v.to_bytes() for k, v in changed.items()})
        self.version_vector[self.actor] = seq

    def notify_log(self) -> None:
        """Wake every replication link: the log has new records."""
        for ev in self._log_waiters:
            ev.set()

    def log_waiter(self) -> asyncio.Event:
        """An event set whenever new records are durable; drop it with ``drop_log_waiter``."""
        ev = asyncio.Event()
        self._log_waiters[ev] = None
        return ev

    def drop_log_waiter(self, ev: asyncio.Event) -> None:
        self._log_waiters.pop(ev, None)


class _LocalLock:
    """``WritePath.local_lock``'s context manager: a class, not a generator (it is entered
    once per publish and per recorded outcome; issue 17). Suspends exactly where
    ``await actor_checked.wait(); async with lock:`` would."""

    __slots__ = ("_path",)

    def __init__(self, path: WritePath):
        self._path = path

    async def __aenter__(self) -> None:
        path = self._path
        if not path.actor_checked.is_set():
            await path.actor_checked.wait()
        await path.lock.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self._path.lock.release()


class ClusterClock:
    """The clock this node shows to other regions and the outside (signatures, event and
    attempt times, retry schedules, custody contact times and leases, operational
    events): the wall clock plus the correction of a clock found wrong by a majority of
    its peers (``WritePath.physical_ms``, the time stamps use). The raw wall clock stays
    for what measures this one: clock samples, ``sent_wall_ms``, incarnations, local
    ages of links. ``monotonic`` and ``sleep`` are the raw clock's."""

    def __init__(self, clock: Clock, writer: WritePath):
        self.raw, self._writer = clock, writer

    def wall_ms(self) -> int:
        return self._writer.physical_ms()

    def monotonic(self) -> float:
        return self.raw.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.raw.sleep(seconds)
