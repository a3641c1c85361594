"""When a finished attempt must wake the claim loop although a success at a healthy
endpoint usually does not (``DeliveryWorker.slot_bound``): while a read ahead is under
way. The read skips the lanes its round found blocked; a slot freed meanwhile must wake
a round, or the read's quiet answer (runtime/ready.py) would hold for a lane no longer
full, and a read that failed would not be tried again, until the idle poll. Both
failed (the delivery waited for the 60 s poll) before ``slot_bound`` counted a read
under way."""

from __future__ import annotations

import asyncio

from worker_nodes import stop, until, worker_node

from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.retry import AttemptOutcome, OutcomeKind
from regionsync.runtime.ports import OutboundRequest

IDLE_POLL_S = 60.0  # the longest idle wait: far past every deadline below
PATIENCE = 3000  # checks 10 ms apart: 30 s, half the idle poll


class GatedStore(MemoryStore):
    """Its next due read waits for ``gate`` once ``armed`` (a slow read); a read after
    ``fail`` is set raises once (a transient store error)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = self.fail = False
        self.gate = asyncio.Event()
        self.waiting = 0

    async def due_deliveries(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if self.fail:
            self.fail = False
            raise ConnectionError("transient")
        if self.armed:
            self.armed = False
            self.waiting += 1
            await self.gate.wait()
            self.waiting -= 1
        return await super().due_deliveries(*args, **kwargs)


class HostSender:
    """Holds each attempt until its host's gate opens (then closes it again); answers
    204; counts attempts per host."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.sent: dict[str, int] = {}

    def gate(self, host: str) -> asyncio.Event:
        return self.gates.setdefault(host, asyncio.Event())

    def of(self, host: str) -> int:
        return self.sent.get(host, 0)

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        host = request.url.split("/")[2]
        self.sent[host] = self.of(host) + 1
        gate = self.gate(host)
        await gate.wait()
        gate.clear()
        return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)


async def _holds(v: bool) -> bool:
    return v


async def _two_tenants(store: GatedStore, sender: HostSender, cap: int | None):  # type: ignore[no-untyped-def]
    """A started node: tenant acme's endpoint at e.example (``max_in_flight`` ``cap``),
    tenant beta's at h.example."""
    node, net = worker_node(sender, store, poll_interval_s=IDLE_POLL_S)
    await node.start()
    await node.registry_ops.create_tenant("acme", "A")
    extra = {} if cap is None else {"max_in_flight": cap}
    await node.registry_ops.create_endpoint("acme", {"url": "https://e.example/", **extra})
    await node.registry_ops.create_tenant("beta", "B")
    await node.registry_ops.create_endpoint("beta", {"url": "https://h.example/"})
    return node, net


async def test_a_lane_freed_while_a_read_skips_it_is_read_again() -> None:
    store, sender = GatedStore(), HostSender()
    node, net = await _two_tenants(store, sender, cap=1)
    try:
        await node.ingest.publish("acme", "push", b"{}", None)  # e1, held at its host
        await node.ingest.publish("beta", "push", b"{}", None)  # h1, held at its host
        await until(lambda: _holds(sender.of("e.example") == sender.of("h.example") == 1),
                    "e1 and h1 sent", PATIENCE)  # fmt: skip
        node.queue.handoff = False  # e2 reaches the worker by a store read only
        store.armed = True
        await node.ingest.publish("acme", "push", b"{}", None)  # e2: its lane is full
        await until(lambda: _holds(store.waiting == 1), "a read skipping e's lane", PATIENCE)
        sender.gate("e.example").set()  # e1 succeeds while the read is under way
        await until(lambda: _holds(len(node.delivery.inflight) == 1), "e1 recorded", PATIENCE)
        store.gate.set()  # the read finds nothing outside e's lane: quiet for it
        await asyncio.sleep(0.05)
        sender.gate("h.example").set()  # h1 succeeds: a round must read e2 now
        await until(lambda: _holds(sender.of("e.example") == 2), "e2 sent", PATIENCE)
    finally:
        await stop(node, net)


async def test_a_read_that_failed_is_tried_again_at_the_next_success() -> None:
    store, sender = GatedStore(), HostSender()
    node, net = await _two_tenants(store, sender, cap=None)
    try:
        await node.ingest.publish("beta", "push", b"{}", None)  # h1, held at its host
        await until(lambda: _holds(sender.of("h.example") == 1), "h1 sent", PATIENCE)
        node.queue.handoff = False
        store.fail = True
        await node.ingest.publish("acme", "push", b"{}", None)  # e1: its read fails
        await until(lambda: _holds(not store.fail), "the failed read", PATIENCE)
        await asyncio.sleep(0.05)
        sender.gate("e.example").set()
        sender.gate("h.example").set()  # h1 succeeds: a round must read e1 again
        await until(lambda: _holds(sender.of("e.example") == 1), "e1 sent", PATIENCE)
    finally:
        await stop(node, net)
