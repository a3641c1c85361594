"""``registry_hash`` of ``GET /v1/cluster`` without stalling the event loop (issue 42).

``registry_hash`` (core.registry_state ``state_hash``: sha256 over every non-empty state
in key order) costs O(registry): 1.2-1.8 s at 1M keys, on the loop, after every write.
Regions of earlier releases compare it, so it is kept, but over a registry larger than
``SYNC_KEYS`` it is worked out on a thread at most every ``REFRESH_S`` seconds and served
from this cache with its age (``registry_hash_age_s``; 0: current). ``registry_digest``
(``RegistryState.digest``) is the exact, O(1) figure to compare between regions of this
release.
"""

from __future__ import annotations

import asyncio
import contextlib

from ..core.registry_state import hash_items
from .ports import Clock
from .state import Catalog

__all__ = ["REFRESH_S", "SYNC_KEYS", "RegistryHash"]

SYNC_KEYS = 20_000  # at most this many keys: worked out on the loop when read (< ~30 ms)
REFRESH_S = 5.0  # a stale cached hash is worked out again at most this often


class RegistryHash:
    """The cached ``registry_hash`` of one node's registry (``catalog.registry``)."""

    def __init__(self, catalog: Catalog, clock: Clock):
        self.catalog, self.clock = catalog, clock
        self.value: str | None = None  # the last hash worked out on a thread
        self.taken_at: float | None = None  # monotonic s when its state was taken
        self.task: asyncio.Task[None] | None = None
        self.computed = 0  # hashes worked out on a thread (tests)

    def read(self) -> tuple[str | None, float]:
        """``(registry_hash, age_s)``: exact with age 0 when the registry's own cached
        hash is current or the registry is small; else the last one worked out (None
        before the first) and how old the state it hashed is. Starts a refresh when the
        cached one is older than ``REFRESH_S`` and none runs. Never O(registry) on the
        loop for a large registry."""
        reg = self.catalog.registry
        if (h := reg.cached_hash()) is not None:
            return h, 0.0
        if len(reg) <= SYNC_KEYS:
            return reg.state_hash(), 0.0
        now = self.clock.monotonic()
        stale = self.taken_at is None or now - self.taken_at >= REFRESH_S
        if stale and (self.task is None or self.task.done()):
            self.task = asyncio.get_running_loop().create_task(self._refresh())
        age = 0.0 if self.taken_at is None else now - self.taken_at
        return self.value, age

    async def ready(self) -> None:
        """Wait (off the loop) for a first hash if there is none yet and one is needed."""
        self.read()
        if self.value is None and self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self.task)

    async def _refresh(self) -> None:
        reg = self.catalog.registry
        changes, taken_at = reg.changes, self.clock.monotonic()
        items = reg.sorted_items  # the copy is taken on the thread, in one C call
        value = await asyncio.to_thread(lambda: hash_items(items()))
        self.value, self.taken_at = value, taken_at
        self.computed += 1
        if self.catalog.registry is reg:
            reg.set_hash(value, changes)  # exact again if nothing changed meanwhile
