"""The local write path: one lock, HLC stamps, own log records, group commit, durability
futures and the wake-ups of replication links waiting for new log records.

Owns the HLC, this node's actor and its version vectors (``version_vector``: what
memory holds, ``durable_vv``: what the store committed). Never decides what to write:
callers build deltas and batches under ``lock`` and await the returned future after
releasing it (a caller is answered only once its change is durable).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from crdt import CRDT, HLC, Timestamp

from ..config import Settings
from ..core.model import Delivery, Event, Record, WriteBatch
from ..core.records import encode_body
from .commit import GroupCommitter
from .ports import Clock, Store
from .state import Catalog, IdempotencyRow

__all__ = ["WritePath"]


class WritePath:
    """Serializes local writes; see the module docstring. ``open`` before use."""

    def __init__(self, settings: Settings, store: Store, clock: Clock, catalog: Catalog):
        self.settings, self.store, self.clock, self.catalog = settings, store, clock, catalog
        self.hlc = HLC(max_drift_ms=settings.replication.max_drift_ms)
        self.lock = asyncio.Lock()
        self.incarnation = 0
        self.actor = ""
        self.version_vector: dict[str, int] = {}
        self.durable_vv: dict[str, int] = {}
        self._log_waiters: dict[asyncio.Event, None] = {}  # ordered: deterministic wake-ups
        self.committer: GroupCommitter | None = None

    def open(self, region: str, incarnation: int, version_vector: Mapping[str, int]) -> None:
        """Take the actor ``region:incarnation`` and the stored version vector."""
        self.incarnation = incarnation
        self.actor = f"{region}:{incarnation}"
        self.version_vector = dict(version_vector)
        self.durable_vv = dict(version_vector)

    def start_committer(self, on_failure: Callable[[BaseException], None]) -> GroupCommitter:
        """Create the group committer (the caller runs its ``run()`` as a task)."""
        opts = self.settings.ingest
        self.committer = GroupCommitter(
            self.store,
            max_batches=opts.commit_max_batches,
            linger_s=opts.commit_linger_ms / 1000,
            on_commit=self._on_commit,
            on_failure=on_failure,
        )
        return self.committer

    async def resume_hlc(self) -> None:
        """Resume the HLC from this actor's last own record, if the log keeps one."""
        own_seq = self.version_vector.get(self.actor, 0)
        if own_seq:
            skip = {o: 1 << 62 for o in self.version_vector}  # other origins skipped
            last = await self.store.records_after({**skip, self.actor: own_seq - 1}, 1)
            if last:  # truncation keeps an actor's last own record, unless forced
                self.hlc = HLC(self.settings.replication.max_drift_ms, Timestamp(*last[0].hlc))

    def _on_commit(self, batch: WriteBatch) -> None:
        for origin, seq in batch.version_vector.items():
            self.durable_vv[origin] = max(self.durable_vv.get(origin, 0), seq)
        self.notify_log()

    @property
    def queued(self) -> int:
        """Submissions waiting for the next group commit."""
        return self.committer.queued if self.committer is not None else 0

    def stamp(self) -> Timestamp:
        """A new HLC stamp for a local write (monotonic, wall time in ms)."""
        return self.hlc.now(self.clock.wall_ms())

    def submit(self, batch: WriteBatch) -> asyncio.Future[None]:
        """Queue ``batch`` (replicated or local state, no own record) for group commit."""
        assert self.committer is not None, "open the write path first"
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
    ) -> asyncio.Future[None]:
        """Apply ``deltas`` in memory and queue them, with a new own record, for the next
        group commit. Call with ``lock`` held; await the returned future after releasing
        it (it resolves once the change is durable). The record carries ``event``,
        ``delivery``, ``deliveries`` and ``idempotency`` (core.records)."""
        batch = batch or WriteBatch()
        changed = self.catalog.apply(deltas)
        seq = self.version_vector.get(self.actor, 0) + 1
        body = encode_body(dict(deltas), event, delivery, idempotency, deliveries)
        batch.records.append(Record(self.actor, seq, kind, body, (stamp.wall_ms, stamp.logical)))
        batch.version_vector[self.actor] = seq
        batch.registry.update({k: v.to_bytes() for k, v in changed.items()})
        self.version_vector[self.actor] = seq
        return self.submit(batch)

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
