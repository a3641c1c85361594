"""Group commit: one writer task turns concurrently submitted WriteBatches into one
durable Store transaction each round, and resolves every submitter's future only after
that transaction committed (PostgreSQL's and SQLite-WAL applications' classic group
commit: the fsync cost is shared by everyone who queued during the previous commit).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..core.model import WriteBatch, add_moves
from .ports import Store

__all__ = ["LINGER_BELOW", "GroupCommitter", "lingers", "merge_batches"]

LINGER_BELOW = 8  # a group of fewer lingers (``GroupCommitter``, the outcome recorder)


def lingers(linger_s: float, last_group: int, queued: int, below: int = LINGER_BELOW) -> bool:
    """Should a batching writer wait ``linger_s`` for company before its next group: a
    linger is set and both the previous group and what is queued hold fewer than
    ``below``? Under load groups are larger and nobody waits."""
    return linger_s > 0 and max(last_group, queued) < below


log = logging.getLogger("regionsync.commit")


def merge_batches(batches: list[WriteBatch]) -> WriteBatch:
    """One WriteBatch equal to committing ``batches`` in order.

    Registry states and deliveries are full states: the later one of a key wins (it was
    built on the earlier). Version vector entries take the max; usage moves add up; the
    rest concatenate.
    """
    out = WriteBatch()
    for b in batches:
        out.registry.update(b.registry)
        out.records.extend(b.records)
        for origin, seq in b.version_vector.items():
            out.version_vector[origin] = max(out.version_vector.get(origin, 0), seq)
        out.events.extend(b.events)
        out.attempts.extend(b.attempts)
        out.idempotency.extend(b.idempotency)
        out.audit.extend(b.audit)
        add_moves(out.usage, b.usage)
    deliveries = {}
    for b in batches:
        for d in b.deliveries:
            deliveries[d.id] = d
    out.deliveries = list(deliveries.values())
    return out


class GroupCommitter:
    """Single writer over ``store``.

    ``submit(batch)`` returns a future that resolves once the batch is durable, or
    raises the commit's exception. Up to ``max_batches`` queued submissions share a
    commit; after the first arrives the writer waits ``linger_s`` (seconds; 0 = just
    what queued while the previous commit ran) while commits are small: when the
    previous group and the queue both hold fewer than ``linger_below`` submissions.
    Under load the groups are larger and nobody waits (throughput as without a linger);
    at a light load a commit's fixed CPU (the transaction, its fsync, the writer's
    thread hop) is shared by the few submissions the linger gathers (issue 44,
    bench/README.md "cpu.py"). If a commit fails, it and every submission queued behind
    it fail (they were built on state that is now not durable) and ``on_failure`` is
    called so the owner can reload its state from the store; every submission after it
    fails at once with the same exception until the owner calls ``resume`` (its state
    reloaded), so nothing built on the failed state commits, and nothing commits while
    the state is being reloaded. ``observe`` gets each successful commit's duration in
    seconds on the ``monotonic`` clock. ``before_commit(merged, whole_queue)`` is called
    with each group's merged batch just before it is written (``whole_queue``: nothing
    was left queued behind the group) and may add to it.
    """

    def __init__(
        self,
        store: Store,
        *,
        max_batches: int = 512,
        linger_s: float = 0.0,
        linger_below: int = LINGER_BELOW,
        on_commit: Callable[[WriteBatch], None] | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        monotonic: Callable[[], float] | None = None,
        observe: Callable[[float], None] | None = None,
        before_commit: Callable[[WriteBatch, bool], None] | None = None,
    ):
        self.store = store
        self.max_batches = max_batches
        self.linger_s, self.linger_below = linger_s, linger_below
        self._last_group = 0  # submissions in the previous commit (linger only after few)
        self.on_commit = on_commit
        self.on_failure = on_failure
        self.monotonic, self.observe = monotonic, observe  # commit duration (s), if given
        self.before_commit = before_commit
        self._queue: list[tuple[WriteBatch, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self.halted: BaseException | None = None  # the failure submissions get until resume
        self.commits = 0
        self.batches = 0

    @property
    def queued(self) -> int:
        """Submissions waiting for a commit (part of the ingest saturation)."""
        return len(self._queue)

    def submit(self, batch: WriteBatch) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.halted is not None:
            fut.set_exception(self.halted)
            return fut
        self._queue.append((batch, fut))
        self._wake.set()
        return fut

    async def run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                below = min(self.linger_below, self.max_batches)
                if lingers(self.linger_s, self._last_group, len(self._queue), below):
                    await asyncio.sleep(self.linger_s)
                self._wake.clear()
                group = self._queue[: self.max_batches]
                del self._queue[: len(group)]
                whole_queue = not self._queue
                if self._queue:
                    self._wake.set()
                if group:
                    self._last_group = len(group)
                    await self._commit(group, whole_queue)
        finally:
            self._fail_all(ConnectionAbortedError("node stopped before the commit"))

    async def _commit(
        self, group: list[tuple[WriteBatch, asyncio.Future[None]]], whole_queue: bool = True
    ) -> None:
        merged = merge_batches([b for b, _ in group])
        if self.before_commit is not None:
            self.before_commit(merged, whole_queue)
        started = self.monotonic() if self.monotonic is not None else 0.0
        try:
            await self.store.commit(merged)
        except asyncio.CancelledError:  # the node stops: no submitter waits forever
            for _, fut in group:
                if not fut.done():
                    fut.set_exception(ConnectionAbortedError("node stopped during the commit"))
            raise
        except Exception as exc:
            log.error("commit of %d batches failed: %r", len(group), exc)
            self.halted = exc
            for _, fut in group:
                if not fut.done():
                    fut.set_exception(exc)
            self._fail_all(exc)
            if self.on_failure is not None:
                self.on_failure(exc)
            return
        if self.monotonic is not None and self.observe is not None:
            self.observe(self.monotonic() - started)
        self.commits += 1
        self.batches += len(group)
        if self.on_commit is not None:
            self.on_commit(merged)
        for _, fut in group:
            if not fut.done():
                fut.set_result(None)

    def resume(self) -> None:
        """Accept submissions again (the owner reloaded its state after a failure)."""
        self.halted = None

    def _fail_all(self, exc: BaseException) -> None:
        queued, self._queue = self._queue, []
        for _, fut in queued:
            if not fut.done():
                fut.set_exception(exc)
