"""Store reads of deliveries outside the write lock (issue 17), made current under it by
``WritePath.unsettled``.

Before: the outcome recorder read the stored deliveries of each batch, and the replica
each delivery a record carried, *while holding the write lock*, so every publish waited
for those reads; and a read under the lock still missed states submitted but not yet
committed, so an attempt's outcome could overwrite a retry's new generation queued just
before it. The node tests fail on the old code: the first two because the lock is held
across the read, the third because the retry is lost.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path

from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.model import Delivery, DeliveryStatus, Record, WriteBatch
from regionsync.core.records import encode_body
from regionsync.runtime.outcomes import Outcome
from regionsync.runtime.unsettled import UnsettledDeliveries

sys.path.insert(0, str(Path(__file__).parents[1] / "delivery"))
from worker_nodes import CountingSender, stop, worker_node  # noqa: E402


def _d(gen: int = 0, status: DeliveryStatus = DeliveryStatus.PENDING, n: int = 0) -> Delivery:
    return Delivery("dlv_1", "evt_1", "ep_1", "t", status, n, 5, "a", 1, 1 + n, gen)


# -- the bookkeeping ---------------------------------------------------------------------


def test_a_submitted_state_overrides_a_stale_read_until_durable() -> None:
    u = UnsettledDeliveries()
    mark = u.pin()
    u.submitted([_d(gen=1)])  # a retry, not yet committed
    rows = u.current({"dlv_1": _d(gen=0)}, ["dlv_1"])
    assert rows["dlv_1"].generation == 1
    u.unpin(mark)
    assert len(u) == 1  # not durable: kept
    u.durable(1)
    assert len(u) == 0


def test_a_state_committed_after_a_read_began_is_kept_for_that_read() -> None:
    u = UnsettledDeliveries()
    mark = u.pin()  # the read may not see what commits from now on
    u.submitted([_d(gen=1)])
    u.durable(1)
    assert len(u) == 1
    assert u.current({"dlv_1": _d(gen=0)}, ["dlv_1"])["dlv_1"].generation == 1
    u.unpin(mark)
    assert len(u) == 0  # every read began after its commit: dropped
    later = u.pin()
    assert u.current({}, ["dlv_1"]) == {}  # such a read shows it itself
    u.unpin(later)


def test_current_joins_rather_than_replaces() -> None:
    """A row newer than the kept state (another process wrote it) is not rolled back."""
    u = UnsettledDeliveries()
    u.submitted([_d(gen=0)])
    newer = _d(gen=0, status=DeliveryStatus.DELIVERED, n=1)
    assert u.current({"dlv_1": newer}, ["dlv_1"])["dlv_1"] == newer


def test_a_failed_commit_drops_what_was_queued() -> None:
    u = UnsettledDeliveries()
    u.submitted([_d(gen=1)])
    u.submitted([])
    u.failed()
    assert len(u) == 0
    u.submitted([_d(gen=2)])  # counting resumed at the durable count (0)
    u.durable(1)
    assert len(u) == 0


# -- the node ------------------------------------------------------------------------------


class GatedStore(MemoryStore):
    """Delivery reads wait for ``reads`` when it is cleared (``reading`` says one does);
    ``commit`` waits for ``commits``."""

    def __init__(self) -> None:
        super().__init__()
        self.reads, self.commits = asyncio.Event(), asyncio.Event()
        self.reads.set()
        self.commits.set()
        self.reading = asyncio.Event()

    async def _gate(self) -> None:
        if not self.reads.is_set():
            self.reading.set()
            await self.reads.wait()

    async def get_deliveries(self, delivery_ids):  # type: ignore[no-untyped-def]
        await self._gate()
        return await super().get_deliveries(delivery_ids)

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        await self._gate()
        return await super().get_delivery(delivery_id)

    async def commit(self, batch: WriteBatch) -> None:
        await self.commits.wait()
        await super().commit(batch)


async def _node_with_delivery(store: GatedStore):  # type: ignore[no-untyped-def]
    node, net = worker_node(CountingSender(held=True), store)  # the test records outcomes
    await node.start()
    ops = node.registry_ops
    await ops.create_tenant("t", "T")
    ep = await ops.create_endpoint("t", {"url": "https://hook.example/"})
    await node.ingest.publish("t", "t", b"{}", None)
    (d,) = await store.list_deliveries(ep.id, None, 0, None, 10)
    return node, net, d


async def _publish_while_reading(node, store: GatedStore, reader: asyncio.Task):  # type: ignore[no-untyped-def]
    """Once ``reader`` is held in a store read: the write lock is free and a publish
    completes; then the read goes on. Returns ``reader``'s result."""
    await asyncio.wait_for(store.reading.wait(), 5)
    assert not node.writer.lock.locked()
    await asyncio.wait_for(node.ingest.publish("t", "t", b"{}", None), 5)
    store.reads.set()
    return await asyncio.wait_for(reader, 5)


async def test_a_publish_goes_on_while_the_recorder_reads() -> None:
    store = GatedStore()
    node, net, d = await _node_with_delivery(store)
    try:
        store.reads.clear()
        out = Outcome(d, DeliveryStatus.DELIVERED, None, 1, None, "success")
        await _publish_while_reading(
            node, store, asyncio.create_task(node.delivery.recorder.record(out))
        )
    finally:
        store.reads.set()
        await stop(node, net)


async def test_a_publish_goes_on_while_the_replica_reads() -> None:
    store = GatedStore()
    node, net, d = await _node_with_delivery(store)
    try:
        store.reads.clear()
        theirs = dataclasses.replace(d, region="b", id="dlv_b")
        body = encode_body(delivery=theirs)
        applying = asyncio.create_task(
            node.replica.apply_records([Record("b:1", 1, "delivery", body, (1, 0))])
        )
        assert await _publish_while_reading(node, store, applying) == []
        assert (await store.get_delivery("dlv_b")) is not None
    finally:
        store.reads.set()
        await stop(node, net)


async def test_an_outcome_never_overwrites_a_newer_generation_not_yet_committed() -> None:
    store = GatedStore()
    node, net, d = await _node_with_delivery(store)
    try:
        store.commits.clear()  # the retry below is submitted, not committed
        retry = dataclasses.replace(
            d, generation=d.generation + 1, updated_at_ms=d.updated_at_ms + 1
        )
        async with node.writer.lock:
            queued = node.writer.submit(WriteBatch(deliveries=[retry]))
        out = Outcome(d, DeliveryStatus.DELIVERED, None, 1, None, "success")
        recording = asyncio.create_task(node.delivery.recorder.record(out))
        await asyncio.sleep(0.05)
        store.commits.set()
        await asyncio.wait_for(asyncio.gather(queued, recording), 5)
        stored = await store.get_delivery(d.id)
        assert stored is not None
        assert (stored.generation, stored.status) == (retry.generation, DeliveryStatus.PENDING)
    finally:
        store.commits.set()
        await stop(node, net)
