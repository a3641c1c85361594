"""The seams between the node runtime and the world (README.md, "Architecture").

Production and the simulator plug different adapters into the same node code: Clock,
Store (its own module, ``store_port``, re-exported here), PeerTransport/PeerStream,
Sender, Resolver, Rng and IdSource. Nothing here does I/O; these are typing Protocols
only.

Below them, the narrow views that the delivery worker and the replication sessions take
of the node's parts (``LocalWriter``, ``LocalLog``, ``RecordSink``, ``StateSync``), so
neither depends on the node that wires them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from crdt import CRDT, Timestamp

from ..core.brokers import BrokerDestination
from ..core.capabilities import Negotiation
from ..core.clock_offset import Sample
from ..core.custody import CustodyRecord
from ..core.hashtree import HashTree
from ..core.model import (
    Attempt,
    Delivery,
    Event,
    Record,
    WriteBatch,
)  # fmt: skip
from ..core.retry import AttemptOutcome
from ..errors import MalformedRecord
from ..v1 import replication_pb2 as pb
from .store_port import Store, StoreInfo

if TYPE_CHECKING:
    from .telemetry import Telemetry
    from .unsettled import UnsettledDeliveries

__all__ = [
    "Clock",
    "ContactGossip",
    "CustodyView",
    "IdSource",
    "LocalLog",
    "LocalWriter",
    "OutboundRequest",
    "PeerStream",
    "PeerTransport",
    "RecordSink",
    "Resolver",
    "Rng",
    "Sender",
    "StateSync",
    "Store",
    "StoreInfo",
]


class Clock(Protocol):
    """Wall time in integer milliseconds, monotonic seconds, and sleeping."""

    def wall_ms(self) -> int: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class Rng(Protocol):
    """The part of ``random.Random`` the node uses; seeded per node in the simulator."""

    def random(self) -> float: ...

    def uniform(self, a: float, b: float) -> float: ...

    def randbytes(self, n: int) -> bytes: ...


class IdSource(Protocol):
    """New unique, time-ordered ids: ``new(prefix)`` -> e.g. ``evt_01J...``."""

    def new(self, prefix: str) -> str: ...


class Resolver(Protocol):
    """Resolve a host name to IP address strings; raises OSError when it cannot."""

    async def resolve(self, host: str, port: int) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class OutboundRequest:
    """One delivery attempt: POST ``body`` to ``url`` with ``headers`` within ``timeout_s``;
    with a ``destination``, publish ``body`` with ``headers`` to that broker instead
    (core.brokers; ``url`` is then its URL without password, for logs)."""

    url: str
    headers: Mapping[str, str]
    body: bytes
    timeout_s: float
    destination: BrokerDestination | None = None


class Sender(Protocol):
    """Performs one attempt (an HTTP POST, or a broker publish for a request with a
    ``destination``) and returns its outcome as data; never raises for network, HTTP or
    broker failures (they are outcomes)."""

    async def send(self, request: OutboundRequest) -> AttemptOutcome: ...


class PeerStream(Protocol):
    """One replication stream: protobuf ``SyncMessage`` in both directions."""

    async def send(self, msg: pb.SyncMessage) -> None: ...

    async def recv(self) -> pb.SyncMessage | None:
        """The next message, or None when the other side closed the stream."""
        ...

    async def close(self) -> None: ...


class PeerTransport(Protocol):
    """Opens streams to peers and accepts theirs.

    ``connect`` raises ConnectionError when the peer cannot be reached; ``serve`` starts
    accepting and calls ``handler`` once per incoming stream.
    """

    async def connect(self, address: str, timeout_s: float) -> PeerStream: ...

    async def serve(self, handler: Callable[[PeerStream], Awaitable[None]]) -> None: ...

    async def stop(self) -> None: ...


class LocalWriter(Protocol):
    """The local write path (runtime/writepath.py) as the delivery worker uses it: take
    ``lock``, build a change, ``commit_local`` (with an own log record) or ``submit``
    (without), release the lock, then await the returned durability future."""

    actor: str
    lock: asyncio.Lock
    telemetry: Telemetry
    unsettled: UnsettledDeliveries  # pin a store read of deliveries made outside ``lock``
    commit_observers: list[Callable[[WriteBatch], None]]  # called with each durable batch

    def stamp(self) -> Timestamp: ...

    def submit(self, batch: WriteBatch) -> asyncio.Future[None]: ...

    def commit_local(
        self,
        kind: str,
        stamp: Timestamp,
        deltas: Mapping[str, CRDT],
        batch: WriteBatch | None = None,
        event: Event | None = None,
        delivery: Delivery | None = None,
        idempotency: tuple[str, str, str, str, int, str] | None = None,
        deliveries: list[Delivery] | None = None,
        attempt: Attempt | None = None,
        audit: dict[str, str] | None = None,
    ) -> asyncio.Future[None]: ...

    def record_local(
        self,
        kind: str,
        stamp: Timestamp,
        deltas: Mapping[str, CRDT],
        batch: WriteBatch,
        event: Event | None = None,
        delivery: Delivery | None = None,
        idempotency: tuple[str, str, str, str, int, str] | None = None,
        deliveries: list[Delivery] | None = None,
        attempt: Attempt | None = None,
        audit: dict[str, str] | None = None,
    ) -> None: ...


class LocalLog(Protocol):
    """What a replication session reads of the local log: this node's identity, the
    version vector of what is durable, and wake-ups when new records are."""

    actor: str
    incarnation: int
    durable_vv: dict[str, int]
    actor_checked: asyncio.Event  # set once no peer can have seen more of ``actor``
    capabilities: Negotiation  # what this node reads, what the cluster writes

    async def peer_hello(self, region: str, version_vector: Mapping[str, int]) -> None:
        """A peer's Hello arrived: renew the actor if the peer saw more of it."""
        ...

    def peer_clock(self, region: str, sample: Sample | None) -> None:
        """A sample of a peer's clock offset (core/clock_offset.py) from its Hello or Ack."""
        ...

    def notify_log(self) -> None: ...

    def log_waiter(self) -> asyncio.Event: ...

    def drop_log_waiter(self, ev: asyncio.Event) -> None: ...


