"""The delivery worker reads due deliveries ahead (issue 17): a read of
``READ_AHEAD_ROWS x concurrency`` rows and their events runs while attempts run, so a freed
slot starts the next attempt from memory instead of waiting for a due query.

Measured with a counting store: 400 due deliveries of one endpoint through 8 workers took
51 due reads before (each claim round read at most twice its free slots and kept none);
now 16, one per 32 rows (a read takes up to half its 64 rows from one endpoint) and a few.
The publishes' hand-over to the worker is off here, so every row comes from a read.
And reading ahead never sends a delivery twice, also when every read-ahead row is dropped
as stale almost at once (``READ_AHEAD_S`` = 5 ms)."""

from __future__ import annotations

import asyncio

import pytest
from worker_nodes import CountingSender, stop, worker_node

from regionsync.adapters.memory_store import MemoryStore
from regionsync.runtime import delivery

EVENTS = 400
WORKERS = 8


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.due_reads = 0

    async def due_deliveries(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if "per_endpoint" in kwargs:  # a claim's read, not the starvation check
            self.due_reads += 1
        return await super().due_deliveries(*args, **kwargs)


async def _deliver_all(
    store: CountingStore, drops: list[int] | None = None, max_in_flight: int = 1000,
    **opts: object,
) -> CountingSender:  # fmt: skip
    sender = CountingSender(held=True)
    node, net = worker_node(sender, store, concurrency=WORKERS, tenant_max_in_flight=100, **opts)
    await node.start()
    try:
        ops = node.registry_ops
        await ops.create_tenant("acme", "A")
        ep = {"url": "https://ep.example/", "event_types": ["push"], "max_in_flight": max_in_flight,
              "rate_limit_per_s": 10000}  # fmt: skip
        await ops.create_endpoint("acme", ep)
        # no hand-over from the publishes (the worker runs by now): the rows come from the
        # store, as a retry's, a recovery job's or a peer's do (test_hand_over.py: the
        # other way)
        assert node.queue.handoff
        node.queue.handoff = False
        for _ in range(EVENTS):
            await node.ingest.publish("acme", "push", b"{}", None)
        for _ in range(500):  # every lane slot holds an attempt: the backlog is due
            if sum(sender.sent.values()) >= min(WORKERS, max_in_flight):
                break
            await asyncio.sleep(0.01)
        store.due_reads = 0
        sender.gate.set()
        for _ in range(1000):
            if (await store.counts("a"))["deliveries_delivered"] == EVENTS:
                break
            await asyncio.sleep(0.01)
        assert (await store.counts("a"))["deliveries_delivered"] == EVENTS
        if drops is not None:
            drops.append(node.delivery._epoch)  # each drop of stale rows advances it
        return sender
    finally:
        sender.gate.set()
        await stop(node, net)


async def test_due_rows_are_read_ahead_not_per_claim_round() -> None:
    store = CountingStore()
    sender = await _deliver_all(store)
    assert len(sender.sent) == EVENTS and max(sender.sent.values()) == 1
    # a read takes up to half its rows from one endpoint (round-robin across endpoints)
    per_read = delivery.READ_AHEAD_ROWS * WORKERS // 2
    assert store.due_reads <= EVENTS // per_read + 6, store.due_reads  # was 51


async def test_rows_of_a_full_lane_wait_in_memory_not_read_again() -> None:
    """An endpoint whose lane is full (``max_in_flight`` 1 here; a rate limit the same)
    keeps its rows read ahead: each freed slot starts the next one from memory. Before,
    the worker dropped a blocked endpoint's rows and read them again: two due reads (and
    the events of up to 32 rows) per delivery here, 6.8x an aiohttp loop's CPU per
    request in bench/cpu.py's replay on a quiet machine. A read that finds nothing
    outside the blocked endpoints is not repeated while that holds (runtime/ready.py);
    the idle poll, which ends that, is long here so the count does not depend on the
    machine's speed."""
    store = CountingStore()
    sender = await _deliver_all(store, max_in_flight=1, poll_interval_s=60.0)
    assert len(sender.sent) == EVENTS and max(sender.sent.values()) == 1
    per_read = delivery.READ_AHEAD_ROWS * WORKERS // 2
    # per 32 rows: a read of them, then one finding nothing outside the full lane
    assert store.due_reads <= 2 * (EVENTS // per_read) + 8, store.due_reads  # was 800


async def test_stale_read_ahead_rows_are_read_again_never_sent_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(delivery, "READ_AHEAD_S", 0.005)  # rows go stale at once
    drops: list[int] = []
    sender = await _deliver_all(CountingStore(), drops)
    assert drops[0] >= 1, drops  # stale rows were dropped (and read again)
    assert len(sender.sent) == EVENTS
    assert max(sender.sent.values()) == 1
