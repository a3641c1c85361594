"""Group commit: shared transactions, durability before acknowledgement, failure handling."""

from __future__ import annotations

import asyncio

import pytest

from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.model import Delivery, DeliveryStatus, Event, Record, WriteBatch
from regionsync.runtime.commit import GroupCommitter, merge_batches


class CountingStore(MemoryStore):
    """A memory store that counts commits and can be told to fail the next one."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[WriteBatch] = []
        self.fail_next = False

    async def commit(self, batch: WriteBatch) -> None:
        await asyncio.sleep(0)  # a commit takes time: submissions queue meanwhile
        if self.fail_next:
            self.fail_next = False
            raise OSError("disk full")
        self.commits.append(batch)
        await super().commit(batch)


def _event(i: int) -> WriteBatch:
    rec = Record("a:1", i, "event", b"", (i, 0))
    ev = Event(f"evt_{i}", "t", "x", b"{}", "a", i)
    return WriteBatch(records=[rec], version_vector={"a:1": i}, events=[ev])


@pytest.fixture
async def store() -> CountingStore:
    s = CountingStore()
    await s.open("a", 1)
    return s


async def test_concurrent_submissions_share_commits(store: CountingStore) -> None:
    gc = GroupCommitter(store)
    runner = asyncio.create_task(gc.run())
    try:
        await asyncio.gather(*(gc.submit(_event(i)) for i in range(1, 101)))
    finally:
        runner.cancel()
    assert gc.batches == 100 and gc.commits < 10
    assert sum(len(b.events) for b in store.commits) == 100
    assert await store.load_version_vector() == {"a:1": 100}


async def test_acknowledged_only_after_durable(store: CountingStore) -> None:
    gc = GroupCommitter(store)
    fut = gc.submit(_event(1))
    assert not fut.done() and await store.get_event("evt_1") is None
    runner = asyncio.create_task(gc.run())
    await fut
    runner.cancel()
    assert await store.get_event("evt_1") is not None


async def test_failure_fails_the_group_and_the_queue_behind_it(store: CountingStore) -> None:
    failures: list[BaseException] = []
    gc = GroupCommitter(store, on_failure=failures.append)
    store.fail_next = True
    futs = [gc.submit(_event(i)) for i in range(1, 4)]
    runner = asyncio.create_task(gc.run())
    results = await asyncio.gather(*futs, return_exceptions=True)
    assert all(isinstance(r, OSError) for r in results) and len(failures) == 1
    with pytest.raises(OSError):  # refused, built on the failed state, until resume
        await gc.submit(_event(4))
    gc.resume()  # the owner reloaded its state
    await gc.submit(_event(1))  # the committer keeps working afterwards
    runner.cancel()
    assert [e.id for b in store.commits for e in b.events] == ["evt_1"]


def test_merge_keeps_the_latest_full_states() -> None:
    d1 = Delivery("dlv_1", "e", "ep", "t", DeliveryStatus.PENDING, 0, 5, "a", 1, 1)
    d2 = Delivery("dlv_1", "e", "ep", "t", DeliveryStatus.DELIVERED, 1, None, "a", 1, 2)
    merged = merge_batches(
        [
            WriteBatch(registry={"k": b"1"}, deliveries=[d1], version_vector={"a:1": 3}),
            WriteBatch(registry={"k": b"2"}, deliveries=[d2], version_vector={"a:1": 2}),
        ]
    )
    assert merged.registry == {"k": b"2"} and merged.deliveries == [d2]
    assert merged.version_vector == {"a:1": 3}


async def test_before_commit_sees_each_merged_group_and_whether_it_took_the_queue(
    store: CountingStore,
) -> None:
    seen: list[tuple[int, bool, dict]] = []

    def before(merged: WriteBatch, whole_queue: bool) -> None:
        seen.append((len(merged.events), whole_queue, dict(merged.usage)))

    gc = GroupCommitter(store, max_batches=2, before_commit=before)
    batches = [_event(i) for i in range(1, 6)]
    for b in batches:
        b.usage[("t", "events_published")] = 1
    futs = [gc.submit(b) for b in batches]
    runner = asyncio.create_task(gc.run())
    try:
        await asyncio.gather(*futs)
    finally:
        runner.cancel()
    assert seen == [
        (2, False, {("t", "events_published"): 2}),
        (2, False, {("t", "events_published"): 2}),
        (1, True, {("t", "events_published"): 1}),
    ]


async def _spin(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_linger_only_while_commits_are_small(store: CountingStore) -> None:
    """issue 44: the linger gathers company for a small commit (a light load) but never
    delays a commit when the previous group or the queue is already large (under load)."""
    gc = GroupCommitter(store, linger_s=30.0, linger_below=4)  # a linger would block
    big = [gc.submit(_event(i)) for i in range(1, 6)]  # 5 queued >= 4: no linger
    runner = asyncio.create_task(gc.run())
    try:
        await asyncio.wait_for(asyncio.gather(*big), 5)
        assert len(store.commits) == 1
        after_big = gc.submit(_event(6))  # the previous group had 5: no linger
        await asyncio.wait_for(after_big, 5)
        assert len(store.commits) == 2
        small = gc.submit(_event(7))  # the previous group had 1: lingers for company
        await _spin()
        assert not small.done() and len(store.commits) == 2
        company = [gc.submit(_event(i)) for i in (8, 9, 10)]  # queue 4: still lingering
        await _spin()
        assert not small.done()
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    assert all(f.done() for f in [small, *company])  # failed with the stop, never lost silently


async def test_linger_zero_never_waits(store: CountingStore) -> None:
    gc = GroupCommitter(store, linger_s=0.0)
    runner = asyncio.create_task(gc.run())
    try:
        for i in range(1, 4):
            await asyncio.wait_for(gc.submit(_event(i)), 5)
    finally:
        runner.cancel()
    assert len(store.commits) == 3


async def test_a_stop_during_a_commit_fails_its_group_and_the_queue(store: CountingStore) -> None:
    """The committer cancelled while a group's commit is in flight (the node stops): the
    group's submitters and those queued behind it get an error, none waits forever (a
    waiting task would be destroyed pending: the simulator's lost-disk seed 25)."""
    gate = asyncio.Event()
    store_commit = store.commit

    async def slow_commit(batch: WriteBatch) -> None:
        await gate.wait()
        await store_commit(batch)

    store.commit = slow_commit  # type: ignore[method-assign]
    gc = GroupCommitter(store)
    runner = asyncio.create_task(gc.run())
    first = gc.submit(_event(1))
    for _ in range(5):  # the first group's commit starts
        await asyncio.sleep(0)
    queued = gc.submit(_event(2))
    runner.cancel()
    both = asyncio.gather(first, queued, return_exceptions=True)
    results = await asyncio.wait_for(both, 30)  # before the fix: the first waits forever
    assert all(isinstance(r, ConnectionAbortedError) for r in results), results
