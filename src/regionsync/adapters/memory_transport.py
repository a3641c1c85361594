"""In-memory PeerTransport for tests and the simulator: streams are pairs of queues, and
every message round-trips through its protobuf encoding like on the wire.

``MemoryNetwork.partition(a, b)`` cuts the link between two addresses (both directions;
open streams across it are closed) and ``heal()`` restores every link.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ..runtime.ports import PeerStream
from ..v1 import replication_pb2 as pb

__all__ = ["MemoryNetwork", "MemoryTransport"]

_CLOSED = object()


class _Stream:
    def __init__(
        self, net: MemoryNetwork, link: frozenset[str], inbox: asyncio.Queue, outbox: asyncio.Queue
    ):
        self._net, self.link = net, link
        self._inbox, self._outbox = inbox, outbox
        self.closed = False

    async def send(self, msg: pb.SyncMessage) -> None:
        if self.closed or self.link in self._net.cut:
            raise ConnectionError("link is down")
        self._outbox.put_nowait(msg.SerializeToString())

    async def recv(self) -> pb.SyncMessage | None:
        if self.closed:
            return None
        data = await self._inbox.get()
        if data is _CLOSED:
            self.closed = True
            return None
        return pb.SyncMessage.FromString(data)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._outbox.put_nowait(_CLOSED)
            self._inbox.put_nowait(_CLOSED)


class MemoryNetwork:
    """A set of addresses with handlers, and the links that are cut."""

    def __init__(self) -> None:
        self.handlers: dict[str, Callable[[PeerStream], Awaitable[None]]] = {}
        self.cut: set[frozenset[str]] = set()
        self.streams: list[_Stream] = []
        self.tasks: dict[asyncio.Task[None], None] = {}  # ordered, like every task set
        self.servers: dict[str, MemoryTransport] = {}  # address -> its serving transport

    def transport(self, address: str) -> MemoryTransport:
        return MemoryTransport(self, address)

    def partition(self, a: str, b: str) -> None:
        link = frozenset((a, b))
        self.cut.add(link)
        for s in self.streams:
            if s.link == link:
                s._inbox.put_nowait(_CLOSED)

    def heal(self) -> None:
        self.cut.clear()


class MemoryTransport:
    """The PeerTransport of one address on a MemoryNetwork."""

    def __init__(self, net: MemoryNetwork, address: str):
        self.net, self.address = net, address
        # the streams this transport serves: cancelled when it stops (a served stream may
        # wait on its stopped node for ever, and hold the node)
        self.served: dict[asyncio.Task[None], None] = {}

    async def serve(self, handler: Callable[[PeerStream], Awaitable[None]]) -> None:
        self.net.handlers[self.address] = handler
        self.net.servers[self.address] = self

    async def connect(self, address: str, timeout_s: float) -> PeerStream:
        link = frozenset((self.address, address))
        handler = self.net.handlers.get(address)
        if handler is None or link in self.net.cut:
            raise ConnectionError(f"{address} unreachable from {self.address}")
        a_to_b: asyncio.Queue = asyncio.Queue()
        b_to_a: asyncio.Queue = asyncio.Queue()
        client = _Stream(self.net, link, inbox=b_to_a, outbox=a_to_b)
        server = _Stream(self.net, link, inbox=a_to_b, outbox=b_to_a)
        # closed streams go (they hold their queues: a bench restarting nodes grew by them)
        self.net.streams = [s for s in self.net.streams if not s.closed] + [client, server]
        task = asyncio.create_task(handler(server))
        self.net.tasks[task] = None
        server_side = self.net.servers.get(address)
        served = server_side.served if server_side is not None else {}
        served[task] = None
        task.add_done_callback(lambda t: (self.net.tasks.pop(t, None), served.pop(t, None)))
        return client

    async def stop(self) -> None:
        if self.net.servers.get(self.address) is self:
            self.net.handlers.pop(self.address, None)
            self.net.servers.pop(self.address, None)
        for task in list(self.served):
            task.cancel()
        for s in self.net.streams:
            if self.address in s.link:
                await s.close()
        self.net.streams = [s for s in self.net.streams if not s.closed]
