"""Retries and recovery jobs regenerate a delivery from its *current* state (issue 17,
the kind of ``WritePath.unsettled``): both read outside the write lock, and a state
submitted meanwhile (another retry, a job's page) is not in the store yet.

Before: two retries of one delivery both made generation 1 from the stored ``skipped``
row and counted it twice in the backlog; a ``replay-missing`` job whose page was read
before a retry of one of its rows regenerated that row again (backlog 4 for 3 pending
rows). Both tests fail on the old code."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.model import DeliveryStatus

sys.path.insert(0, str(Path(__file__).parents[1] / "delivery"))
from worker_nodes import CountingSender, stop, worker_node  # noqa: E402


class HeldPageStore(MemoryStore):
    """While ``hold`` is set, ``list_deliveries`` reads its page, then waits for
    ``release`` before returning it (a job's read that a retry overtakes)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold, self.waiting, self.release = False, 0, asyncio.Event()

    async def list_deliveries(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        rows = await super().list_deliveries(*args, **kwargs)
        if self.hold:
            self.waiting += 1
            await self.release.wait()
        return rows


async def _skipped(store: MemoryStore, n: int):  # type: ignore[no-untyped-def]
    """A node with ``n`` skipped deliveries (published while the endpoint was paused),
    the endpoint resumed; returns (node, network, delivery ids, endpoint id)."""
    node, net = worker_node(CountingSender(held=True), store)  # attempts never end
    await node.start()
    ops = node.registry_ops
    await ops.create_tenant("acme", "A")
    ep = await ops.create_endpoint("acme", {"url": "https://ep.example/",
                                            "event_types": ["push"], "paused": True})  # fmt: skip
    ids = []
    for _ in range(n):
        event, _ = await node.ingest.publish("acme", "push", b"{}", None)
        ids += [d.id for d in await store.deliveries_of_event(event.id)]
    await ops.patch_endpoint("acme", ep.id, {"paused": False})
    return node, net, ids, ep.id


async def _backlog(node) -> int:  # type: ignore[no-untyped-def]
    await node.registry_ops.create_tenant("flush", "F")  # usage moves with the next commit
    return node.catalog.registry.usage("acme", "backlog")


async def test_two_retries_of_one_delivery_make_two_generations() -> None:
    store = MemoryStore()
    node, net, (did,), _ = await _skipped(store, 1)
    try:
        first, second = await asyncio.gather(
            node.recovery.retry_delivery("acme", did), node.recovery.retry_delivery("acme", did)
        )
        assert sorted([first.generation, second.generation]) == [1, 2]  # was [1, 1]
        assert (await store.get_delivery(did)).generation == 2
        assert await _backlog(node) == 1  # one pending delivery (was 2)
    finally:
        await stop(node, net)


async def test_a_job_leaves_a_row_retried_after_its_page_was_read() -> None:
    store = HeldPageStore()
    node, net, ids, eid = await _skipped(store, 3)
    try:
        store.hold = True
        job = await node.recovery.start_job("acme", eid, "replay-missing", 0)
        for _ in range(300):
            if store.waiting:
                break
            await asyncio.sleep(0.01)
        assert store.waiting == 1  # the job read its page of 3 skipped rows
        retried = await node.recovery.retry_delivery("acme", ids[0])
        assert retried.generation == 1
        store.hold = False
        store.release.set()
        for _ in range(300):
            if node.recovery.job("acme", job.id).status != "running":
                break
            await asyncio.sleep(0.01)
        done = node.recovery.job("acme", job.id)
        assert (done.status, done.done) == ("succeeded", 2)  # was 3
        rows = [await store.get_delivery(i) for i in ids]
        assert [(d.status, d.generation) for d in rows] == [(DeliveryStatus.PENDING, 1)] * 3
        assert await _backlog(node) == 3  # was 4
    finally:
        await stop(node, net)
