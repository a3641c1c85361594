"""The simulated network: a PeerTransport per region over in-memory links.

Every message round-trips through its protobuf encoding. Links have a one-way latency per
region pair (plus jitter) and faults chosen by the nemesis:

* ``cut`` holds directed pairs ``(src, dst)`` whose packets are dropped: a symmetric
  partition cuts both directions, a one-way partition one, a partial partition some pairs.
* ``mode = "stream"`` (default) keeps the PeerStream contract that gRPC gives: a stream is
  reliable and ordered until it breaks. Packets towards a cut direction are held like TCP
  retransmits; if the cut outlasts the keepalive detection (``keepalive_s``) the stream is
  reset on both ends, otherwise they arrive when the cut heals. ``loss`` is the chance
  that a message resets its stream (a connection drop); duplication and reordering happen
  only across streams (re-sends after a reconnect, streams of different peers).
* ``mode = "datagram"`` breaks that contract on purpose: ``loss`` drops single messages,
  ``dup`` delivers twice, ``reorder`` adds jitter without keeping FIFO, cuts drop silently.

Connecting needs both directions (a handshake) and a serving peer.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from regionsync.runtime.ports import PeerStream
from regionsync.v1 import replication_pb2 as pb

__all__ = ["LinkFaults", "SimNetwork", "SimTransport"]

_CLOSED = b"\x00__closed__"


@dataclass
class LinkFaults:
    mode: str = "stream"  # "stream" | "datagram"
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    jitter: float = 0.1  # +- fraction of the base latency
    keepalive_s: tuple[float, float] = (20.0, 30.0)  # gRPC keepalive time + timeout


@dataclass
class NetStats:
    sent: int = 0
    delivered: int = 0
    dropped: int = 0
    duplicated: int = 0
    held: int = 0
    resets: int = 0
    connects: int = 0
    connect_failures: int = 0


class _Pipe:
    """One direction of a stream."""

    __slots__ = ("src", "dst", "last_at", "held")

    def __init__(self, src: str, dst: str):
        self.src, self.dst = src, dst
        self.last_at = 0.0
        self.held: list[bytes] = []


class _End:
    """One end of a stream (implements PeerStream)."""

    def __init__(self, conn: _Conn, out: _Pipe, inbox: asyncio.Queue[bytes]):
        self._conn, self._out, self._inbox = conn, out, inbox
        self.closed = False

    async def send(self, msg: pb.SyncMessage) -> None:
        if self.closed or self._conn.broken:
            raise ConnectionError("stream is closed")
        self._conn.net._send(self._conn, self._out, msg.SerializeToString())

    async def recv(self) -> pb.SyncMessage | None:
        if self.closed and self._inbox.empty():
            return None
        data = await self._inbox.get()
        if data is _CLOSED:
            self.closed = True
            return None
        return pb.SyncMessage.FromString(data)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._inbox.put_nowait(_CLOSED)
            self._conn.net._send(self._conn, self._out, _CLOSED)


class _Conn:
    """A stream between a client (``a``) and a server (``b``)."""

    def __init__(self, net: SimNetwork, a: str, b: str):
        self.net, self.a, self.b = net, a, b
        self.broken = False
        self.reset_pending = False
        self.ab, self.ba = _Pipe(a, b), _Pipe(b, a)
        self.a_in: asyncio.Queue[bytes] = asyncio.Queue()
        self.b_in: asyncio.Queue[bytes] = asyncio.Queue()
        self.client = _End(self, self.ab, self.a_in)
        self.server = _End(self, self.ba, self.b_in)

    def inbox_of(self, pipe: _Pipe) -> asyncio.Queue[bytes]:
        return self.b_in if pipe is self.ab else self.a_in

    def reset(self) -> None:
        if self.broken:
            return
        self.broken = True
        self.ab.held.clear()
        self.ba.held.clear()
        for end, inbox in ((self.client, self.a_in), (self.server, self.b_in)):
            end.closed = True
            inbox.put_nowait(_CLOSED)


class SimNetwork:
    """Regions' transports, link latencies and faults; deterministic from ``rng``."""

    def __init__(
        self,
        rng: random.Random,
        latency_ms: dict[tuple[str, str], float],
        faults: LinkFaults | None = None,
    ):
        self.rng = rng
        self.latency_ms = latency_ms  # one-way, keyed by the ordered pair
        self.faults = faults or LinkFaults()
        self.cut: set[tuple[str, str]] = set()
        self.handlers: dict[str, Callable[[PeerStream], Awaitable[None]]] = {}
        self.conns: list[_Conn] = []
        self.tasks: dict[str, dict[asyncio.Task[None], None]] = {}  # ordered sets
        self.stats = NetStats()
        self.largest = 0  # bytes of the largest message sent (not in stats: traces keep)

    def transport(self, region: str) -> SimTransport:
        return SimTransport(self, region)

    # -- faults ---------------------------------------------------------------------------

    def set_cut(self, pairs: set[tuple[str, str]]) -> None:
        """Make ``pairs`` the set of cut directions (the nemesis' current partition)."""
        newly = pairs - self.cut
        healed = self.cut - pairs
        self.cut = set(pairs)
        loop = asyncio.get_running_loop()
        for conn in self._live():
            for pipe in (conn.ab, conn.ba):
                key = (pipe.src, pipe.dst)
                if key in healed and pipe.held:
                    held, pipe.held = pipe.held, []
                    for data in held:
                        self._schedule(conn, pipe, data)
                if key in newly and self.faults.mode == "stream" and not conn.reset_pending:
                    conn.reset_pending = True
                    lo, hi = self.faults.keepalive_s
                    loop.call_later(self.rng.uniform(lo, hi), self._keepalive_check, conn)

    def _keepalive_check(self, conn: _Conn) -> None:
        conn.reset_pending = False
        if conn.broken:
            return
        if (conn.a, conn.b) in self.cut or (conn.b, conn.a) in self.cut:
            self.stats.resets += 1
            conn.reset()

    def _live(self) -> list[_Conn]:
        self.conns = [c for c in self.conns if not c.broken]
        return self.conns

    # -- messages -------------------------------------------------------------------------

    def _delay(self, src: str, dst: str) -> float:
        base = self.latency_ms[(src, dst)] / 1000
        j = self.faults.jitter
        return base * (1 + self.rng.uniform(-j, j))

    def _send(self, conn: _Conn, pipe: _Pipe, data: bytes) -> None:
        f = self.faults
        if data is not _CLOSED:
            self.stats.sent += 1
            self.largest = max(self.largest, len(data))
        if (pipe.src, pipe.dst) in self.cut:
            if f.mode == "stream":
                self.stats.held += 1
                pipe.held.append(data)
            else:
                self.stats.dropped += 1
            return
        if data is not _CLOSED and f.loss and self.rng.random() < f.loss:
            self.stats.dropped += 1
            if f.mode == "stream":  # the connection drops; both ends learn after a delay
                self.stats.resets += 1
                conn.broken = True
                asyncio.get_running_loop().call_later(
                    self._delay(pipe.src, pipe.dst), self._force_reset, conn
                )
            return
        self._schedule(conn, pipe, data)
        if f.mode == "datagram" and f.dup and self.rng.random() < f.dup:
            self.stats.duplicated += 1
            self._schedule(conn, pipe, data)

    @staticmethod
    def _force_reset(conn: _Conn) -> None:
        conn.broken = False
        conn.reset()

    def _schedule(self, conn: _Conn, pipe: _Pipe, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        delay = self._delay(pipe.src, pipe.dst)
        if self.faults.mode == "datagram" and self.faults.reorder:
            if self.rng.random() < self.faults.reorder:
                delay += self.rng.uniform(0, 4 * delay)
            at = loop.time() + delay
        else:
            at = max(loop.time() + delay, pipe.last_at + 1e-6)  # FIFO within the stream
        pipe.last_at = at
        loop.call_at(at, self._deliver, conn, pipe, data)

    def _deliver(self, conn: _Conn, pipe: _Pipe, data: bytes) -> None:
        if conn.broken:
            return
        if data is not _CLOSED:
            self.stats.delivered += 1
        conn.inbox_of(pipe).put_nowait(data)

    # -- connections ----------------------------------------------------------------------

    async def _connect(self, src: str, dst: str, timeout_s: float) -> PeerStream:
        self.stats.connects += 1
        rtt = self._delay(src, dst) + self._delay(dst, src)
        if (src, dst) in self.cut or (dst, src) in self.cut:
            await asyncio.sleep(min(timeout_s, 5.0))
            self.stats.connect_failures += 1
            raise ConnectionError(f"connect {src}->{dst}: timed out")
        await asyncio.sleep(rtt)
        handler = self.handlers.get(dst)
        if handler is None or (src, dst) in self.cut or (dst, src) in self.cut:
            self.stats.connect_failures += 1
            raise ConnectionRefusedError(f"connect {src}->{dst}: refused")
        conn = _Conn(self, src, dst)
        self.conns.append(conn)
        task = asyncio.get_running_loop().create_task(handler(conn.server))
        tasks = self.tasks.setdefault(dst, {})
        tasks[task] = None
        task.add_done_callback(lambda t: tasks.pop(t, None))
        return conn.client

    async def _stop(self, region: str) -> None:
        self.handlers.pop(region, None)
        for conn in self._live():
            if region in (conn.a, conn.b):
                conn.reset()
        tasks = list(self.tasks.pop(region, {}))
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class SimTransport:
    """The PeerTransport of one region; addresses are region names."""

    def __init__(self, net: SimNetwork, region: str):
        self.net, self.region = net, region

    async def serve(self, handler: Callable[[PeerStream], Awaitable[None]]) -> None:
        self.net.handlers[self.region] = handler

    async def connect(self, address: str, timeout_s: float) -> PeerStream:
        return await self.net._connect(self.region, address, timeout_s)

    async def stop(self) -> None:
        await self.net._stop(self.region)
