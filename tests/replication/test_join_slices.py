"""Issue 42: what a join does on either node returns to the loop in slices: the tree
build's registry part, and a large commit's items into the kept tree."""

from __future__ import annotations

import asyncio
from typing import Any

from memnodes import make_node, start
from test_anti_entropy import tree_is_current

from crdt import LWWRegister, Timestamp
from regionsync.core.model import WriteBatch
from regionsync.runtime import antientropy
from regionsync.runtime.slicing import Slicer


def lww(value: str) -> LWWRegister:
    return LWWRegister.empty().set(value, actor="a:1", stamp=Timestamp(1, 0))


def every_tick(monkeypatch: Any) -> None:
    """Slicers that return to the loop at every tick (a slice of 0 s)."""
    monkeypatch.setattr(antientropy, "Slicer", lambda **kw: Slicer(slice_s=0.0, **kw))


class Ticker:
    """Counts loop turns while it runs: other work got the loop this often."""

    def __init__(self) -> None:
        self.turns = 0
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.turns += 1
            await asyncio.sleep(0)


async def test_the_tree_build_returns_to_the_loop_every_page_of_registry_keys(
    net, started, monkeypatch
) -> None:
    """Over 1,000 registry keys, pages of ``_REGISTRY_PAGE`` (128): the build returns to
    the loop after each page (before, one synchronous ``apply`` over every key: seconds
    at 1M keys), and the tree equals one built from scratch."""
    (node,) = await start(started, make_node(net, "a", []))
    node.catalog.apply({f"e/ep{i:04d}/url": lww(f"https://x/{i}") for i in range(1_000)})
    every_tick(monkeypatch)
    ticker = Ticker()
    try:
        tree = await node.anti_entropy._build()
    finally:
        ticker.task.cancel()
    pages = -(-1_000 // antientropy._REGISTRY_PAGE)
    assert ticker.turns >= pages
    assert len(tree) >= 1_000


async def test_a_large_commit_goes_into_the_tree_in_slices(net, started, monkeypatch) -> None:
    """A commit of more than ``_SYNC_ITEMS`` items (a merged snapshot chunk) goes into
    the kept tree a page at a time; meanwhile the digest's root is not compared (b"")
    and ``state_tree`` waits until it is in, then equals a tree built from scratch."""
    (a,) = await start(started, make_node(net, "a", []))
    await a.anti_entropy.warm()
    every_tick(monkeypatch)
    monkeypatch.setattr(antientropy, "_SYNC_ITEMS", 50)
    deltas = {f"e/ep{i:04d}/url": lww(f"https://x/{i}") for i in range(600)}
    changed = a.catalog.apply(deltas)
    ticker = Ticker()
    try:
        await a.writer.submit(WriteBatch(registry={k: v.to_bytes() for k, v in changed.items()}))
        assert a.anti_entropy._behind  # left for the catch-up
        assert (await a.anti_entropy.digest())[1] == b""
        turns = ticker.turns
        tree = await a.anti_entropy.state_tree()
        assert ticker.turns - turns >= 600 // antientropy._REGISTRY_PAGE
    finally:
        ticker.task.cancel()
    assert not a.anti_entropy._behind and len(tree) >= 600
    assert (await a.anti_entropy.digest())[1] not in (b"", b"\0")
    assert await tree_is_current(a)


async def test_a_dropped_tree_stops_its_catch_up(net, started, monkeypatch) -> None:
    """The tree is dropped (the role went to another process, or a reload) while a large
    commit goes into it in slices: the catch-up stops cleanly (it applied the next slice
    to no tree and died before), and a tree built again takes a later large commit in
    full."""
    (a,) = await start(started, make_node(net, "a", []))
    await a.anti_entropy.warm()
    every_tick(monkeypatch)
    monkeypatch.setattr(antientropy, "_SYNC_ITEMS", 50)

    async def large_commit(tag: str) -> None:
        deltas = {f"e/ep{tag}{i:04d}/url": lww(f"https://x/{tag}{i}") for i in range(600)}
        changed = a.catalog.apply(deltas)
        await a.writer.submit(WriteBatch(registry={k: v.to_bytes() for k, v in changed.items()}))

    await large_commit("a")
    catching_up = a.anti_entropy._catching_up
    assert catching_up is not None and a.anti_entropy._behind
    a.anti_entropy.drop_tree()
    await asyncio.gather(catching_up, return_exceptions=True)
    assert catching_up.cancelled()  # not AttributeError: 'NoneType' object has no 'apply'
    await a.anti_entropy.warm()
    await large_commit("b")
    tree = await a.anti_entropy.state_tree()
    assert not a.anti_entropy._behind and len(tree) >= 1_200
    assert await tree_is_current(a)


async def test_a_tree_dropped_while_it_is_built_is_built_again(net, started, monkeypatch) -> None:
    """``drop_tree`` (a reload merged what no commit observer saw) while the tree is
    being built: the build under way may have read the registry before that merge, so
    its tree is not kept (it was, until the next drop) and is built again."""
    (a,) = await start(started, make_node(net, "a", []))
    a.catalog.apply({f"e/ep{i:04d}/url": lww(f"https://x/{i}") for i in range(1_000)})
    every_tick(monkeypatch)
    building = asyncio.get_running_loop().create_task(a.anti_entropy.state_tree())
    for _ in range(100):  # until the build has started reading
        if a.anti_entropy._pending:
            break
        await asyncio.sleep(0)
    assert a.anti_entropy._pending and a.anti_entropy.tree is None
    a.anti_entropy.drop_tree()
    tree = await building
    assert a.anti_entropy.builds == 2 and a.anti_entropy.tree is tree
    assert await tree_is_current(a)


async def test_a_wait_for_a_catch_up_dropped_before_it_ran_ends(net, started, monkeypatch) -> None:
    """A repair pass asks for the tree while a large commit's catch-up is due, and the
    tree is dropped before that catch-up ever ran: its cancellation never runs its
    ``finally``, so the drop itself must end the wait (the pass waited forever), and the
    pass gets a tree built again, not the dropped one (which no commit updates)."""
    (a,) = await start(started, make_node(net, "a", []))
    dropped = await a.anti_entropy.state_tree()
    monkeypatch.setattr(antientropy, "_SYNC_ITEMS", 50)
    changed = a.catalog.apply({f"e/ep{i:04d}/url": lww(f"https://x/{i}") for i in range(600)})
    batch = WriteBatch(registry={k: v.to_bytes() for k, v in changed.items()})
    gate = asyncio.Event()

    async def repair_pass() -> object:
        await gate.wait()
        return await a.anti_entropy.state_tree()

    waiter = asyncio.get_running_loop().create_task(repair_pass())
    await asyncio.sleep(0)  # waiting at the gate
    # one loop turn, in this order: the pass resumes and waits for the catch-up, the tree
    # is dropped, then the catch-up task would take its first step
    gate.set()
    asyncio.get_running_loop().call_soon(a.anti_entropy.drop_tree)
    a.anti_entropy._on_commit(batch)
    catching_up = a.anti_entropy._catching_up
    assert catching_up is not None
    tree = await asyncio.wait_for(waiter, 5)
    assert catching_up.cancelled() and not a.anti_entropy._behind
    assert tree is not dropped and tree is a.anti_entropy.tree
    assert a.anti_entropy.builds == 2
    assert await tree_is_current(a)