class RecordSink(Protocol):
    """Where a replication session puts a peer's records (runtime/replica.py)."""

    async def apply_records(self, records: list[Record]) -> list[MalformedRecord]:
        """Merge in per-origin order; returns the records rejected (never merged)."""
        ...

    def behind_floor(self, vv: Mapping[str, int]) -> list[str]:
        """Origins a holder of ``vv`` lacks records of that the log no longer has."""
        ...


class StateSync(Protocol):
    """The anti-entropy state of a node (runtime/antientropy.py)."""

    async def state_tree(self) -> HashTree: ...

    async def digest(self) -> tuple[dict[str, int], bytes]:
        """``(durable version vector, state root)`` for a digest; root b"" when busy."""
        ...

    async def state_items(self, idents: list[str]) -> list[tuple[str, bytes]]: ...

    async def apply_state(
        self, items: list[tuple[str, bytes]], version_vector: Mapping[str, int] | None = None
    ) -> str | None:
        """Merge items in one commit; the reason if any was malformed (none merged)."""
        ...


class ContactGossip(Protocol):
    """Who heard from whom when (runtime/custody.py): replication sessions report each
    message from a peer and carry the contact table in Hello and Ack."""

    def contact(self, region: str) -> None: ...

    def gossip(self) -> dict[str, int]: ...

    def merge_gossip(self, heard: Mapping[str, int]) -> None: ...


class CustodyView(Protocol):
    """Which owners' deliveries this region may claim (runtime/custody.py)."""

    def claimable(self) -> Mapping[str, CustodyRecord | None]:
        """owner region -> its custody record (None: this region's own, undisputed)."""
        ...

    def delivers(self, owner: str, rec: CustodyRecord | None, endpoint_id: str) -> bool: ...

    def adopted(self, delivery_id: str) -> None: ...
