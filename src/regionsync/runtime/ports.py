"""The seams between the node runtime and the world (DESIGN.md, "Interfaces").

Production and the simulator plug different adapters into the same node code: Clock,
Store, PeerTransport/PeerStream, Sender, Resolver, Rng and IdSource. Nothing here does
I/O; these are typing Protocols only.

Below them, the narrow views that the delivery worker and the replication sessions take
of the node's parts (``LocalWriter``, ``LocalLog``, ``RecordSink``, ``StateSync``), so
neither depends on the node that wires them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from crdt import CRDT, Timestamp

from ..core.custody import CustodyRecord
from ..core.hashtree import HashTree
from ..core.model import (
    Attempt,
    AuditEntry,
    Delivery,
    DeliveryQuery,
    DeliveryStatus,
    Event,
    EventQuery,
    Record,
    WriteBatch,
)  # fmt: skip
from ..core.retry import AttemptOutcome
from ..errors import MalformedRecord
from ..v1 import replication_pb2 as pb

if TYPE_CHECKING:
    from .telemetry import Telemetry

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

_IdemRow = tuple[str, str, str, str, int, str]  # an Idempotency-Key row (WriteBatch)


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
    """One delivery attempt: POST ``body`` to ``url`` with ``headers`` within ``timeout_s``."""

    url: str
    headers: Mapping[str, str]
    body: bytes
    timeout_s: float


class Sender(Protocol):
    """Performs one HTTP attempt and returns its outcome as data; never raises for
    network or HTTP failures (they are outcomes)."""

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


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """``incarnation`` changes every time a store starts empty (a new actor for dots)."""

    region: str
    incarnation: int
    fresh: bool


class Store(Protocol):
    """Durable state of one node. ``commit`` is atomic: all of a WriteBatch or nothing.

    The contract suite in tests/ runs against every implementation.
    """

    async def open(self, region: str, new_incarnation: int) -> StoreInfo:
        """Open (creating if needed); a fresh store records ``new_incarnation``.

        Raises ValueError if the store belongs to another region."""
        ...

    async def renew_incarnation(self, incarnation: int) -> None:
        """Record ``incarnation`` as this store's own from now on (a new actor: the store
        was restored from an older copy, issue 12 item 3). Everything else is kept."""
        ...

    async def close(self) -> None: ...

    async def commit(self, batch: WriteBatch) -> None: ...

    async def load_registry(self) -> dict[str, bytes]: ...

    async def load_version_vector(self) -> dict[str, int]: ...

    async def records_after(self, after: Mapping[str, int], limit: int) -> list[Record]:
        """Log records with ``seq > after.get(origin, 0)``, in seq order per origin, at
        most ``limit`` in all."""
        ...

    async def truncate_log(self, upto: Mapping[str, int]) -> int:
        """Delete log records with ``seq <= upto[origin]`` and raise the stored log floor
        of each origin in ``upto`` to that seq (never lowers it); returns how many records
        were deleted. Atomic."""
        ...

    async def load_log_floor(self) -> dict[str, int]:
        """origin -> highest seq truncated from the log (records above it are kept)."""
        ...

    async def list_event_ids(self, after: str = "", limit: int | None = None) -> list[str]:
        """Ids of the stored events after ``after``, sorted, at most ``limit`` (None: all;
        for the anti-entropy hash tree, read a page at a time)."""
        ...

    async def load_deliveries(self, after: str = "", limit: int | None = None) -> list[Delivery]:
        """The stored deliveries with ids after ``after``, in id order, at most ``limit``
        (None: all; for the anti-entropy hash tree, read a page at a time)."""
        ...

    async def get_event(self, event_id: str) -> Event | None: ...

    async def get_events(self, event_ids: Sequence[str]) -> dict[str, Event]:
        """The stored events of ``event_ids`` by id (absent ids left out); one read."""
        ...

    async def load_idempotency(self) -> list[tuple[str, str, str, str, int, str]]:
        """Every stored ``(tenant, key, event_id, body_sha256, created_at_ms, region)``."""
        ...

    async def get_idempotency(self, tenant: str, key: str) -> _IdemRow | None:
        """The stored row of ``tenant``'s Idempotency-Key ``key`` (even expired), or None."""
        ...

    async def idempotency_of_events(self, event_ids: Sequence[str]) -> list[_IdemRow]:
        """The stored rows whose event is one of ``event_ids`` (an index on event_id)."""
        ...

    async def purge_idempotency(self, before_ms: int, limit: int) -> int:
        """Delete at most ``limit`` keys created before ``before_ms`` (indexed); returns
        how many. Callers repeat until fewer were deleted (no long write lock)."""
        ...

    async def get_delivery(self, delivery_id: str) -> Delivery | None: ...

    async def get_deliveries(self, delivery_ids: Sequence[str]) -> dict[str, Delivery]:
        """The stored deliveries of ``delivery_ids`` by id (absent ids left out); one read."""
        ...

    async def deliveries_of_event(self, event_id: str) -> list[Delivery]: ...

    async def list_deliveries(
        self,
        endpoint_id: str,
        status: DeliveryStatus | None,
        since_ms: int | None,
        after_id: str | None,
        limit: int,
    ) -> list[Delivery]:
        """Deliveries of an endpoint in id order, after ``after_id`` (cursor)."""
        ...

    async def list_events(
        self, q: EventQuery, before: tuple[int, str] | None, limit: int
    ) -> list[Event]:
        """At most ``limit`` events passing ``q``, newest first: ordered by
        ``(received_at_ms, id)`` descending, strictly below the cursor ``before``."""
        ...

    async def list_tenant_deliveries(
        self, q: DeliveryQuery, before: tuple[int, str] | None, limit: int
    ) -> list[Delivery]:
        """At most ``limit`` deliveries passing ``q``, newest first: ordered by
        ``(created_at_ms, id)`` descending, strictly below the cursor ``before``."""
        ...

    async def deliveries_of_events(self, event_ids: Sequence[str]) -> list[Delivery]:
        """Every delivery of the given events (at most 1000 ids), in id order."""
        ...

    async def due_deliveries(
        self,
        region: str,
        now_ms: int,
        limit: int,
        exclude: Sequence[str],
        exclude_endpoints: Sequence[str] = (),
    ) -> list[Delivery]:
        """Pending deliveries owned by ``region`` with ``next_attempt_at_ms <= now_ms``, in
        that order, skipping ids in ``exclude`` and endpoints in ``exclude_endpoints``
        (lanes that are full)."""
        ...

    async def next_due_ms(self, region: str) -> int | None:
        """Earliest ``next_attempt_at_ms`` of a pending delivery of ``region``."""
        ...

    async def attempts_of(self, delivery_id: str) -> list[Attempt]: ...

    async def list_attempts(
        self,
        endpoint_id: str,
        succeeded: bool | None,
        since_ms: int | None,
        after: tuple[int, str, int] | None,
        limit: int,
    ) -> list[Attempt]:
        """Attempts to an endpoint ordered by ``(at_ms, delivery_id, n)``, after the cursor
        ``after``; ``succeeded`` filters on whether the attempt had no error."""
        ...

    async def purge_attempts(self, before_ms: int, limit: int) -> int:
        """Delete at most ``limit`` attempts older than ``before_ms`` (a short transaction,
        so ingest is never held up); returns how many."""
        ...

    async def list_audit(
        self,
        tenant: str | None,
        since_ms: int | None,
        before: tuple[int, int, str, int] | None,
        limit: int,
    ) -> list[AuditEntry]:
        """Audit entries (of ``tenant`` if not None; ``hlc_wall_ms >= since_ms``), newest
        first by ``(hlc_wall_ms, hlc_logical, origin, seq)``, strictly before the cursor
        ``before`` in that order."""
        ...

    async def counts(self, region: str) -> dict[str, int]:
        """Counts for status and metrics: ``events`` (all held), ``events_accepted`` (origin
        ``region``) and ``deliveries_<status>`` of deliveries owned by ``region``. Exact and
        kept by commits (rows per kind, region and status), never a scan (issue 17)."""
        ...

    async def pending_count(self, region: str) -> int:
        """``counts(region)["deliveries_pending"]``."""
        ...


class LocalWriter(Protocol):
    """The local write path (runtime/writepath.py) as the delivery worker uses it: take
    ``lock``, build a change, ``commit_local`` (with an own log record) or ``submit``
    (without), release the lock, then await the returned durability future."""

    actor: str
    lock: asyncio.Lock
    telemetry: Telemetry

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

    async def peer_hello(self, region: str, version_vector: Mapping[str, int]) -> None:
        """A peer's Hello arrived: renew the actor if the peer saw more of it."""
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
