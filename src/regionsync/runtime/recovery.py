"""Recovery: re-sending deliveries as new generations (retry, recover, replay-missing)
and the attempt log's retention.

A new generation is owned by this region and keeps the event, so the same
``webhook-id``; it is replicated like any local write. Never sends anything itself: the
delivery worker picks up the new pending generations.

Recovery jobs are replicated registry state (``j/<job>``: fields, progress, cursor), so
any region answers for a job, and a job whose region dies is resumed from its cursor by
the region custody names for (its region, its endpoint) (runtime/custody.py); a region
resumes its own running jobs after a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from crdt import CRDT

from ..config import Settings
from ..core.model import Attempt, Delivery, DeliveryStatus, WriteBatch
from ..core.registry import gen_live
from ..errors import NotFound
from .audit import audit_section
from .ports import Clock, IdSource, Store
from .state import Catalog, DeliveryQueue, tenant_backlog_full
from .writepath import WritePath

__all__ = ["Job", "Recovery"]

log = logging.getLogger("regionsync.node")
JOB_PAGE = 200  # deliveries a recovery job reads and regenerates at a time
# the usage counter that counts deliveries in a final status (README, "Usage counters")
_STATUS_COUNTER = {
    DeliveryStatus.DELIVERED: "deliveries_succeeded",
    DeliveryStatus.DEAD: "deliveries_failed",
}


@dataclass
class Job:
    """A recovery job (``recover`` or ``replay-missing``) and its progress: ``region``
    started it (its owner for custody), ``cursor`` is the last delivery id handled."""

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
    region: str = ""
    cursor: str | None = None

    @classmethod
    def from_fields(cls, job_id: str, fields: Mapping[str, Any]) -> Job | None:
        """The job a registry value describes, or None if it is not one."""
        try:
            return cls(id=job_id, **{k: v for k, v in fields.items() if k != "id"})
        except TypeError:
            return None

    def fields(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "id"}


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
        runs_here: Callable[[str, str], bool] = lambda owner, endpoint: True,
        runs_jobs: Callable[[], bool] = lambda: True,
    ):
        self.settings, self.region = settings, settings.region
        self.catalog, self.writer, self.queue = catalog, writer, queue
        self.store, self.clock, self.ids, self.spawn = store, clock, ids, spawn
        self.runs_here = runs_here  # (owner region, endpoint id) -> custody is ours
        self._running: dict[str, None] = {}  # job ids with a runner in this process
        # False in a process without the region's replication role (runtime/cohort.py):
        # the holder runs the jobs (``run`` picks a recorded one up), never two processes
        self.runs_jobs = runs_jobs

    async def delivery(self, tenant_id: str, delivery_id: str) -> Delivery:
        """A delivery of the live tenant (``Catalog.delivery_visible``), else NotFound."""
        self.catalog.tenant(tenant_id)
        d = await self.store.get_delivery(delivery_id)
        event = None if d is None else await self.store.get_event(d.event_id)
        if d is None or not self.catalog.delivery_visible(tenant_id, d, event):
            raise NotFound(f"no delivery {delivery_id!r}", field="delivery")
        return d

    async def deliveries_page(
        self,
        tenant_id: str,
        endpoint_id: str,
        status: DeliveryStatus | None,
        since_ms: int | None,
        cursor: str | None,
        limit: int,
    ) -> tuple[list[Delivery], str | None]:
        """One page of the live endpoint's deliveries (its generation only) and the next
        cursor (None at the end). NotFound for a missing tenant or endpoint."""
        self.catalog.endpoint(tenant_id, endpoint_id)
        live = self.catalog.registry.endpoint_gen(endpoint_id, tenant_id)
        out: list[Delivery] = []
        while True:
            rows = await self.store.list_deliveries(endpoint_id, status, since_ms, cursor, limit)
            out.extend(d for d in rows if gen_live(d.owner_gen, live))
            if len(out) >= limit:
                return out[:limit], out[limit - 1].id
            if len(rows) < limit:
                return out, None
            cursor = rows[-1].id

    async def attempts_page(
        self,
        tenant_id: str,
        endpoint_id: str,
        succeeded: bool | None,
        since_ms: int | None,
        after: tuple[int, str, int] | None,
        limit: int,
        descending: bool = False,
    ) -> tuple[list[Attempt], tuple[int, str, int] | None]:
        """One page of the live endpoint's attempt log (its generation only; newest first
        when ``descending``) and the next cursor ``(at_ms, delivery id, n)`` (None at the
        end)."""
        self.catalog.endpoint(tenant_id, endpoint_id)
        live = self.catalog.registry.endpoint_gen(endpoint_id, tenant_id)
        out: list[Attempt] = []
        while True:
            rows = await self.store.list_attempts(
                endpoint_id, succeeded, since_ms, after, limit, descending
            )
            out.extend(a for a in rows if gen_live(a.owner_gen, live))
            if len(out) >= limit:
                last = out[limit - 1]
                return out[:limit], (last.at_ms, last.delivery_id, last.n)
            if len(rows) < limit:
                return out, None
            after = (rows[-1].at_ms, rows[-1].delivery_id, rows[-1].n)

    async def retry_delivery(self, tenant_id: str, delivery_id: str) -> Delivery:
        """Re-send one delivery now, whatever its status: a new generation owned by this
        region, same event, so the same ``webhook-id``. NotFound unless the delivery
        belongs to the live tenant and endpoint generation (``delivery``). The new
        generation follows the delivery's latest state, also one submitted but not yet
        stored (another retry, an outcome: ``WritePath.unsettled``). TooManyRequests
        when a finished delivery would add to the tenant's backlog at its share
        (``DeliveryQueue.tenant_full``)."""
        d = await self.delivery(tenant_id, delivery_id)
        if d.status is not DeliveryStatus.PENDING and self.queue.tenant_full(tenant_id):
            raise tenant_backlog_full(self.queue, tenant_id, 0.0)
        note = audit_section(
            "delivery.retry", f"delivery/{d.id}", tenant_id, f"endpoint={d.endpoint_id}"
        )
        async with self.writer.unsettled.read(self.store, [d.id]) as read:
            async with self.writer.local_lock():
                new, durable = self._regenerate([read.current().get(d.id, d)], note)
        await durable
        self.queue.add()
        return new[0]

    def _regenerate(
        self, rows: list[Delivery], audit: dict[str, str] | None = None
    ) -> tuple[list[Delivery], asyncio.Future[None]]:
        """New pending generations of ``rows`` owned here, replicated, each delivery's
        record with ``audit`` (an operator's retry; a job's start is audited). Lock held.

        Usage counters count deliveries by their current status (README, "Usage
        counters"): leaving ``delivered``/``dead`` takes one off ``deliveries_succeeded``/
        ``deliveries_failed``, and ``backlog`` grows only for a row that was not pending.

        An operator's re-send is sent now: an endpoint this region sees failing gets its
        next probe now (still one attempt at a time; the outcome moves its health as any
        probe's does), instead of waiting out a backoff of up to ``probe_max_s``.
        """
        now = self.clock.wall_ms()
        health = self.queue.health
        for eid in {d.endpoint_id for d in rows}:
            h = health.get(eid)
            if h is not None and h.state == "failing" and not h.probe_due(now):
                health[eid] = replace(h, next_probe_ms=now)
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
        reg, actor = self.catalog.registry, self.writer.actor
        moves: dict[tuple[str, str], int] = {}
        for d in rows:
            if d.status is DeliveryStatus.PENDING:
                continue
            moves[(d.tenant, "backlog")] = moves.get((d.tenant, "backlog"), 0) + 1
            self.queue.count(d.tenant, 1)
            left = _STATUS_COUNTER.get(d.status)
            if left is not None:
                moves[(d.tenant, left)] = moves.get((d.tenant, left), 0) - 1
        deltas: dict[str, CRDT] = {}
        for (tenant, counter), n in sorted(moves.items()):
            deltas.update(reg.count(tenant, counter, n, actor))
        stamp = self.writer.stamp()
        batch = WriteBatch(deliveries=new)
        # one record per delivery keeps every record's body a single delivery
        durable = self.writer.commit_local("registry", stamp, deltas, batch)
        for d in new:
            durable = self.writer.commit_local(
                "delivery", self.writer.stamp(), {}, delivery=d, audit=audit
            )
        return new, durable

    def job(self, tenant_id: str, job_id: str) -> Job:
        """A job of the tenant, as replicated to this region; NotFound otherwise."""
        fields = self.catalog.registry.job(job_id)
        job = Job.from_fields(job_id, fields) if fields is not None else None
        if job is None or job.tenant != tenant_id:
            raise NotFound(f"no job {job_id!r}", field="job")
        return job

    def _put(
        self,
        job: Job,
        extra: Mapping[str, CRDT] | None = None,
        audit: dict[str, str] | None = None,
    ) -> asyncio.Future[None]:
        """Record the job's fields (and ``extra`` deltas) as one local write. Lock held."""
        stamp = self.writer.stamp()
        deltas = {
            **(extra or {}),
            **self.catalog.registry.set_job(job.id, job.fields(), self.writer.actor, stamp),
        }
        return self.writer.commit_local("registry", stamp, deltas, audit=audit)

    async def start_job(self, tenant_id: str, endpoint_id: str, kind: str, since_ms: int) -> Job:
        """Start a background recovery job: ``recover`` re-sends dead deliveries of an
        endpoint since ``since_ms``, ``replay-missing`` the skipped ones. Returns once the
        job is recorded (durable, replicated like any registry change). A page is at most
        what the tenant's share of this region's backlog has room for
        (``DeliveryQueue.tenant_room``); at its share the job waits for it to drain."""
        self.catalog.endpoint(tenant_id, endpoint_id)
        job = Job(self.ids.new("job"), tenant_id, endpoint_id, kind, since_ms, "running",
                  started_at_ms=self.clock.wall_ms(), region=self.region)  # fmt: skip
        note = audit_section(f"job.{kind}", f"job/{job.id}", tenant_id, f"endpoint={endpoint_id}")
        async with self.writer.local_lock():
            durable = self._put(job, audit=note)
        await durable
        if self.runs_jobs():
            self._start(job)
        return job

    def _start(self, job: Job) -> None:
        self._running[job.id] = None
        self.spawn(self._run_job(job), f"job-{job.id}")

    async def run(self) -> None:
        """Resume running jobs custody gives this region (its own after a restart, a
        dead region's adopted ones), every ``replication.custody_interval_s``."""
        while True:
            await self.clock.sleep(self.settings.replication.custody_interval_s)
            for job_id, fields in self.catalog.jobs.items():
                job = Job.from_fields(job_id, fields)
                if job is None or job.status != "running" or job_id in self._running:
                    continue
                if self.runs_here(job.region, job.endpoint_id):
                    log.warning("resuming job %s of %s from %s", job.id, job.region, job.cursor)
                    self._start(job)

    async def _run_job(self, job: Job) -> None:
        status = DeliveryStatus.DEAD if job.kind == "recover" else DeliveryStatus.SKIPPED
        # the next page is read while the last one's commit is made durable (the cursor
        # moves in memory; commits are durable in order): at most two pages in flight
        durable: asyncio.Future[None] | None = None
        unsettled = self.writer.unsettled
        try:
            while self.runs_here(job.region, job.endpoint_id):
                room = self.queue.tenant_room(job.tenant)
                if room == 0:  # the tenant holds its share of the backlog: wait for it
                    await self.clock.sleep(self.settings.delivery.poll_interval_s)
                    continue
                page = JOB_PAGE if room is None else min(JOB_PAGE, room)
                with unsettled.pinned():  # the page is brought up to date under the lock
                    rows = await self.store.list_deliveries(
                        job.endpoint_id, status, job.since_ms, job.cursor, page
                    )
                    if not rows:
                        job.status = "succeeded"
                        break
                    live = self.catalog.registry.endpoint_gen(job.endpoint_id, job.tenant)
                    if live is None:
                        raise NotFound(
                            f"endpoint {job.endpoint_id!r} was deleted", field="endpoint"
                        )
                    job.cursor = rows[-1].id
                    # never into a re-created endpoint id: only its own generation's rows
                    rows = [d for d in rows if gen_live(d.owner_gen, live)]
                    async with self.writer.local_lock():
                        # as they are now: a row retried or re-sent since the page was
                        # read is left to that generation, not regenerated twice
                        current = unsettled.current({d.id: d for d in rows}, [d.id for d in rows])
                        rows = [c for d in rows if (c := current[d.id]).status is status]
                        job.done += len(rows)
                        if rows:  # regenerated first: a crash before the cursor moves redoes it
                            self._regenerate(rows)
                        last, durable = durable, self._put(job)  # in order: after both
                if last is not None:
                    await last
                    self.queue.add()
            if durable is not None:
                await durable
                self.queue.add()
        except Exception as exc:
            log.exception("job %s failed", job.id)
            job.status, job.error = "failed", str(exc)
            if durable is not None:  # a page's commit not awaited: its error is logged
                durable.add_done_callback(lambda f: f.cancelled() or f.exception())
        finally:
            self._running.pop(job.id, None)
        if job.status != "running":  # else custody moved on: the custodian resumes it
            job.finished_at_ms = self.clock.wall_ms()
            async with self.writer.local_lock():
                durable = self._put(job)
            await durable

    async def purge_attempts(self) -> int:
        """Delete attempts older than the retention, in small batches (ingest goes on)."""
        cutoff = self.clock.wall_ms() - int(self.settings.delivery.attempt_retention_s * 1000)
        total = 0
        while (n := await self.store.purge_attempts(cutoff, 1000)) > 0:
            total += n
            await asyncio.sleep(0)
        return total
