"""Issue 42: ``registry_hash`` of a large registry is worked out in the background, on
the loop in slices, and served from a cache with its age; ``registry_digest`` is exact
and O(1)."""

from __future__ import annotations

import asyncio
import random

from memnodes import loop_turns, make_node

from crdt import LWWRegister, Timestamp
from regionsync.core.registry_state import RegistryState
from regionsync.runtime import registry_hash as rh
from regionsync.runtime.slicing import Slicer


def lww(value: str, ms: int) -> LWWRegister:
    return LWWRegister.empty().set(value, actor="a", stamp=Timestamp(ms, 0))


async def test_a_large_registry_hash_is_cached_and_worked_out_in_the_background(
    net, monkeypatch
) -> None:
    monkeypatch.setattr(rh, "SYNC_KEYS", 10)  # "large": more than 10 keys
    node = make_node(net, "a", [])
    reg, cache = node.catalog.registry, node.view.registry_hash
    reg.apply({f"e/ep{i}/url": lww(f"https://x/{i}", 1) for i in range(100)})
    exact = reg.state_hash()
    reg.apply({"e/ep1/url": lww("https://y/", 2)})
    assert reg.cached_hash() is None
    assert cache.read() == (None, 0.0)  # none yet: one is being worked out
    await cache.ready()
    assert cache.computed == 1
    h, age = cache.read()
    assert h == reg.state_hash() != exact and age == 0.0  # nothing changed: current
    reg.apply({"e/ep2/url": lww("https://z/", 3)})
    stale, age = cache.read()  # a write: the last one served until REFRESH_S passed
    assert stale == h and age >= 0 and cache.computed == 1
    monkeypatch.setattr(rh, "REFRESH_S", 0.0)
    monkeypatch.setattr(rh, "COST_FACTOR", 0.0)
    cache.read()
    await cache.task
    assert cache.computed == 2 and cache.read() == (reg.state_hash(), 0.0)
    view = node.view.cluster()
    assert view["registry_hash"] == reg.state_hash()
    assert view["registry_digest"] == reg.digest()


async def test_the_cached_hash_is_not_current_if_a_write_came_while_it_ran(
    net, monkeypatch
) -> None:
    monkeypatch.setattr(rh, "SYNC_KEYS", 10)
    monkeypatch.setattr(rh, "RUN", 16)
    # a slicer that returns to the loop at every tick: a write lands while it runs
    monkeypatch.setattr(rh, "Slicer", lambda: Slicer(slice_s=0.0, pause_ratio=0.0))
    node = make_node(net, "a", [])
    reg, cache = node.catalog.registry, node.view.registry_hash
    reg.apply({f"e/ep{i}/url": lww(f"https://x/{i}", 1) for i in range(100)})
    before = reg.state_hash()
    reg.apply({"e/ep3/url": lww("https://v/", 4)})
    cache.read()
    await asyncio.sleep(0)
    assert cache.task is not None and not cache.task.done()  # in slices, on the loop
    reg.apply({"e/ep3/url": lww("https://w/", 5)})  # while it works
    await asyncio.shield(cache.task)
    assert reg.cached_hash() is None  # not taken as current: the next read refreshes
    assert cache.value not in (None, before, reg.state_hash())  # the state it copied


async def test_the_hash_in_slices_equals_the_hash_and_returns_to_the_loop() -> None:
    """Over 5,000 keys with a slicer that yields at every tick: the same hash as
    ``state_hash``, and the loop ran other callbacks in between (sort runs of ``RUN``
    items, then every 256 items hashed)."""
    reg = RegistryState()
    reg.apply({f"e/ep{i:05d}/url": lww(f"https://x/{i}", 1) for i in range(5_000)})
    reg.apply({"e/ep00007/url": LWWRegister.empty()})  # an empty state: skipped by both
    snapshot = reg.snapshot()
    keys = list(snapshot)
    random.Random(1).shuffle(keys)
    states = {k: snapshot[k] for k in keys}  # unsorted
    slicer = Slicer(slice_s=0.0, pause_ratio=0.0)
    async with loop_turns() as turns:
        assert await rh.hash_in_slices(states, slicer) == reg.state_hash()
    assert slicer.yields >= 5_000 // rh.RUN + 5_000 // 256
    assert turns[0] >= slicer.yields - 1  # the loop ran other callbacks in between


async def test_a_refresh_waits_longer_after_a_slow_one(net, monkeypatch) -> None:
    """A refresh that took ``t`` s is followed by the next only ``COST_FACTOR * t``
    later (at least ``REFRESH_S``): the hash's share of the loop is bounded at scale."""
    monkeypatch.setattr(rh, "SYNC_KEYS", 10)
    node = make_node(net, "a", [])
    reg, cache = node.catalog.registry, node.view.registry_hash
    reg.apply({f"e/ep{i}/url": lww(f"https://x/{i}", 1) for i in range(100)})
    await cache.ready()
    assert cache.computed == 1
    cache.took = 60.0  # as if it had taken a minute
    monkeypatch.setattr(rh, "REFRESH_S", 0.0)
    reg.apply({"e/ep1/url": lww("https://y/", 2)})
    cache.read()
    assert cache.task is not None and cache.task.done()  # none started: 600 s not passed
    cache.took = 0.0
    cache.read()
    await cache.task
    assert cache.computed == 2
