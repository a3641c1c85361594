"""Idempotency-Keys looked up in the store behind a bounded LRU cache (issue 17: memory
bounded by configuration, not by the keys of the last 24 h).

A row is ``(tenant, key, event id, body digest, accepted at ms, region)``. The store is
the authority for every row that is durable; memory holds the rows not yet committed
(``pending``, bounded by the group commit's queue) and a cache of at most
``cache_entries`` recently used rows. Rows merge by "the earliest acceptance wins" (ties:
the smaller event id), in the store and here alike, so every region settles on the same
event for a key.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from ..core.model import WriteBatch
from .ports import Store

__all__ = ["IdempotencyKeys", "IdempotencyRow"]

# (tenant, key, event id, body digest, accepted at ms, region): a replicated key row
IdempotencyRow = tuple[str, str, str, str, int, str]
# what a lookup answers: (event id, body digest, region, accepted at ms)
Found = tuple[str, str, str, int]


def _earlier(a: IdempotencyRow | None, b: IdempotencyRow | None) -> IdempotencyRow | None:
    """The row that wins a merge: the earlier acceptance, then the smaller event id."""
    if a is None or b is None:
        return a or b
    return a if (a[4], a[2]) <= (b[4], b[2]) else b


class IdempotencyKeys:
    """The Idempotency-Keys of one node: ``lookup`` (async, may read the store) and
    ``get`` (memory only, for the re-check under the write lock), ``remember`` for a key
    accepted here, ``merge`` for a replicated row, ``committed`` as a commit observer.

    ``cache_entries`` (config ``ingest.idempotency_cache_entries``, >= 1): the bound of
    the LRU cache of durable rows; a miss costs one primary-key read of the store.
    """

    def __init__(self, store: Store, cache_entries: int = 100_000):
        self.store, self.cache_entries = store, cache_entries
        self.cache: OrderedDict[tuple[str, str], IdempotencyRow] = OrderedDict()
        self.pending: dict[tuple[str, str], IdempotencyRow] = {}  # not yet durable
        self.hits = self.misses = 0  # cache hits and store reads (tests, bench)

    def reset(self) -> None:
        """Forget what memory holds (after a failed commit: the store is the truth)."""
        self.cache.clear()
        self.pending.clear()

    def _cache(self, k: tuple[str, str], row: IdempotencyRow) -> None:
        self.cache[k] = row
        self.cache.move_to_end(k)
        while len(self.cache) > self.cache_entries:
            self.cache.popitem(last=False)

    @staticmethod
    def _live(row: IdempotencyRow | None, now_ms: int, ttl_ms: int) -> Found | None:
        if row is None or row[4] + ttl_ms < now_ms:
            return None  # unknown, or expired: the key may be used again
        return row[2], row[3], row[5], row[4]

    def get(self, tenant: str, key: str, now_ms: int, ttl_ms: int) -> Found | None:
        """The live row of a key as memory knows it (pending or cached), or None."""
        k = (tenant, key)
        return self._live(_earlier(self.pending.get(k), self.cache.get(k)), now_ms, ttl_ms)

    async def lookup(self, tenant: str, key: str, now_ms: int, ttl_ms: int) -> Found | None:
        """The live row of a key, or None (unknown, or older than ``ttl_ms``): memory
        first, else one read of the store (``Store.get_idempotency``), whose row is then
        cached. Raises what the store raises."""
        k = (tenant, key)
        cached = self.cache.get(k)
        if cached is not None:
            self.hits += 1
            self.cache.move_to_end(k)
            stored = cached
        else:
            self.misses += 1
            stored = await self.store.get_idempotency(tenant, key)
            if stored is not None:
                stored = _earlier(stored, self.cache.get(k))  # a merge while we read
                self._cache(k, stored)
        return self._live(_earlier(self.pending.get(k), stored), now_ms, ttl_ms)

    def remember(self, row: IdempotencyRow) -> None:
        """A key accepted here (the caller looked it up under the write lock: free)."""
        k = (row[0], row[1])
        self.pending[k] = row
        self._cache(k, row)

    def merge(self, row: IdempotencyRow) -> None:
        """A replicated row: kept until durable; a cached row of the key is replaced if
        ``row`` wins (the store keeps the winner of what it holds and ``row``)."""
        k = (row[0], row[1])
        self.pending[k] = _earlier(self.pending.get(k), row)  # type: ignore[assignment]
        if k in self.cache:
            self.cache[k] = _earlier(self.cache[k], row)  # type: ignore[assignment]

    def committed(self, batch: WriteBatch) -> None:
        """Commit observer: rows of ``batch`` are durable, the store answers for them."""
        for row in batch.idempotency:
            k = (row[0], row[1])
            if self.pending.get(k) == row:
                del self.pending[k]

    async def expire(self, before_ms: int, batch: int = 5000) -> int:
        """Forget rows accepted before ``before_ms``, in memory and in the store, the
        store's in deletes of at most ``batch`` rows (each its own short transaction, so
        the write lock is never held long); returns how many rows the store deleted.
        Raises what the store raises."""
        for table in (self.cache, self.pending):
            for k in [k for k, row in table.items() if row[4] < before_ms]:
                del table[k]
        total = 0
        while True:
            n = await self.store.purge_idempotency(before_ms, batch)
            total += n
            if n < batch:
                return total

    async def rows_by_event(self, event_ids: Sequence[str]) -> dict[str, list[IdempotencyRow]]:
        """event id -> its key rows (for anti-entropy items): the store's, and pending
        ones, for ``event_ids`` only. Raises what the store raises."""
        wanted = set(event_ids)
        rows: dict[tuple[str, str], IdempotencyRow] = {}
        found: Iterable[IdempotencyRow] = await self.store.idempotency_of_events(event_ids)
        for row in [*found, *(r for r in self.pending.values() if r[2] in wanted)]:
            k = (row[0], row[1])
            rows[k] = _earlier(rows.get(k), row)  # type: ignore[assignment]
        out: dict[str, list[IdempotencyRow]] = {}
        for row in rows.values():
            if row[2] in wanted:
                out.setdefault(row[2], []).append(row)
        return out
