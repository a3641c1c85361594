"""Issue 42: ``registry_hash`` of a large registry is worked out on a thread and served
from a cache with its age; ``registry_digest`` is exact and O(1)."""

from __future__ import annotations

import asyncio
import threading

from memnodes import make_node

from crdt import LWWRegister, Timestamp
from regionsync.core.registry_state import hash_items
from regionsync.runtime import registry_hash as rh


def lww(value: str, ms: int) -> LWWRegister:
    return LWWRegister.empty().set(value, actor="a", stamp=Timestamp(ms, 0))


async def test_a_large_registry_hash_is_cached_and_worked_out_off_the_loop(
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
    node = make_node(net, "a", [])
    reg, cache = node.catalog.registry, node.view.registry_hash
    reg.apply({f"e/ep{i}/url": lww(f"https://x/{i}", 1) for i in range(100)})
    running, go = threading.Event(), threading.Event()

    def held(items):
        running.set()
        go.wait(30)
        return hash_items(items)

    monkeypatch.setattr(rh, "hash_items", held)
    cache.read()
    await asyncio.to_thread(running.wait, 30)
    reg.apply({"e/ep3/url": lww("https://w/", 5)})  # while the thread works
    go.set()
    await asyncio.shield(cache.task)
    assert reg.cached_hash() is None  # not taken as current: the next read refreshes
    assert cache.read()[0] is not None
