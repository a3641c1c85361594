"""CPU work whose cost a tenant controls, run off the event loop and fairly among tenants.

A small pool of threads runs the jobs (schemas checked at registration, payloads validated
against them, endpoints' filters applied to payloads and test-filter samples); the event
loop and the write lock never wait for one. A tenant has at most one job running and
``max_queued`` waiting (beyond, 429 ``cpu_busy``); a free thread takes the oldest job of
the next tenant in turn, so one tenant's costly jobs delay another tenant's by at most one
job per thread. Each job's cost is bounded by its input (the schema validation counts its
steps, core.event_types; a filter has at most 256 values, core.filters; bodies are at
most ``ingest.max_payload_bytes``).
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..errors import TooManyRequests

__all__ = ["Offload"]

T = TypeVar("T")


class Offload:
    """Runs ``run``'s jobs on ``threads`` threads, round-robin over tenants."""

    def __init__(self, threads: int, max_queued: int):
        self.threads, self.max_queued = threads, max_queued
        self._pool: ThreadPoolExecutor | None = None  # started at the first job
        self._waiting: OrderedDict[str, deque[tuple[Callable[[], Any], asyncio.Future[Any]]]]
        self._waiting = OrderedDict()  # tenant -> jobs not started, tenants in turn
        self._running: set[str] = set()  # tenants with a job on a thread

    async def run(self, tenant: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a thread once it is ``tenant``'s turn; its result or exception.
        TooManyRequests (field ``tenant``) when the tenant already has ``max_queued``
        jobs waiting."""
        jobs = self._waiting.get(tenant)
        if jobs is not None and len(jobs) >= self.max_queued:
            raise TooManyRequests(
                f"tenant {tenant!r} has {len(jobs)} payload checks waiting in this region",
                retry_after_s=1, code="cpu_busy", field="tenant",
            )  # fmt: skip
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append((lambda: fn(*args), done))
        self._dispatch()
        return await done

    def _dispatch(self) -> None:
        """Start jobs while a thread is free and a tenant without a running job waits."""
        loop = asyncio.get_running_loop()
        for tenant in list(self._waiting):
            if len(self._running) >= self.threads:
                return
            if tenant in self._running:
                continue
            jobs = self._waiting.pop(tenant)
            job, done = jobs.popleft()
            while done.cancelled() and jobs:  # its caller went away
                job, done = jobs.popleft()
            if jobs:
                self._waiting[tenant] = jobs  # its next job waits for the others' turn
            if done.cancelled():
                continue
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="offload")
            self._running.add(tenant)
            ran = loop.run_in_executor(self._pool, job)
            ran.add_done_callback(functools.partial(self._finished, tenant, done))

    def _finished(self, tenant: str, done: asyncio.Future[Any], ran: asyncio.Future[Any]) -> None:
        self._running.discard(tenant)
        if tenant in self._waiting:
            self._waiting.move_to_end(tenant)  # the others' turn first
        if ran.cancelled():
            done.cancel()
        elif not done.cancelled():
            if ran.exception() is not None:
                done.set_exception(ran.exception())  # type: ignore[arg-type]
            else:
                done.set_result(ran.result())
        self._dispatch()

    def close(self) -> None:
        """Stop the threads once their running jobs end; waiting jobs are dropped."""
        for jobs in self._waiting.values():
            for _job, done in jobs:
                done.cancel()
        self._waiting.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
