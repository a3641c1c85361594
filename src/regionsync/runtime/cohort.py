"""One node process among several that share a region's database (issue 16).

Every process accepts publish, inbound and registry writes and delivers; each writes as
a CRDT actor of its own (``region:incarnation``, a new incarnation allocated in the
database at every start: README "Several processes per region" gives the reason), so
each has its own log sequence and version vector entry. This module keeps a process in
step with the others:

- **follow** (every process): the region's log is shared, so records committed by the
  other processes (their own writes, and peer regions' records the replication holder
  applied) are read from it and merged into this process's memory (registry, so matching
  and lanes see them; Idempotency-Keys; HLC; version vectors), never written again; the
  replication holder, which alone keeps the anti-entropy tree, also reads the stored
  rows of the deliveries they touch (the others skip that read: issue 44). The stored
  version vector and the records past this process's are read in one statement (one
  snapshot). The NOTIFY every commit that writes the log sends wakes it at once, unless
  this process holds that commit's records already (its own); as a safety net it
  also reads every ``replication.follow_interval_ms``, capped at ``retired_compact_s`` /
  8 (config keeps that cap at 125 ms or more on PostgreSQL). Records truncated before
  they were read (or state an anti-entropy pass merged without records) are made up by
  merging the stored registry rows. A process that cannot read them (the database away,
  a record its key ring cannot open: any failed round) has a stale view of its region,
  so it stops acknowledging (``following`` false: publish and inbound answer 503,
  ``/readyz`` is unready) until a round succeeds again; it logs each change of that
  state once, and after a failed round waits 50 ms (at most ``follow_interval_ms``)
  whatever NOTIFYs arrive.
- **the replication role** (one process per region): the holder of the region's
  advisory lock (``Coordinator.is_leader``, polled every ``replication.leader_poll_s``)
  serves gRPC, dials the peers, runs anti-entropy, custody and truncation
  (``start_role``/``stop_role`` of the node); its links read the shared log, so they
  ship every local actor's records. When the holder dies its session ends, the lock is
  free and another process takes the role at its next poll.

Delivery claims (``Coordinator.claim_due``) are used by runtime/delivery.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from crdt import CRDT, decode

from ..config import Settings
from ..core.model import Delivery, Record, WriteBatch
from ..core.records import Decoded, decode_body
from .ports import Clock, Store
from .state import Catalog, IdempotencyKeys
from .writepath import WritePath

__all__ = ["Claims", "Cohort", "Coordinator"]

log = logging.getLogger("regionsync.cohort")

_FOLLOW_BATCH = 2000  # records read per follow round
_COALESCE_S = 0.01  # notifications within this are read in one round
_RETRY_S = 0.05  # after a failed round (a process that cannot follow answers 503)


class Claims(Protocol):
    """Due deliveries claimed for this process with a lease, when several processes
    deliver one region's deliveries (runtime/cohort.Coordinator): a claimed delivery is
    not claimed by another process until its outcome is written or the lease expires."""

    async def claim_due(
        self,
        region: str,
        now_ms: int,
        limit: int,
        lease_ms: int,
        exclude_endpoints: Sequence[str] = (),
    ) -> list[Delivery]: ...

    async def claim_ids(
        self, region: str, delivery_ids: Sequence[str], now_ms: int, lease_ms: int
    ) -> list[Delivery]: ...

    async def release(self, delivery_ids: Sequence[str]) -> None: ...

    async def renew(self, delivery_ids: Sequence[str], until_ms: int) -> None: ...


class Coordinator(Claims, Protocol):
    """What a process asks of the database it shares (adapters/postgres_coordinator.py).

    ``holder`` names the process. ``changes`` yields whenever any process committed
    records or registry states (and once after each (re)connection). Its ``Claims`` are
    those of ``holder``."""

    holder: str

    async def allocate_actor(self, wall_ms: int) -> int: ...

    async def is_leader(self) -> bool: ...

    def changes(self) -> AsyncIterator[dict[str, int]]:
        """Per commit that writes the region's log, its version vector (``{}``: read
        anyway)."""
        ...

    async def processes(self) -> list[tuple[str, bool]]:
        """``(holder, holds the replication role)`` of the region's connected processes."""
        ...

    async def actor_holders(self) -> dict[int, str]:
        """incarnation -> holder of every process actor allocated in the region."""
        ...

    async def older_sessions(self) -> list[str]:
        """Sessions on the region's store of an older release (or any client that does
        not say which), which may read fewer features than this process."""
        ...

    async def follow_read(
        self, have: Mapping[str, int], own: str, limit: int
    ) -> tuple[dict[str, int], list[Record]]:
        """The region's stored version vector and, read with it (one snapshot), the log
        records of every origin but ``own`` past ``have`` (0 for an origin it lacks), in
        seq order per origin, at most ``limit`` in all."""
        ...

    def followed(self) -> None:
        """The round that began with the last ``follow_read`` read every record (the
        store then refuses registry writes of a process that stops following for longer
        than half of ``replication.retired_compact_s``)."""

    async def close(self) -> None: ...


