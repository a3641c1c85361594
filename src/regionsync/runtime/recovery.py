"""Recovery: re-sending deliveries as new generations (retry, recover, replay-missing)
and the attempt log's retention.

A new generation is owned by this region and keeps the event, so the same
``webhook-id``; it is replicated like any local write. Never sends anything itself: the
delivery worker picks up the new pending generations.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from crdt import CRDT

from ..config import Settings
from ..core.model import Delivery, DeliveryStatus, WriteBatch
from ..errors import NotFound
from .ports import Clock, IdSource, Store
from .state import Catalog, DeliveryQueue
from .writepath import WritePath

__all__ = ["Job", "Recovery"]

log = logging.getLogger("regionsync.node")


@dataclass
class Job:
    """A recovery job (``recover`` or ``replay-missing``) and its progress."""

    id: str
    tenant: str
    endpoint_id: str
    kind: str
    since_ms: int
    status: str  # running | succeeded | failed
    done: int = 0
    error: str | None = None
    started_at_ms: int = 0
    finished_at_ms: int | None = None


class Recovery:
    """Retries, recovery jobs (kept in ``jobs`` by id) and attempt purges of one region.

    ``spawn(coro, name)`` runs a background job as a task the node cancels on stop.
    """

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        writer: WritePath,
        queue: DeliveryQueue,
        *,
        store: Store,
        clock: Clock,
        ids: IdSource,
        spawn: Callable[[Coroutine[Any, Any, None], str], None],
    ):
        self.settings, self.region = settings, settings.region
        self.catalog, self.writer, self.queue = catalog, writer, queue
        self.store, self.clock, self.ids, self.spawn = store, clock, ids, spawn
        self.jobs: dict[str, Job] = {}

    async def retry_delivery(self, tenant_id: str, delivery_id: str) -> Delivery:
        """Re-send one delivery now, whatever its status: a new generation owned by this
        region, same event, so the same ``webhook-id``."""
        self.catalog.tenant(tenant_id)
        d = await self.store.get_delivery(delivery_id)
        if d is None or d.tenant != tenant_id:
            raise NotFound(f"no delivery {delivery_id!r}", field="delivery")
        async with self.writer.local_lock():
            new, durable = self._regenerate([d])
        await durable
        self.queue.wake.set()
        return new[0]

    def _regenerate(self, rows: list[Delivery]) -> tuple[list[Delivery], asyncio.Future[None]]:
        """New pending generations of ``rows`` owned here, replicated. Lock held."""
        now = self.clock.wall_ms()
        new = [
            replace(
                d,
                status=DeliveryStatus.PENDING,
                next_attempt_at_ms=now,
                attempts=0,
                region=self.region,
                updated_at_ms=now,
                generation=d.generation + 1,
            )
            for d in rows
        ]
        self.queue.backlog += len(new)
        deltas: dict[str, CRDT] = {}
        for tenant in {d.tenant for d in new}:
            n = sum(d.tenant == tenant for d in new)
            deltas.update(self.catalog.registry.count(tenant, "backlog", n, self.writer.actor))
        stamp = self.writer.stamp()
        batch = WriteBatch(deliveries=new)
        # one record per delivery keeps every record's body a single delivery
        durable = self.writer.commit_local("registry", stamp, deltas, batch)
        for d in new:
            durable = self.writer.commit_local("delivery", self.writer.stamp(), {}, delivery=d)
        return new, durable

    def start_job(self, tenant_id: str, endpoint_id: str, kind: str, since_ms: int) -> Job:
        """Start a background recovery job: ``recover`` re-sends dead deliveries of an
        endpoint since ``since_ms``, ``replay-missing`` the skipped ones."""
        self.catalog.endpoint(tenant_id, endpoint_id)
        job = Job(self.ids.new("job"), tenant_id, endpoint_id, kind, since_ms, "running",
                  started_at_ms=self.clock.wall_ms())  # fmt: skip
        self.jobs[job.id] = job
        self.spawn(self._run_job(job), f"job-{job.id}")
        return job

    async def _run_job(self, job: Job) -> None:
        status = DeliveryStatus.DEAD if job.kind == "recover" else DeliveryStatus.SKIPPED
        cursor = None
        try:
            while True:
                rows = await self.store.list_deliveries(
                    job.endpoint_id, status, job.since_ms, cursor, 200
                )
                if not rows:
                    break
                cursor = rows[-1].id
                async with self.writer.local_lock():
                    _, durable = self._regenerate(rows)
                await durable
                job.done += len(rows)
                self.queue.wake.set()
            job.status = "succeeded"
        except Exception as exc:
            log.exception("job %s failed", job.id)
            job.status, job.error = "failed", str(exc)
        job.finished_at_ms = self.clock.wall_ms()

    async def purge_attempts(self) -> int:
        """Delete attempts older than the retention, in small batches (ingest goes on)."""
        cutoff = self.clock.wall_ms() - int(self.settings.delivery.attempt_retention_s * 1000)
        total = 0
        while (n := await self.store.purge_attempts(cutoff, 1000)) > 0:
            total += n
            await asyncio.sleep(0)
        return total
