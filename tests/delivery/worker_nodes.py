"""Helpers for the delivery worker tests: one node of region "a" over the in-memory store
and transport, with a test Sender, started and stopped."""

from __future__ import annotations

import asyncio
from collections import Counter

from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.adapters.system import SystemClock, UlidSource, system_rng
from regionsync.config import load_settings
from regionsync.core.retry import AttemptOutcome, OutcomeKind
from regionsync.runtime.node import Node
from regionsync.runtime.ports import Clock, OutboundRequest, Sender


class CountingSender:
    """Counts requests per ``webhook-id`` (``sent``) and answers 204, holding each
    attempt while ``gate`` is closed (open at first unless ``held``)."""

    def __init__(self, held: bool = False) -> None:
        self.gate = asyncio.Event()
        if not held:
            self.gate.set()
        self.sent: Counter[str] = Counter()

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        self.sent[request.headers["webhook-id"]] += 1
        await self.gate.wait()
        return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)


class FlakySender:
    """Answers 503 until ``up`` is set, then 204; counts requests (``sent``) and the most
    in flight at once (``peak``). Each attempt waits for ``gate`` (open unless ``held``)."""

    def __init__(self, held: bool = False) -> None:
        self.up = False
        self.sent = self.inflight = self.peak = 0
        self.gate = asyncio.Event()
        if not held:
            self.gate.set()

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        self.sent += 1
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        try:
            await self.gate.wait()
        finally:
            self.inflight -= 1
        if self.up:
            return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)
        return AttemptOutcome(OutcomeKind.FAILED, status_code=503)


class StaticResolver:
    """Every name resolves to one public address (never contacted: the Sender is fake)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        return ["93.184.216.34"]


def worker_node(
    sender: Sender,
    store: MemoryStore | None = None,
    ingest: dict[str, object] | None = None,
    clock: Clock | None = None,
    **delivery: object,
) -> tuple[Node, MemoryNetwork]:
    """A node (not started) whose attempts go to ``sender``; ``delivery`` entries go into
    that settings section (``poll_interval_s`` 0.05 unless given), ``ingest`` into its."""
    settings = load_settings(
        None, region="a", delivery={"poll_interval_s": 0.05, **delivery}, ingest=ingest or {}
    )
    clock = clock or SystemClock()
    rng, net = system_rng(), MemoryNetwork()
    node = Node(settings, store=store or MemoryStore(), clock=clock, rng=rng,
                ids=UlidSource(clock, rng), transport=net.transport("a"), sender=sender,
                resolver=StaticResolver())  # fmt: skip
    return node, net


async def stop(node: Node, net: MemoryNetwork) -> None:
    """Stop ``node`` and cancel its network's tasks."""
    await node.stop()
    for t in list(net.tasks):
        t.cancel()


async def until(cond, what: str, tries: int = 300) -> None:  # type: ignore[no-untyped-def]
    """Await ``cond()`` (an async predicate) every 10 ms until it holds; AssertionError
    naming ``what`` after ``tries`` checks."""
    for _ in range(tries):
        if await cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")