class Cohort:
    """This process's part among the region's processes; see the module docstring.

    ``start_role``/``stop_role`` start and stop the replication role's parts (raising
    OSError when the gRPC port cannot be bound yet: the role is tried again at the next
    poll). ``leading`` tells whether this process runs them now."""

    def __init__(
        self,
        settings: Settings,
        coordinator: Coordinator,
        writer: WritePath,
        catalog: Catalog,
        keys: IdempotencyKeys,
        *,
        store: Store,
        clock: Clock,
        start_role: Callable[[], Awaitable[None]],
        stop_role: Callable[[], Awaitable[None]],
        tree_stale: Callable[[], None],
        tree_kept: Callable[[], bool],
    ):
        self.settings, self.coordinator, self.writer = settings, coordinator, writer
        self.catalog, self.keys, self.store, self.clock = catalog, keys, store, clock
        self._start_role, self._stop_role = start_role, stop_role
        self._tree_stale = tree_stale  # state merged that no commit observer saw
        self._tree_kept = tree_kept  # whether the anti-entropy tree wants delivery rows
        self.leading = False
        self.followed = 0  # records of other actors merged into memory
        self.reloads = 0  # registry reloads (records gone before they were read)
        self.following = True  # the last round read the others' records (module docstring)
        self._failed_rounds = 0
        self._wake = asyncio.Event()

    # -- follow ---------------------------------------------------------------------------

    async def follow_once(self) -> int:
        """Merge into memory what the other actors committed since the last call (up to
        ``_FOLLOW_BATCH`` records); returns how many records were merged."""
        writer = self.writer
        have = dict(writer.version_vector)
        stored, records = await self.coordinator.follow_read(have, writer.actor, _FOLLOW_BATCH)
        if any(writer.version_vector.get(o, 0) < s for o, s in have.items()):
            # moved back meanwhile (a reload, a pruned origin): the records read from
            # ``have`` would look like a gap; read again from where it is now
            self._wake.set()
            return 0
        want = {
            o: writer.version_vector.get(o, 0)
            for o, s in stored.items()
            if o != writer.actor and s > writer.version_vector.get(o, 0)
        }
        if not want:
            return 0
        by_origin: dict[str, list[Record]] = {}
        for r in records:
            by_origin.setdefault(r.origin, []).append(r)
        complete = len(records) < _FOLLOW_BATCH  # every wanted origin was read
        decoded = {(r.origin, r.seq): self._decode(r) for r in records}
        # the rows of the deliveries they touch, read before the lock: the anti-entropy
        # tree learns a record in the step that counts it. Only the replication holder
        # keeps a tree; a build that starts after this check reads the store, which has
        # these rows already (they were committed with the records read above)
        ids = {i for d in decoded.values() if d is not None for i in _delivery_ids(d)}
        want_rows = ids and self._tree_kept()
        stored_rows = await self.store.get_deliveries(sorted(ids)) if want_rows else {}
        gaps: set[str] = set()
        merged = 0
        seen = WriteBatch()  # what the merged records changed: for the commit observers
        touched: set[str] = set()
        async with writer.lock:
            for origin in sorted(want):
                rows = by_origin.get(origin, [])
                if not rows and complete and stored[origin] > writer.version_vector.get(origin, 0):
                    gaps.add(origin)  # truncated, or merged by anti-entropy without records
                for r in rows:
                    have = writer.version_vector.get(origin, 0)
                    if r.seq <= have:
                        continue  # the replication holder applied it itself meanwhile
                    if r.seq != have + 1:
                        gaps.add(origin)
                        break
                    self._merge(r, decoded[r.origin, r.seq], seen, touched)
                    merged += 1
            if merged:
                seen.deliveries = [stored_rows[i] for i in sorted(touched) if i in stored_rows]
                self._observe(seen)
        if gaps:
            await self._reload_registry({o: stored[o] for o in gaps})
        if merged or gaps:
            self.followed += merged
            writer.notify_log()  # the replication holder ships them
        return merged

    def _decode(self, r: Record) -> Decoded | None:
        try:
            return decode_body(r.kind, r.body, self.writer.capabilities.reads)
        except ValueError as exc:  # a peer's the holder refused and moved past, or a bug
            log.warning("record %s#%s of the shared log does not decode: %s", r.origin, r.seq, exc)
            return None

    def _merge(
        self, r: Record, decoded: Decoded | None, seen: WriteBatch, touched: set[str]
    ) -> None:
        """Merge one record of another actor into memory (write lock held): registry,
        Idempotency-Key, HLC, version vectors. Its rows are in the store already; what it
        touched is added to ``seen`` (registry states, event, Idempotency-Key) and
        ``touched`` (delivery ids)."""
        if decoded is not None:
            for key, state in self.catalog.apply(decoded.registry).items():
                seen.registry[key] = state.to_bytes()
            if decoded.idempotency is not None:
                self.keys.merge(decoded.idempotency)
                seen.idempotency.append(decoded.idempotency)
            if decoded.event is not None:
                seen.events.append(decoded.event)
            touched.update(_delivery_ids(decoded))
        with contextlib.suppress(ValueError):  # far ahead: clamped, as by the replica
            self.writer.hlc.observe_parts(*r.hlc, self.writer.physical_ms(), clamp=True)
        self._advance(r.origin, r.seq)

    def _advance(self, origin: str, seq: int) -> None:
        w = self.writer
        w.version_vector[origin] = max(w.version_vector.get(origin, 0), seq)
        w.durable_vv[origin] = max(w.durable_vv.get(origin, 0), seq)

    def _observe(self, seen: WriteBatch) -> None:
        """Tell the write path's commit observers (the anti-entropy tree, the
        Idempotency-Key cache) what the other processes committed, as one batch (write
        lock held, in the step that moved the version vectors): the stored rows of the
        deliveries they touched (the store's join of every process's writes), the merged
        registry states, their events and keys."""
        for observe in self.writer.commit_observers:
            observe(seen)

    async def _reload_registry(self, upto: Mapping[str, int]) -> None:
        """Merge every stored registry row into memory (a join: nothing of memory is
        lost; changed states to the commit observers), then count the origins of
        ``upto`` as held up to their seq. The events and deliveries of the records gone
        reach no observer: the anti-entropy tree is built again (``tree_stale``)."""
        states = await self.store.load_registry()
        deltas: dict[str, CRDT] = {}
        for key, data in states.items():
            try:
                deltas[key] = decode(data)
            except Exception as exc:  # noqa: BLE001 (crdt raises several types)
                log.error("registry row %s does not decode: %s", key, exc)
        seen = WriteBatch()
        async with self.writer.lock:
            try:
                for key, state in self.catalog.apply(deltas).items():
                    seen.registry[key] = state.to_bytes()
            except TypeError as exc:
                log.error("registry rows not merged: %s", exc)
            for origin, seq in upto.items():
                self._advance(origin, seq)
            self._observe(seen)
            self._tree_stale()
        self.reloads += 1
        log.info("registry merged from the store (records of %s gone)", sorted(upto))

    async def run_follow(self) -> None:
        """Follow until cancelled: at a NOTIFY of a commit (those within 10 ms in one
        round), else every ``follow_interval_ms``."""
        listener = asyncio.create_task(self._listen())
        r = self.settings.replication
        retry = min(r.follow_interval_ms / 1000, _RETRY_S)
        # a round at least this often keeps the store's fence (half of retired_compact_s,
        # which config keeps at 1 s or more on PostgreSQL: so never under 125 ms)
        interval = min(r.follow_interval_ms / 1000, r.retired_compact_s / 8)
        try:
            while True:
                self._wake.clear()
                try:
                    while await self.follow_once() >= _FOLLOW_BATCH:
                        pass
                except Exception as exc:  # try again at the next round
                    self._round_failed(exc)
                    await self.clock.sleep(retry)  # not woken by every commit's NOTIFY
                    continue
                self._round_succeeded()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(interval):
                        await self._wake.wait()
                # every commit that writes the log notifies: read
                # once per _COALESCE_S at most, not once per notification
                await self.clock.sleep(min(_COALESCE_S, interval))
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)

    def _round_failed(self, exc: Exception) -> None:
        self._failed_rounds += 1
        if self.following:
            self.following = False
            log.error(
                "reading the other processes' records failed (%s: %s): not acknowledging "
                "publishes (503) and unready until a read succeeds", type(exc).__name__, exc,
                exc_info=exc,
            )  # fmt: skip

    def _round_succeeded(self) -> None:
        self.coordinator.followed()
        if not self.following:
            log.warning("reading the other processes' records again after %d failed rounds: "
                        "acknowledging publishes", self._failed_rounds)  # fmt: skip
        self.following, self._failed_rounds = True, 0

    async def _listen(self) -> None:
        async for seen in self.coordinator.changes():
            # a commit this process holds already (its own; records the holder applied
            # itself) wakes no round: at N processes, 1/N of the notifications
            vv = self.writer.version_vector
            if not seen or any(s > vv.get(o, 0) for o, s in seen.items()):
                self._wake.set()

    # -- the replication role ---------------------------------------------------------------

    async def step_leader(self) -> bool:
        """Take, keep or give up the replication role once; returns ``leading``."""
        held = await self.coordinator.is_leader()
        if held and not self.leading:
            try:
                await self.follow_once()  # hold what the previous holder applied
                await self._start_role()
            except OSError as exc:  # the port is not free yet: next poll
                log.warning("replication role not started yet: %s", exc)
                await self._stop_role()
                return False
            self.leading = True
            log.info("%s holds the replication role of %s", self.writer.actor,
                     self.settings.region)  # fmt: skip
        elif not held and self.leading:
            self.leading = False
            await self._stop_role()
            log.warning("%s gave up the replication role", self.writer.actor)
        return self.leading

    async def run_leader(self) -> None:
        """Poll for the role every ``replication.leader_poll_s`` until cancelled (a
        failing step is logged once until a step succeeds again)."""
        failing = False
        while True:
            await self.clock.sleep(self.settings.replication.leader_poll_s)
            try:
                await self.step_leader()
            except Exception:
                if not failing:
                    log.exception("replication role step failed (logged once until one succeeds)")
                failing = True
            else:
                if failing:
                    log.warning("replication role step succeeded again")
                failing = False


def _delivery_ids(decoded: Decoded) -> list[str]:
    """The deliveries a record touches: its fan-out snapshot and its delivery."""
    ids = [d.id for d in decoded.deliveries]
    if decoded.delivery is not None:
        ids.append(decoded.delivery.id)
    return ids
