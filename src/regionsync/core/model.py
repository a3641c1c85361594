"""Domain records shared by the core, the runtime and every Store adapter.

Plain frozen dataclasses (``Record`` a named tuple); never read time or do I/O. Times
are integer milliseconds since the Unix epoch (``*_ms``); ids are prefixed strings
(``evt_``, ``ep_``, ``dlv_``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

__all__ = [
    "Attempt",
    "AuditEntry",
    "Delivery",
    "DeliveryQuery",
    "DeliveryStatus",
    "Event",
    "EventQuery",
    "Record",
    "WriteBatch",
    "add_moves",
    "delivery_join",
    "status_join",
    "storable_text",
]


class DeliveryStatus(StrEnum):
    """Status of one (event, endpoint) delivery; a join-semilattice by ``RANK``.

    pending < cancelled, skipped < dead < delivered (docs/design.md#data-model): replicas merge
    a delivery's status by taking the higher rank, so outcomes converge like CRDT state.
    """

    PENDING = "pending"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    DEAD = "dead"
    DELIVERED = "delivered"

    @property
    def final(self) -> bool:
        return self is not DeliveryStatus.PENDING


_RANK = {
    DeliveryStatus.PENDING: 0,
    DeliveryStatus.CANCELLED: 1,
    DeliveryStatus.SKIPPED: 1,
    DeliveryStatus.DEAD: 2,
    DeliveryStatus.DELIVERED: 3,
}


def status_join(a: DeliveryStatus, b: DeliveryStatus) -> DeliveryStatus:
    """Least upper bound of two statuses; ties of equal rank break by name (deterministic)."""
    return max(a, b, key=lambda s: (_RANK[s], s.value))


@dataclass(frozen=True, slots=True)
class Event:
    """An accepted event. ``payload`` is the exact JSON bytes that get delivered and signed."""

    id: str
    tenant: str
    event_type: str
    payload: bytes
    region: str
    received_at_ms: int
    # the tenant's generation when accepted (core.registry.Registry.tenant_gen): an event
    # of an earlier life of a re-created tenant id stays invisible to the new one
    owner_gen: str = ""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event to one endpoint, owned by ``region`` (the event's origin, or the region
    that started its generation); who delivers it is the owner's custody (core.custody)."""

    id: str
    event_id: str
    endpoint_id: str
    tenant: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at_ms: int | None
    region: str
    created_at_ms: int
    updated_at_ms: int
    # a retry, recovery or replay starts a new generation, owned by the region that
    # started it; a higher generation supersedes every state of a lower one
    generation: int = 0
    # the endpoint's generation at fan-out (Registry.endpoint_gen): a re-created
    # endpoint id neither shows, retries nor sends deliveries of its earlier life
    owner_gen: str = ""


def delivery_join(a: Delivery, b: Delivery) -> Delivery:
    """Least upper bound of two states of one delivery: the greater state under a total
    order, so the join is a semilattice (commutative, associative, idempotent).

    The order: generation, then status (``status_join``'s ranks), then attempts, then the
    update time, then the rest of the fields. Of two pending states of a generation the
    one with more attempts wins with its schedule, so a custodian that takes a delivery
    over continues from the attempts made elsewhere, never from zero.
    """
    return max(a, b, key=_join_key)


def _join_key(d: Delivery) -> tuple[object, ...]:
    return (
        d.generation, _RANK[d.status], d.status.value, d.attempts, d.updated_at_ms,
        -1 if d.next_attempt_at_ms is None else d.next_attempt_at_ms, d.region,
        d.created_at_ms, d.event_id, d.endpoint_id, d.tenant, d.id,
    )  # fmt: skip


def storable_text(text: str) -> str:
    """``text`` with every NUL replaced by U+FFFD: no store keeps a NUL (SQLite cuts a text
    there, PostgreSQL refuses it). For free text from outside, such as a receiver's
    answer; replicated records apply the same rule (core.records)."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


@dataclass(frozen=True, slots=True)
class Attempt:
    """One HTTP try of a delivery, as the attempt log shows it."""

    delivery_id: str
    n: int
    at_ms: int
    region: str
    status_code: int | None
    latency_ms: float
    error: str | None
    response_excerpt: str
    endpoint_id: str = ""
    generation: int = 0  # attempts count from 1 again in each delivery generation
    response_headers: str = ""  # at most 8 KiB of the response head
    owner_gen: str = ""  # the delivery's endpoint generation (Delivery.owner_gen)
    # the request's headers, "name: value" lines, credentials redacted, at most 4 KiB
    # (core.envelope.recorded_headers); "" for attempts recorded before it existed
    request_headers: str = ""


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Filters of a tenant's event list, combined with AND (None: no filter).

    ``type_prefix`` ``"issues."`` matches ``issues.opened`` (the API's ``issues.*``);
    ``since_ms`` <= ``received_at_ms`` < ``until_ms``; ``endpoint_id`` and ``status``
    keep events with a delivery to that endpoint and/or in that status (both given: the
    same delivery).
    """

    tenant: str
    event_type: str | None = None
    type_prefix: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    endpoint_id: str | None = None
    status: DeliveryStatus | None = None

    def matches(self, e: Event, deliveries: list[Delivery]) -> bool:
        """Does ``e`` (with its ``deliveries``) pass the filters? (the memory store's)"""
        return (
            e.tenant == self.tenant
            and (self.event_type is None or e.event_type == self.event_type)
            and (self.type_prefix is None or e.event_type.startswith(self.type_prefix))
            and (self.since_ms is None or e.received_at_ms >= self.since_ms)
            and (self.until_ms is None or e.received_at_ms < self.until_ms)
            and (
                (self.endpoint_id is None and self.status is None)
                or any(
                    (self.endpoint_id is None or d.endpoint_id == self.endpoint_id)
                    and (self.status is None or d.status is self.status)
                    for d in deliveries
                )
            )
        )


@dataclass(frozen=True, slots=True)
class DeliveryQuery:
    """Filters of a tenant's delivery list, combined with AND (None: no filter);
    ``since_ms`` <= ``created_at_ms``."""

    tenant: str
    endpoint_id: str | None = None
    status: DeliveryStatus | None = None
    since_ms: int | None = None

    def matches(self, d: Delivery) -> bool:
        return (
            d.tenant == self.tenant
            and (self.endpoint_id is None or d.endpoint_id == self.endpoint_id)
            and (self.status is None or d.status is self.status)
            and (self.since_ms is None or d.created_at_ms >= self.since_ms)
        )


class Record(NamedTuple):
    """A delta record of the replication log: ``seq`` counts 1, 2, 3... per ``origin``.

    ``body`` is canonical msgpack decoded by ``regionsync.core.records``; ``hlc`` is the
    origin's HLC stamp ``(wall_ms, logical)`` of the change. A named tuple, not a frozen
    dataclass like the others: every replicated record is built twice (the sender's log
    read, the receiver's decoding), and a tuple builds in 0.24 us against 0.62 us.
    """

    origin: str
    seq: int
    kind: str
    body: bytes
    hlc: tuple[int, int]


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One registry change, as the audit log shows it (issue 14): the record that carried
    it (``origin`` actor ``region:incarnation``, ``seq``) and its HLC stamp say where and
    when; ``who`` is the caller (``token:<id>:<name>``, ``config:tokens[<i>]:<scope>``,
    ``anonymous``, or ``node`` for a change the node made itself; entries written before
    issue 38 name tokens ``token:<name>`` and ``config:<scope>``); ``op`` what
    (``endpoint.create``, ``delivery.retry``...),
    ``object`` which (``endpoint/<id>``), ``tenant`` whose (``""``: none), ``detail`` the
    changed field names (never values: secrets stay out of the log)."""

    origin: str
    seq: int
    hlc_wall_ms: int
    hlc_logical: int
    who: str
    op: str
    object: str
    tenant: str
    detail: str = ""

    @property
    def region(self) -> str:
        return self.origin.rsplit(":", 1)[0]

    @property
    def id(self) -> str:
        return f"{self.origin}/{self.seq}"


UsageMoves = dict[tuple[str, str], int]  # (tenant, usage counter) -> amount to add


def add_moves(into: UsageMoves, moves: Mapping[tuple[str, str], int]) -> UsageMoves:
    """Add usage ``moves`` to ``into`` (in place, key by key); returns ``into``."""
    for key, n in moves.items():
        into[key] = into.get(key, 0) + n
    return into


@dataclass(slots=True)
class WriteBatch:
    """Everything one atomic Store commit writes (one transaction in every store).

    registry: key -> canonical CRDT bytes (full state, upserted)
    records: appended to the delta log; version_vector: origin -> seq (upserted)
    events, deliveries (upserted by id), attempts (appended)
    idempotency: (tenant, key, event_id, body_sha256, created_at_ms, region) rows
    audit: audit log entries (inserted once per origin and seq)
    usage: (tenant, usage counter) -> amount to add (may be negative): the write path
    turns the moves of several group commits into one own registry record
    (runtime.writepath), so a publish costs no CRDT delta of its own. A store that keeps
    a usage carry (``Store.load_usage_carry`` not None) adds them to it in the same
    transaction, or, when ``usage_recorded`` (this commit holds the record of the whole
    carry and of these moves), empties it
    """

    registry: dict[str, bytes] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)
    version_vector: dict[str, int] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    idempotency: list[tuple[str, str, str, str, int, str]] = field(default_factory=list)
    audit: list[AuditEntry] = field(default_factory=list)
    usage: UsageMoves = field(default_factory=dict)
    usage_recorded: bool = False

    def __bool__(self) -> bool:
        return bool(
            self.usage
            or self.registry
            or self.records
            or self.version_vector
            or self.events
            or self.deliveries
            or self.attempts
            or self.idempotency
            or self.audit
        )
