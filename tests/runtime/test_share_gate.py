"""runtime.ingest_share.ShareGate: publishes wait for their tenant's share; a waiter that
is cancelled takes no slot, also when it was let in as it was cancelled."""

from __future__ import annotations

import asyncio

import pytest

from regionsync.runtime.ingest_share import ShareGate


def gate(cap: int = 1) -> ShareGate:
    return ShareGate(cap, lambda: 0.0)  # time stands still: the node stays shared


async def hold(g: ShareGate, tenant: str, release: asyncio.Event) -> None:
    async with g.slot(tenant):
        await release.wait()


async def shared() -> tuple[ShareGate, asyncio.Event, asyncio.Task[None]]:
    """A gate (cap 1) where tenant ``b`` holds a slot until the event is set."""
    g, other = gate(), asyncio.Event()
    holder = asyncio.create_task(hold(g, "b", other))
    await asyncio.sleep(0)
    return g, other, holder


async def test_a_waiter_starts_when_a_publish_of_its_tenant_ends() -> None:
    g = gate()
    other, first, second = asyncio.Event(), asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(hold(g, t, e)) for t, e in (("b", other), ("a", first))]
    await asyncio.sleep(0)
    waiter = asyncio.create_task(hold(g, "a", second))
    await asyncio.sleep(0)
    assert g.waiting == 1 and g.waited == 1 and g.share.inflight == {"a": 1, "b": 1}
    first.set()
    await asyncio.sleep(0.01)
    assert g.waiting == 0 and g.share.inflight == {"a": 1, "b": 1}  # the waiter holds it
    for e in (other, second):
        e.set()
    await asyncio.gather(*tasks, waiter)
    assert g.share.inflight == {} and not g.share.waiting


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    g = gate()
    other, first = asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(hold(g, t, e)) for t, e in (("b", other), ("a", first))]
    await asyncio.sleep(0)
    waiter = asyncio.create_task(hold(g, "a", asyncio.Event()))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert g.waiting == 0 and not g.share.waiting
    first.set()
    other.set()
    await asyncio.gather(*tasks)
    assert g.share.inflight == {}


async def test_a_waiter_let_in_as_it_is_cancelled_gives_its_slot_back() -> None:
    g, other, holder = await shared()
    cm = g.slot("a")
    mine = await cm.__aenter__()
    waiters = [asyncio.create_task(hold(g, "a", asyncio.Event())) for _ in range(2)]
    await asyncio.sleep(0)
    assert g.waiting == 2
    waiters[0].cancel()  # its future is cancelled now; the task sees it on its next step
    mine.release()  # lets in the cancelled waiter first, which hands the slot on at once
    assert g.share.inflight == {"a": 1, "b": 1} and not g.share.waiting
    with pytest.raises(asyncio.CancelledError):
        await waiters[0]
    await asyncio.sleep(0)
    assert g.share.inflight == {"a": 1, "b": 1} and g.waiting == 0  # waiters[1] holds it
    waiters[1].cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiters[1]
    await cm.__aexit__(None, None, None)
    other.set()
    await holder
    assert g.share.inflight == {} and not g.share.waiting


async def test_a_cap_of_zero_holds_nobody() -> None:
    g = gate(cap=0)
    release = asyncio.Event()
    tasks = [asyncio.create_task(hold(g, t, release)) for t in "abbbbb"]
    await asyncio.sleep(0)
    assert g.waited == 0 and g.share.inflight == {}
    release.set()
    await asyncio.gather(*tasks)


async def test_a_waiter_cancelled_after_it_was_let_in_gives_its_slot_back() -> None:
    g, other, holder = await shared()
    cm = g.slot("a")
    mine = await cm.__aenter__()
    waiter = asyncio.create_task(hold(g, "a", asyncio.Event()))
    await asyncio.sleep(0)
    assert g.waiting == 1
    mine.release()  # lets the waiter in (its future has a result) ...
    waiter.cancel()  # ... and it is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert g.share.inflight == {"b": 1} and g.waiting == 0
    await cm.__aexit__(None, None, None)  # a second release of the same slot: nothing
    assert g.share.inflight == {"b": 1}
    other.set()
    await holder
    assert g.share.inflight == {}


async def test_a_slot_held_until_its_commit_outlives_a_cancelled_publish() -> None:
    g, other, holder = await shared()
    commit: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def publish() -> None:
        async with g.slot("a") as slot:
            slot.hold_until(commit)
            await asyncio.shield(commit)

    task = asyncio.create_task(publish())
    await asyncio.sleep(0)
    task.cancel()  # the client hung up: its event is still in the commit
    with pytest.raises(asyncio.CancelledError):
        await task
    assert g.share.inflight == {"a": 1, "b": 1}
    commit.set_result(None)
    await asyncio.sleep(0)
    assert g.share.inflight == {"b": 1}
    other.set()
    await holder
