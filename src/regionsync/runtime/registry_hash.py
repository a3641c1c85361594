"""``registry_hash`` of ``GET /v1/cluster`` without stalling the event loop (issue 42).

``registry_hash`` (core.registry_state ``state_hash``: sha256 over every non-empty state
in key order) costs O(registry): 1.2-1.8 s at 1M keys. Regions of earlier releases
compare it, so it is kept, but over a registry larger than ``SYNC_KEYS`` it is worked out
in the background and served from this cache with its age (``registry_hash_age_s``; 0:
current). ``registry_digest`` (``RegistryState.digest``) is the exact, O(1) figure to
compare between regions of this release.

The background work runs on the loop in slices (runtime/slicing.py), not on a thread: a
thread running Python holds the GIL, and the loop then waited up to a switch interval
(5 ms) after every system call, which made a publish during a join take seconds. The
state is a copy taken at once (one C call, ~30 ms at 1M keys); its keys are sorted in
runs of ``RUN``, merged and hashed a slice at a time. A refresh starts at most every
``REFRESH_S`` seconds and at most every ``COST_FACTOR`` times the last refresh's
duration, so at scale the hash costs a bounded share of the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
from collections.abc import Mapping

from ..core.registry_state import hash_update
from .ports import Clock
from .slicing import Slicer
from .state import Catalog

__all__ = ["COST_FACTOR", "REFRESH_S", "RUN", "SYNC_KEYS", "RegistryHash", "hash_in_slices"]

SYNC_KEYS = 20_000  # at most this many keys: worked out on the loop when read (< ~30 ms)
REFRESH_S = 5.0  # a stale cached hash is worked out again at most this often
COST_FACTOR = 10.0  # ... and at most every this many times the last one's duration
RUN = 2_048  # keys sorted at once (~1 ms)


async def hash_in_slices(states: Mapping[str, bytes], slicer: Slicer) -> str:
    """``hash_items`` of ``states`` (key -> canonical bytes) in key order, returning to
    the loop whenever ``slicer`` says a slice has run its time: keys sorted in runs of
    ``RUN``, the runs merged."""
    keys = list(states)
    runs = []
    for i in range(0, len(keys), RUN):
        run = keys[i : i + RUN]
        run.sort()
        runs.append(run)
        await slicer.tick()
    h = hashlib.sha256()
    for n, key in enumerate(heapq.merge(*runs)):
        hash_update(h, key, states[key])
        if not n & 255:
            await slicer.tick()
    return h.hexdigest()


class RegistryHash:
    """The cached ``registry_hash`` of one node's registry (``catalog.registry``)."""

    def __init__(self, catalog: Catalog, clock: Clock):
        self.catalog, self.clock = catalog, clock
        self.value: str | None = None  # the last hash worked out in the background
        self.taken_at: float | None = None  # monotonic s when its state was taken
        self.took = 0.0  # seconds the last refresh took, its pauses counted
        self.task: asyncio.Task[None] | None = None
        self.computed = 0  # hashes worked out in the background (tests)

    def read(self) -> tuple[str | None, float]:
        """``(registry_hash, age_s)``: exact with age 0 when the registry's own cached
        hash is current or the registry is small; else the last one worked out (None
        before the first) and how old the state it hashed is. Starts a refresh when the
        cached one is older than ``REFRESH_S`` and ``COST_FACTOR`` times the last
        refresh's duration, and none runs. Never O(registry) on the
        loop at once for a large registry."""
        reg = self.catalog.registry
        if (h := reg.cached_hash()) is not None:
            return h, 0.0
        if len(reg) <= SYNC_KEYS:
            return reg.state_hash(), 0.0
        now = self.clock.monotonic()
        interval = max(REFRESH_S, COST_FACTOR * self.took)
        stale = self.taken_at is None or now - self.taken_at >= interval
        if stale and (self.task is None or self.task.done()):
            self.task = asyncio.get_running_loop().create_task(self._refresh())
        age = 0.0 if self.taken_at is None else now - self.taken_at
        return self.value, age

    async def ready(self) -> None:
        """Wait for a first hash if there is none yet and one is needed."""
        self.read()
        if self.value is None and self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self.task)

    async def _refresh(self) -> None:
        reg = self.catalog.registry
        changes, taken_at = reg.changes, self.clock.monotonic()
        value = await hash_in_slices(reg.snapshot(), Slicer())
        self.took = self.clock.monotonic() - taken_at
        self.value, self.taken_at = value, taken_at
        self.computed += 1
        if self.catalog.registry is reg:
            reg.set_hash(value, changes)  # exact again if nothing changed meanwhile
