"""Recording delivery outcomes in batches: the delivery worker's write half.

Each attempt's outcome (or a skip, cancel, expiry or crash push-back) is queued with
``record`` and made durable by one writer task in batches: per batch one read of the
stored deliveries, one hold of the write lock, one own record per delivery (delivery state
and attempt, replicated as before) plus one ``registry`` record with the batch's usage
counter moves summed per (tenant, counter), all in one WriteBatch, so one atomic group
commit. ``record`` returns once that commit is durable (it raises what the commit raised).
Dead deliveries of the batch are emitted as operational events (core.operational) once
it is durable, under an event id every region derives alike; endpoint health transitions
are reported for the cluster by runtime/health_reports.py, told here which health input
made the transitions this region writes (``reports.hint``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any

from crdt import CRDT

from ..core.health import Health, HealthPolicy, behind
from ..core.health import step as health_step
from ..core.model import Attempt, Delivery, DeliveryStatus, WriteBatch, delivery_join
from ..core.operational import health_transition, operational_event_id
from .commit import lingers
from .health_reports import HealthReports
from .operational import OperationalEvents
from .ports import Clock, LocalWriter, Store
from .state import Catalog, DeliveryQueue

__all__ = ["Outcome", "OutcomeRecorder", "health_deltas"]

log = logging.getLogger("regionsync.delivery")

MAX_BATCH = 256  # outcomes per write-lock hold and WriteBatch

# operational event: (type, data, tenant, event id)
_Emit = tuple[str, dict[str, Any], str, str]


@dataclass(slots=True)
class Outcome:
    """What to record for ``delivery`` (as claimed): its new ``status``, next attempt
    time (ms, or None), attempt count, the attempt row (None if nothing was sent) and the
    health input of ``core.health.step`` (None if none)."""

    delivery: Delivery
    status: DeliveryStatus
    next_at_ms: int | None
    attempts: int
    attempt: Attempt | None
    health_event: str | None


class OutcomeRecorder:
    """Batches outcomes into durable local writes; ``run()`` is its writer task."""

    def __init__(
        self,
        region: str,
        catalog: Catalog,
        writer: LocalWriter,
        queue: DeliveryQueue,
        store: Store,
        clock: Clock,
        policy: HealthPolicy,
        ops: OperationalEvents | None = None,
        shared: bool = False,
        linger_s: float = 0.0,
    ):
        self.region, self.catalog, self.writer, self.queue = region, catalog, writer, queue
        # several processes deliver this region's deliveries (claims; runtime/cohort.py)
        self.shared = shared
        self.store, self.clock, self.policy, self.ops = store, clock, policy, ops
        self.health_url: dict[str, str] = {}  # endpoint id -> url its health view is of
        self.reports: HealthReports | None = None  # set by the node with operational events
        self._pending: list[tuple[Outcome, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._settling: set[asyncio.Task[None]] = set()
        # as the group commit does (runtime/commit.py): while groups are small, wait
        # ``linger_s`` for more outcomes, so one read and one write serve several
        self.linger_s, self._last_group = linger_s, 0

    async def record(self, outcome: Outcome) -> None:
        """Queue ``outcome``; returns once it is durable (of an outcome whose delivery a
        retry or recovery gave a new generation meanwhile: its attempt row alone)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((outcome, fut))
        self._wake.set()
        await fut

    async def run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                if lingers(self.linger_s, self._last_group, len(self._pending)):
                    await asyncio.sleep(self.linger_s)
                self._wake.clear()
                while self._pending:
                    group = self._pending[:MAX_BATCH]
                    del self._pending[:MAX_BATCH]
                    self._last_group = len(group)
                    try:
                        durable, emits = await self._write(group)
                    except asyncio.CancelledError:
                        _fail(group, ConnectionAbortedError("delivery worker stopped"))
                        raise
                    except Exception as exc:  # never leave a caller waiting
                        _fail(group, exc)
                        continue
                    task = asyncio.ensure_future(self._settle(durable, group, emits))
                    self._settling.add(task)
                    task.add_done_callback(self._settling.discard)
        finally:
            pending, self._pending = self._pending, []
            _fail(pending, ConnectionAbortedError("delivery worker stopped"))

    async def _write(
        self, group: list[tuple[Outcome, asyncio.Future[None]]]
    ) -> tuple[asyncio.Future[None] | None, list[_Emit]]:
        # read outside the lock (publishes wait for it), brought up to date under it
        ids = [o.delivery.id for o, _ in group]
        async with self.writer.unsettled.read(self.store, ids) as read:
            taken = await self._taken(group, read.rows)
            async with self.writer.local_lock():  # type: ignore[attr-defined]
                return self._build(group, read.current(), taken)

    async def _taken(
        self, group: list[tuple[Outcome, asyncio.Future[None]]], stored: dict[str, Delivery]
    ) -> dict[tuple[str, int], int]:
        """With several processes per region (``shared``): (delivery id, generation) ->
        the highest attempt number this region recorded, for each outcome whose number is
        recorded already (another process sent that attempt too, this one's claim having
        expired). Read outside the lock, only where the stored delivery counts that many
        attempts (rare)."""
        out: dict[tuple[str, int], int] = {}
        if not self.shared:  # one process: it never sends one attempt twice
            return out
        for o, _ in group:
            d, row = o.delivery, stored.get(o.delivery.id)
            if o.attempt is None or row is None or row.generation != d.generation:
                continue
            if row.attempts >= o.attempts:
                ns = [a.n for a in await self.store.attempts_of(d.id)
                      if a.region == self.region and a.generation == d.generation]  # fmt: skip
                if o.attempts in ns:
                    out[(d.id, d.generation)] = max(ns)
        return out

    def _build(
        self,
        group: list[tuple[Outcome, asyncio.Future[None]]],
        current: dict[str, Delivery],
        taken: dict[tuple[str, int], int],
    ) -> tuple[asyncio.Future[None] | None, list[_Emit]]:
        """``_write``'s part under the write lock: ``current`` holds each delivery's
        latest state (stored or submitted), ``taken`` attempt numbers this region has
        recorded (``_taken``)."""
        now = self.clock.wall_ms()
        emits: list[_Emit] = []
        batch = WriteBatch()
        moves: dict[tuple[str, str], int] = {}
        wrote = False
        for o, _ in group:
            d, attempt = o.delivery, o.attempt
            cur = current.get(d.id)
            finished = False
            if cur is not None and cur.generation != d.generation:
                # a retry or recovery started a new generation meanwhile: it alone decides
                # the delivery's state, but a request sent is an attempt row all the same
                if attempt is None:
                    continue
                new = cur
            else:
                attempts = o.attempts
                last = taken.get((d.id, d.generation))
                if attempt is not None and last is not None:
                    # this number is recorded already (by another process of this region):
                    # numbered after, so that no two rows share a key and one is lost
                    attempts = max(last, cur.attempts if cur is not None else 0) + 1
                    attempt = replace(attempt, n=attempts)
                new = replace(d, status=o.status, next_attempt_at_ms=o.next_at_ms,
                              attempts=attempts, updated_at_ms=now)  # fmt: skip
                if cur is not None:  # another custodian's outcome may have arrived meanwhile
                    new = delivery_join(cur, new)
                current[d.id] = new  # a second outcome of the same delivery builds on it
                was_final = cur is not None and cur.status.final
                finished = new.status.final and d.status is DeliveryStatus.PENDING
                finished = finished and not was_final
            if finished:
                # usage counters count deliveries by current status (README, "Usage
                # counters"): only a pending -> final transition moves them
                if d.region == self.region:
                    self.queue.count(d.tenant, -1)
                _move(moves, d.tenant, "backlog", -1)
                if new.status is DeliveryStatus.DELIVERED:
                    _move(moves, d.tenant, "deliveries_succeeded", 1)
                elif new.status is DeliveryStatus.DEAD:
                    _move(moves, d.tenant, "deliveries_failed", 1)
            deltas, change = health_deltas(
                self.catalog, self.queue, self.health_url, self.writer,
                d.endpoint_id, o.health_event, now, self.policy,
            )  # fmt: skip
            if change is not None and o.health_event and self.reports is not None:
                self.reports.hint(d.endpoint_id, change, o.health_event)
            if finished and new.status is DeliveryStatus.DEAD:
                emits.append(("delivery.dead", {
                    "tenant": d.tenant, "endpoint": d.endpoint_id, "delivery": d.id,
                    "event": d.event_id, "attempts": new.attempts}, d.tenant,
                    operational_event_id(f"{d.id}/{new.generation}")))  # fmt: skip
            batch.deliveries.append(new)
            if attempt is not None:
                batch.attempts.append(attempt)
            # every outcome is replicated (with the delivery's state, a kind "delivery"
            # record needs one): a region that takes custody over continues from these
            # attempts and this schedule, and every region shows every attempt
            self.writer.record_local("delivery", self.writer.stamp(), deltas, batch,
                                     delivery=new, attempt=attempt)  # fmt: skip
            wrote = True
        self.writer.add_usage(batch, moves)
        return (self.writer.submit(batch) if wrote else None), emits

    async def _settle(
        self,
        durable: asyncio.Future[None] | None,
        group: list[tuple[Outcome, asyncio.Future[None]]],
        emits: list[_Emit],
    ) -> None:
        try:
            if durable is not None:
                await durable
        except Exception as exc:
            _fail(group, exc)
            return
        if self.ops is not None:  # once per dead delivery this region wrote, once durable
            for event_type, data, tenant, event_id in emits:
                self.ops.emit(event_type, data, tenant, event_id=event_id)
        for _, fut in group:
            if not fut.done():
                fut.set_result(None)


