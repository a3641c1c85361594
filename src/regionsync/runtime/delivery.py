"""The region's delivery worker: claims due deliveries, signs, sends, records, retries.

Owns only deliveries of this region (the origin region delivers its own events). Attempts
run concurrently up to ``delivery.concurrency`` per node and each endpoint's
``max_in_flight``; what to do after an attempt is the pure ``core.retry.next_step``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from dataclasses import replace

from ..core.model import Attempt, Delivery, DeliveryStatus, WriteBatch
from ..core.retry import AttemptOutcome, OutcomeKind, next_step
from ..core.signing import signature_headers
from .node import Node
from .ports import OutboundRequest

__all__ = ["USER_AGENT", "DeliveryWorker"]

log = logging.getLogger("regionsync.delivery")
USER_AGENT = "regionsync/0.1 (+https://github.com/regionsync)"
_CRASH_BACKOFF_S = 60.0


class DeliveryWorker:
    """Runs attempts for one node; ``run()`` loops until cancelled."""

    def __init__(self, node: Node):
        self.node = node
        self.opts = node.settings.delivery
        self.inflight: dict[str, str] = {}  # delivery id -> endpoint id
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        node = self.node
        try:
            while True:
                node.delivery_wake.clear()
                await self._launch_due()
                now = node.clock.wall_ms()
                nxt = await node.store.next_due_ms(node.region)
                wait = self.opts.poll_interval_s
                if nxt is not None and nxt > now:
                    wait = min(wait, (nxt - now) / 1000)
                try:
                    async with asyncio.timeout(wait):
                        await node.delivery_wake.wait()
                except TimeoutError:
                    pass
        finally:
            for t in self._tasks:
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _launch_due(self) -> None:
        node = self.node
        free = self.opts.concurrency - len(self.inflight)
        if free <= 0:
            return
        due = await node.store.due_deliveries(
            node.region, node.clock.wall_ms(), free * 4, list(self.inflight)
        )
        per_endpoint = Counter(self.inflight.values())
        for d in due:
            if free <= 0:
                break
            ep = node.registry.endpoint(d.endpoint_id, d.tenant)
            cap = ep.max_in_flight if ep is not None else 1
            if per_endpoint[d.endpoint_id] >= cap:
                continue  # this lane is full; others go on
            per_endpoint[d.endpoint_id] += 1
            free -= 1
            self.inflight[d.id] = d.endpoint_id
            task = asyncio.create_task(self._attempt(d))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _attempt(self, d: Delivery) -> None:
        node = self.node
        try:
            await self._attempt_inner(d)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("delivery %s: attempt crashed; retrying later", d.id)
            # never a hot loop: push the delivery back as a failed try would be
            later = node.clock.wall_ms() + int(_CRASH_BACKOFF_S * 1000)
            with contextlib.suppress(Exception):
                await self._record(d, DeliveryStatus.PENDING, later, d.attempts, None)
        finally:
            self.inflight.pop(d.id, None)
            node.delivery_wake.set()

    async def _attempt_inner(self, d: Delivery) -> None:
        node = self.node
        event = await node.store.get_event(d.event_id)
        ep = node.registry.endpoint(d.endpoint_id, d.tenant)
        attempt: Attempt | None = None
        if event is None or ep is None:
            status, next_at, attempts = DeliveryStatus.CANCELLED, None, d.attempts
        elif ep.paused or ep.disabled:
            status, next_at, attempts = DeliveryStatus.SKIPPED, None, d.attempts
        else:
            ts = node.clock.wall_ms() // 1000
            headers = {
                **ep.headers,
                "content-type": "application/json",
                "user-agent": USER_AGENT,
                **signature_headers([ep.secret], event.id, ts, event.payload),
            }
            outcome = await node.sender.send(
                OutboundRequest(ep.url, headers, event.payload, self.opts.timeout_s)
            )
            attempts = d.attempts + 1
            now = node.clock.wall_ms()
            decision = next_step(
                outcome,
                attempts,
                now,
                event.received_at_ms,
                node.rng.uniform(-1.0, 1.0),
                self.opts.retry_schedule_s,
            )
            status, next_at = decision.status, decision.next_attempt_at_ms
            attempt = _attempt_row(d.id, attempts, now, node.region, outcome)
        await self._record(d, status, next_at, attempts, attempt)

    async def _record(
        self,
        d: Delivery,
        status: DeliveryStatus,
        next_at: int | None,
        attempts: int,
        attempt: Attempt | None,
    ) -> None:
        node = self.node
        async with node.write_lock:
            now = node.clock.wall_ms()
            new = replace(
                d, status=status, next_attempt_at_ms=next_at, attempts=attempts, updated_at_ms=now
            )
            batch = WriteBatch(deliveries=[new], attempts=[attempt] if attempt else [])
            if not status.final:
                durable = node.committer.submit(batch)
            else:
                # a final outcome is replicated, with the usage counters it changes
                if d.status is DeliveryStatus.PENDING:
                    node.backlog -= 1
                reg = node.registry
                deltas = dict(reg.count(d.tenant, "backlog", -1, node.actor))
                if status is DeliveryStatus.DELIVERED:
                    deltas.update(reg.count(d.tenant, "deliveries_succeeded", 1, node.actor))
                elif status is DeliveryStatus.DEAD:
                    deltas.update(reg.count(d.tenant, "deliveries_failed", 1, node.actor))
                stamp = node.stamp()
                durable = node.commit_local("delivery", stamp, deltas, batch, delivery=new)
        await durable


def _attempt_row(
    delivery_id: str, n: int, now_ms: int, region: str, outcome: AttemptOutcome
) -> Attempt:
    error = None if outcome.kind is OutcomeKind.SUCCEEDED else outcome.reason
    return Attempt(
        delivery_id=delivery_id,
        n=n,
        at_ms=now_ms,
        region=region,
        status_code=outcome.status_code,
        latency_ms=round(outcome.latency_ms, 3),
        error=error,
        response_excerpt=outcome.response_excerpt,
    )
