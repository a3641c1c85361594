"""Fresh deliveries are handed to the worker without a store read (issue 17, fan-in): a
publish's pending deliveries go from its group commit to the worker's ``ready`` rows
(``DeliveryQueue.hand_over``), so a quiet endpoint's delivery does not wait for reads
that carry a burst's rows.

Both tests hold the worker's due read open (a slow store read): before the hand-over a
fresh delivery was started only by a read that began after its commit, so the first test
never saw it sent. The second is the race the hand-over brings: a read under way may
return a row handed over, sent and recorded meanwhile (its snapshot taken before the
outcome); the worker leaves such rows out (``DeliveryWorker._handed``), else it sends
the delivery a second time."""

from __future__ import annotations

import asyncio
import time

from worker_nodes import CountingSender, stop, worker_node

from regionsync.adapters.memory_store import MemoryStore


class SlowReadStore(MemoryStore):
    """While ``hold`` is set, a due read (the worker's, ``per_endpoint`` given) waits
    for ``snapshot`` before it reads (as of then) and for ``release`` before it
    returns."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.waiting = 0
        self.snapshot, self.release = asyncio.Event(), asyncio.Event()

    async def due_deliveries(self, owner, now_ms, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not (self.hold and "per_endpoint" in kwargs):
            return await super().due_deliveries(owner, now_ms, *args, **kwargs)
        self.waiting += 1
        await self.snapshot.wait()
        # as a read whose ``now`` came after the stamp of a publish then committing
        now_ms = max(now_ms, int(time.time() * 1000))
        rows = await super().due_deliveries(owner, now_ms, *args, **kwargs)
        await self.release.wait()
        return rows


async def _until(cond, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(300):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def _delivered(store: MemoryStore) -> int:
    return (await store.counts("a"))["deliveries_delivered"]


async def _node_with_held_read(sender: CountingSender, store: SlowReadStore):  # type: ignore[no-untyped-def]
    node, net = worker_node(sender, store, concurrency=4)
    await node.start()
    await node.registry_ops.create_tenant("acme", "A")
    await node.registry_ops.create_endpoint(
        "acme", {"url": "https://ep.example/", "event_types": ["push"]}
    )
    store.hold = True
    await _until(lambda: store.waiting > 0, "the worker's due read to start")
    return node, net


async def test_a_fresh_delivery_starts_while_a_due_read_is_under_way() -> None:
    sender, store = CountingSender(), SlowReadStore()
    node, net = await _node_with_held_read(sender, store)
    try:
        await node.ingest.publish("acme", "push", b"{}", None)
        await _until(lambda: sum(sender.sent.values()) == 1, "the fresh delivery's send")
        assert store.waiting == 1  # the one read, still held
    finally:
        store.snapshot.set()
        store.release.set()
        await stop(node, net)


async def test_a_row_handed_over_during_a_read_is_not_sent_again() -> None:
    sender, store = CountingSender(), SlowReadStore()
    node, net = await _node_with_held_read(sender, store)
    try:
        sender.gate.clear()
        await node.ingest.publish("acme", "push", b"{}", None)  # handed over, sending
        await _until(lambda: sum(sender.sent.values()) == 1, "the attempt to start")
        store.snapshot.set()  # the held read sees the delivery still pending
        await asyncio.sleep(0.02)
        sender.gate.set()
        for _ in range(300):  # the outcome is recorded
            if await _delivered(store) == 1:
                break
            await asyncio.sleep(0.01)
        assert await _delivered(store) == 1
        store.hold = False
        store.release.set()  # the read returns its older row
        await asyncio.sleep(0.3)  # several claim rounds (poll_interval_s 0.05)
        assert list(sender.sent.values()) == [1], sender.sent
    finally:
        store.snapshot.set()
        store.release.set()
        await stop(node, net)