def _move(moves: dict[tuple[str, str], int], tenant: str, counter: str, n: int) -> None:
    moves[(tenant, counter)] = moves.get((tenant, counter), 0) + n


def _fail(group: list[tuple[Outcome, asyncio.Future[None]]], exc: BaseException) -> None:
    for _, fut in group:
        if not fut.done():
            fut.set_exception(exc)


def health_deltas(
    catalog: Catalog,
    queue: DeliveryQueue,
    health_url: dict[str, str],
    writer: LocalWriter,
    endpoint_id: str,
    event: str | None,
    now_ms: int,
    policy: HealthPolicy,
) -> tuple[dict[str, CRDT], str | None]:
    """Apply one attempt's health input (core.health.step) to ``queue.health``; registry
    deltas if the replicated state (failing since / disabled) changed, and the operational
    event of that change (core.operational) or None. ``health_url`` records the url each
    health view is of. Call with the write lock held."""
    view = catalog.registry.endpoint(endpoint_id)
    if event is None or view is None:
        return {}, None
    before = queue.health.get(endpoint_id)
    if before is None or behind(before, view.state):  # e.g. re-enabled in another region
        before = Health(view.state, failing_since_ms=view.failing_since_ms)
    after = health_step(before, event, now_ms, policy)
    queue.health[endpoint_id] = after
    health_url[endpoint_id] = view.url
    fields: dict[str, Any] = {}
    if after.state == "disabled" and not view.disabled:
        fields = {"disabled": True, "failing_since": None}
        log.warning(
            "endpoint %s disabled (%s)", endpoint_id, event, extra={"endpoint_id": endpoint_id}
        )
    elif after.state == "failing" and view.failing_since_ms is None:
        fields = {"failing_since": after.failing_since_ms}
    elif after.state == "active" and view.failing_since_ms is not None:
        fields = {"failing_since": None}
    if not fields:
        return {}, None
    stamp = writer.stamp()
    deltas = catalog.registry.patch_endpoint(
        endpoint_id, fields, (), (), stamp.wall_ms, writer.actor, stamp
    )
    return deltas, health_transition(view.state, after.state)
