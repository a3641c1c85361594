"""Idempotency-Keys live in the store behind a bounded cache (issue 17): a node over a real
SQLite file keeps at most ``ingest.idempotency_cache_entries`` keys in memory, answers a
repeat of an evicted key (or one from before a restart) from the store, and purges
expired keys in bounded batches."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.adapters.system import SystemClock, UlidSource, system_rng
from regionsync.config import load_settings
from regionsync.core.model import WriteBatch
from regionsync.errors import Conflict
from regionsync.runtime.idempotency import IdempotencyKeys
from regionsync.runtime.node import Node

CACHE = 1024


def make(path: Path, **ingest: object) -> Node:
    settings = load_settings(
        None, region="a", ingest={"idempotency_cache_entries": CACHE, **ingest}
    )
    clock, rng = SystemClock(), system_rng()
    return Node(
        settings, store=SqliteStore(path), clock=clock, rng=rng, ids=UlidSource(clock, rng),
        transport=MemoryNetwork().transport("a"), sender=None, resolver=None,  # type: ignore[arg-type]
    )  # fmt: skip


async def test_keys_beyond_the_cache_are_answered_from_the_store(tmp_path: Path) -> None:
    node = make(tmp_path / "a.db")
    await node.start()
    try:
        await node.registry_ops.create_tenant("acme", "Acme")
        first, created = await node.ingest.publish("acme", "x", b'{"i":0}', "k0")
        assert created
        for i in range(1, CACHE + 100):
            await node.ingest.publish("acme", "x", b'{"i":%d}' % i, f"k{i}")
        assert len(node.keys.cache) == CACHE and not node.keys.pending
        assert ("acme", "k0") not in node.keys.cache  # evicted, least recently used
        misses = node.keys.misses
        again, created = await node.ingest.publish("acme", "x", b'{"i":0}', "k0")
        assert not created and again.id == first.id
        assert node.keys.misses == misses + 1  # one store read, then cached
        again, created = await node.ingest.publish("acme", "x", b'{"i":0}', "k0")
        assert not created and again.id == first.id and node.keys.misses == misses + 1
        with pytest.raises(Conflict):  # the stored digest is compared, as before
            await node.ingest.publish("acme", "x", b'{"i":"other"}', "k1")
    finally:
        await node.stop()

    node = make(tmp_path / "a.db")  # a restart loads no key; the store answers
    await node.start()
    try:
        assert not node.keys.cache
        again, created = await node.ingest.publish("acme", "x", b'{"i":0}', "k0")
        assert not created and again.id == first.id
    finally:
        await node.stop()


async def test_expired_keys_are_purged_in_batches_and_free_again(tmp_path: Path) -> None:
    node = make(tmp_path / "a.db", idempotency_ttl_s=60)
    await node.start()
    try:
        await node.registry_ops.create_tenant("acme", "Acme")
        first, _ = await node.ingest.publish("acme", "x", b'{"i":0}', "k0")
        for i in range(1, 12):
            await node.ingest.publish("acme", "x", b'{"i":%d}' % i, f"k{i}")
        assert await node.ingest.purge_idempotency(batch=5) == 0  # none expired yet
        node.clock.wall_ms = lambda real=node.clock.wall_ms: real() + 61_000  # type: ignore[method-assign]
        assert await node.ingest.purge_idempotency(batch=5) == 12  # 5 + 5 + 2
        assert await node.store.load_idempotency() == [] and not node.keys.cache
        fresh, created = await node.ingest.publish("acme", "x", b'{"i":0}', "k0")
        assert created and fresh.id != first.id  # the key may be used again
    finally:
        await node.stop()


async def test_new_keys_skip_the_store_read_once_the_filter_is_filled(tmp_path: Path) -> None:
    """A publish with a new Idempotency-Key reads the store only until the key filter is
    filled (issue 17): after that a new key costs no read, and every key the store holds
    (from before a restart, or evicted from the cache) is still answered from it."""
    node = make(tmp_path / "a.db")
    await node.start()
    try:
        await node.keys.fill(node.clock.wall_ms())  # the purge loop's first step, awaited
        assert node.keys.filter is not None and node.keys.filter.ready
        await node.registry_ops.create_tenant("acme", "Acme")
        first, _ = await node.ingest.publish("acme", "x", b'{"i":0}', "k0")
        for i in range(1, CACHE + 100):
            await node.ingest.publish("acme", "x", b'{"i":%d}' % i, f"k{i}")
        assert node.keys.misses <= 0.05 * CACHE  # false positives only (1 % expected)
        assert node.keys.spared >= CACHE
        again, created = await node.ingest.publish("acme", "x", b'{"i":0}', "k0")  # evicted
        assert not created and again.id == first.id
    finally:
        await node.stop()

    node = make(tmp_path / "a.db")  # a new process: the filter is filled from the store
    await node.start()
    try:
        assert not node.keys.filter.ready  # type: ignore[union-attr]
        again, created = await node.ingest.publish("acme", "x", b'{"i":0}', "k0")  # reads
        assert not created and again.id == first.id and node.keys.misses == 1
        node.keys.cache.clear()
        await node.keys.fill(node.clock.wall_ms())
        assert node.keys.filter.approx_keys >= CACHE + 50  # type: ignore[union-attr]
        for i in (0, 7, CACHE + 99):  # every stored key is still found
            again, created = await node.ingest.publish("acme", "x", b'{"i":%d}' % i, f"k{i}")
            assert not created
        with pytest.raises(Conflict):
            await node.ingest.publish("acme", "x", b'{"i":"other"}', "k1")
        spared = node.keys.spared
        await node.ingest.publish("acme", "x", b'{"i":-1}', "new-after-restart")
        assert node.keys.spared == spared + 1 or node.keys.misses > 1  # a false positive reads
    finally:
        await node.stop()


async def test_filter_off_reads_the_store_for_every_new_key(tmp_path: Path) -> None:
    node = make(tmp_path / "a.db", idempotency_filter_entries=0)
    await node.start()
    try:
        await node.keys.fill(node.clock.wall_ms())
        assert node.keys.filter is None
        await node.registry_ops.create_tenant("acme", "Acme")
        for i in range(20):
            await node.ingest.publish("acme", "x", b'{"i":%d}' % i, f"k{i}")
        assert node.keys.misses == 20 and node.keys.spared == 0
    finally:
        await node.stop()


async def test_a_read_during_the_fill_waits_for_one_small_page_at_most(tmp_path: Path) -> None:
    """The filter fill pages through the store on the reader every other read queues on:
    a key lookup issued while it fills waits behind at most one page of 1,000 rows (pages
    of 10,000 held reads and keyed publishes 8-20 ms for a restarted node's first 2 s at
    1M keys: bench/README.md, restart.py)."""
    store = SqliteStore(tmp_path / "k.db")
    await store.open("r", new_incarnation=1)
    rows = [("acme", f"k{i:05}", f"evt_{i:05}", "d", 1_000, "r") for i in range(3_000)]
    await store.commit(WriteBatch(idempotency=rows))
    keys = IdempotencyKeys(store, filter_entries=10_000, ttl_ms=10**12)
    handed: list[int] = []  # rows the store has handed to the fill, after each page
    load = store.load_idempotency

    async def counted(after=None, limit=None):  # type: ignore[no-untyped-def]
        page = await load(after, limit)
        handed.append((handed[-1] if handed else 0) + len(page))
        return page

    store.load_idempotency = counted  # type: ignore[method-assign]
    try:
        fill = asyncio.create_task(keys.fill(2_000))
        await asyncio.sleep(0)  # the fill's first page is asked for
        assert await store.get_idempotency("acme", "k00042") == rows[42]
        read_before = handed[-1] if handed else 0
        await fill
        assert keys.filter is not None and keys.filter.ready
        assert read_before <= 1_000 < handed[-1] == len(rows)
    finally:
        await store.close()
