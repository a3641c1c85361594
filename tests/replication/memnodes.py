"""Helpers: in-process nodes over the in-memory transport and store, a recording sender."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.adapters.system import SystemClock, UlidSource, system_rng
from regionsync.config import load_settings
from regionsync.core.model import WriteBatch
from regionsync.core.retry import AttemptOutcome, OutcomeKind
from regionsync.runtime.node import Node
from regionsync.runtime.ports import OutboundRequest, Sender


class FailOnce(MemoryStore):
    """A memory store that fails its next commit when ``fail_next`` is set (after
    ``fail_after_s``); with ``slow``, its registry read takes 20 ms (a large registry)."""

    def __init__(self, fail_after_s: float = 0.0) -> None:
        super().__init__()
        self.fail_next = False
        self.slow = False
        self.fail_after_s = fail_after_s

    async def commit(self, batch: WriteBatch) -> None:
        if self.fail_next:
            self.fail_next = False
            if self.fail_after_s:
                await asyncio.sleep(self.fail_after_s)
            raise OSError("disk full")
        await super().commit(batch)

    async def load_registry(self) -> dict[str, bytes]:
        if self.slow:
            await asyncio.sleep(0.02)
        return await super().load_registry()


class RecordingSender:
    """A Sender that records every request and answers 204."""

    def __init__(self) -> None:
        self.requests: list[OutboundRequest] = []

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        self.requests.append(request)
        return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)


class StaticResolver:
    """Every name resolves to one public documentation-free address (never contacted)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        return ["93.184.216.34"]


def make_node(
    net: MemoryNetwork,
    region: str,
    peers: list[str],
    store: MemoryStore | None = None,
    extra: dict[str, object] | None = None,
    reads: frozenset[str] | None = None,
    sender: Sender | None = None,
    **replication: object,
) -> Node:
    """A node of ``region`` peered with ``peers`` on ``net``; ``replication`` entries go
    into that section, ``extra`` are further settings (e.g. ``operational_webhooks``);
    ``reads`` restricts the features it reads (core.capabilities; BASELINE: as 0.1.0);
    ``sender``: a RecordingSender unless given."""
    settings = load_settings(
        None,
        **(extra or {}),
        region=region,
        peers=[{"region": p, "address": p} for p in peers],
        replication={
            "reconnect_min_s": 0.01,
            "reconnect_max_s": 0.05,
            "batch_records": 4,
            **replication,
        },
    )
    clock = SystemClock()
    rng = system_rng()
    return Node(
        settings,
        store=store or MemoryStore(),
        clock=clock,
        rng=rng,
        ids=UlidSource(clock, rng),
        transport=net.transport(region),
        sender=sender or RecordingSender(),
        resolver=StaticResolver(),
        **({} if reads is None else {"reads": reads}),
    )


async def eventually(check: Callable[[], bool | Awaitable[bool]], timeout_s: float = 10.0) -> None:
    """Poll ``check`` until true; fails the test at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            pytest.fail("condition not reached before the deadline")
        await asyncio.sleep(0.01)


def converged(*nodes: Node) -> bool:
    """Every node holds the same registry and the same durable version vector."""
    return (
        len({n.catalog.registry.state_hash() for n in nodes}) == 1
        and len({tuple(sorted(n.writer.durable_vv.items())) for n in nodes}) == 1
    )


async def start(started: list[Node], *nodes: Node) -> tuple[Node, ...]:
    """Start ``nodes`` in order, each added to ``started`` (stopped by the fixture)."""
    for n in nodes:
        await n.start()
        started.append(n)
    return nodes


@contextlib.asynccontextmanager
async def loop_turns() -> AsyncIterator[list[int]]:
    """``[n]``: the event loop's turns while the body runs (a task yielding at each)."""
    turns = [0]

    async def ticker() -> None:
        while True:
            turns[0] += 1
            await asyncio.sleep(0)

    task = asyncio.get_running_loop().create_task(ticker())
    try:
        yield turns
    finally:
        task.cancel()
