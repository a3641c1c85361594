"""Idempotency-Keys looked up in the store behind a bounded LRU cache (issue 17: memory
bounded by configuration, not by the keys of the last 24 h).

A row is ``(tenant, key, event id, body digest, accepted at ms, region)``. The store is
the authority for every row that is durable; memory holds the rows not yet committed
(``pending``, bounded by the group commit's queue) and a cache of at most
``cache_entries`` recently used rows. Rows merge by "the earliest acceptance wins" (ties:
the smaller event id), in the store and here alike, so every region settles on the same
event for a key.

A publish with a new key would cost one store read; ``KeyFilter`` (Bloom filters of the
keys the store may hold, ``ingest.idempotency_filter_entries``) answers "not held" for
most new keys without it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from rbloom import Bloom

from ..core.model import WriteBatch
from .ports import Store

__all__ = ["IdempotencyKeys", "IdempotencyRow", "KeyFilter"]

FILTER_ERROR_RATE = 0.01  # false positives of a filter filled to its configured entries
# rows read from the store at once while a filter is filled: every other read of the
# store's reader waits behind a page (10,000 rows held reads and keyed publishes at
# 8-20 ms for the first 2 s over 1M keys; 1,000 fills as fast, bench/README.md restart.py)
_FILL_PAGE = 1_000

# (tenant, key, event id, body digest, accepted at ms, region): a replicated key row
IdempotencyRow = tuple[str, str, str, str, int, str]
# what a lookup answers: (event id, body digest, region, accepted at ms)
Found = tuple[str, str, str, int]


def _earlier(a: IdempotencyRow | None, b: IdempotencyRow | None) -> IdempotencyRow | None:
    """The row that wins a merge: the earlier acceptance, then the smaller event id."""
    if a is None or b is None:
        return a or b
    return a if (a[4], a[2]) <= (b[4], b[2]) else b


class KeyFilter:
    """Which ``(tenant, key)`` the store may hold, live: Bloom filters (rbloom) with no
    false negatives and about ``FILTER_ERROR_RATE`` false positives while they hold at
    most ``entries`` keys (more keys raise that rate; answers stay safe).

    Keys expire ``ttl_ms`` after their row's acceptance time, so the filter is kept in two
    generations (Bloom filters cannot forget a key): new keys go into the current one;
    once it is ``ttl_ms`` old it becomes the previous one, and the previous one is dropped,
    but only when every key it held has expired by the rule ``IdempotencyKeys`` applies
    (accepted at + ttl < now; a key accepted in a region whose clock runs ahead keeps its
    generation longer). Memory: two filters of ``entries`` keys, about 1.2 MB per million.

    ``ready`` is False until every live row of the store was added (``IdempotencyKeys.fill``);
    until then ``may_hold`` answers True. Python's ``hash`` places keys, so which new keys
    are false positives differs per process; it decides only whether the store is read.
    """

    def __init__(self, entries: int, ttl_ms: int):
        if entries < 1:
            raise ValueError("entries must be >= 1")
        self.entries, self.ttl_ms = entries, ttl_ms
        self.ready = False
        self._current, self._previous = Bloom(entries, FILTER_ERROR_RATE), None
        self._started_ms: int | None = None  # when the current generation began
        self._newest_ms = [0, 0]  # latest acceptance time in the current, previous one

    def _age(self, now_ms: int) -> None:
        if self._started_ms is None:
            self._started_ms = now_ms
        elif now_ms - self._started_ms >= self.ttl_ms and (
            self._previous is None or self._newest_ms[1] + self.ttl_ms < now_ms
        ):
            self._previous, self._current = self._current, Bloom(self.entries, FILTER_ERROR_RATE)
            self._newest_ms = [0, self._newest_ms[0]]
            self._started_ms = now_ms

    def add(self, tenant: str, key: str, accepted_ms: int) -> None:
        """Remember that the store may hold ``(tenant, key)``, accepted at ``accepted_ms``
        (wall ms): in the current generation (``may_hold`` ages them)."""
        self._current.add((tenant, key))
        if accepted_ms > self._newest_ms[0]:
            self._newest_ms[0] = accepted_ms

    def may_hold(self, tenant: str, key: str, now_ms: int) -> bool:
        """False only if no live row of ``(tenant, key)`` was ever added (once ``ready``)."""
        if not self.ready:
            return True
        self._age(now_ms)
        k = (tenant, key)
        return k in self._current or (self._previous is not None and k in self._previous)

    @property
    def approx_keys(self) -> int:
        """Estimated keys held by both generations (a gauge: compare with ``entries``)."""
        held = self._current.approx_items
        if self._previous is not None:
            held += self._previous.approx_items
        return round(held)


class IdempotencyKeys:
    """The Idempotency-Keys of one node: ``lookup`` (async, may read the store) and
    ``get`` (memory only, for the re-check under the write lock), ``remember`` for a key
    accepted here, ``merge`` for a replicated row, ``committed`` as a commit observer.

    ``cache_entries`` (config ``ingest.idempotency_cache_entries``, >= 1): the bound of
    the LRU cache of durable rows; a miss costs one primary-key read of the store, unless
    the key filter (``filter_entries`` keys, config ``ingest.idempotency_filter_entries``;
    0: none) says the store cannot hold it. ``ttl_ms``: the keys' lifetime. The filter
    is only valid while this node sees every row the store gets (its own commits):
    several processes on one database (PostgreSQL) must run without it.
    """

    def __init__(
        self,
        store: Store,
        cache_entries: int = 100_000,
        filter_entries: int = 0,
        ttl_ms: int = 24 * 3600 * 1000,
    ):
        self.store, self.cache_entries, self.ttl_ms = store, cache_entries, ttl_ms
        self.cache: OrderedDict[tuple[str, str], IdempotencyRow] = OrderedDict()
        self.pending: dict[tuple[str, str], IdempotencyRow] = {}  # not yet durable
        self.filter = KeyFilter(filter_entries, ttl_ms) if filter_entries else None
        # cache hits, store reads, and reads the filter spared (metrics, tests, bench)
        self.hits = self.misses = self.spared = 0

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
        elif self.filter is not None and not self.filter.may_hold(tenant, key, now_ms):
            self.spared += 1
            stored = None
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
        """Commit observer: rows of ``batch`` are durable, the store answers for them; the
        key filter learns them here (until then ``pending`` answers for them)."""
        for row in batch.idempotency:
            k = (row[0], row[1])
            if self.pending.get(k) == row:
                del self.pending[k]
            self._filter_add(row)

    def _filter_add(self, row: IdempotencyRow) -> None:
        if self.filter is not None:
            self.filter.add(row[0], row[1], row[4])

    async def fill(self, now_ms: int) -> None:
        """Add every live row of the store to the key filter, a page at a time, then mark
        it ready (no-op without a filter, or once ready). Rows committed meanwhile reach
        it through ``committed``. Raises what the store raises (the filter stays unready:
        lookups read the store, as without one)."""
        if self.filter is None or self.filter.ready:
            return
        after: tuple[str, str] | None = None
        while rows := await self.store.load_idempotency(after, _FILL_PAGE):
            for row in rows:
                if row[4] + self.ttl_ms >= now_ms:  # expired rows answer None anyway
                    self.filter.add(row[0], row[1], row[4])
            after = (rows[-1][0], rows[-1][1])
        self.filter.ready = True

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
