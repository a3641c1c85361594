"""The outcome recorder lingers as the group commit does (runtime/outcomes.py, issue 44):
at a light load, outcomes that finish a few ms apart share one read of their rows and
one write, instead of one each (bench/cpu.py's live phase at 500/s: 8,667 single-row
reads for 10,000 deliveries before, about 5,100 reads of one to three rows after)."""

from __future__ import annotations

import asyncio

from worker_nodes import stop, until, worker_node

from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.retry import AttemptOutcome, OutcomeKind
from regionsync.runtime.ports import OutboundRequest

N = 3


class OneByOneSender:
    """Holds each request until ``release`` lets the oldest one answer 204."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Event] = []

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        gate = asyncio.Event()
        self.waiting.append(gate)
        await gate.wait()
        return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)


class ReadCountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []

    async def get_deliveries(self, ids):  # type: ignore[no-untyped-def]
        self.reads.append(len(ids))
        return await super().get_deliveries(ids)


async def test_outcomes_a_few_ms_apart_share_one_read_and_write() -> None:
    sender, store = OneByOneSender(), ReadCountingStore()
    # a linger far above the gaps below: the machine's speed cannot split the group
    node, net = worker_node(sender, store, ingest={"commit_linger_ms": 50})
    await node.start()
    try:
        await node.registry_ops.create_tenant("acme", "A")
        await node.registry_ops.create_endpoint("acme", {"url": "https://ep.example/"})
        for _ in range(N):
            await node.ingest.publish("acme", "push", b"{}", None)

        async def all_sent() -> bool:
            return len(sender.waiting) == N

        await until(all_sent, "every attempt sent")
        store.reads.clear()
        for gate in sender.waiting:  # the outcomes come 5 ms apart
            gate.set()
            await asyncio.sleep(0.005)

        async def delivered() -> bool:
            return (await store.counts("a"))["deliveries_delivered"] == N

        await until(delivered, "every outcome recorded")
        assert store.reads == [N]  # was [1, 1, 1]
    finally:
        await stop(node, net)
