"""The Store port (README.md, "Architecture"): the durable state of one node, as a typing
Protocol that SqliteStore, PostgresStore and MemoryStore implement (adapters/*_store.py)
and the contract suite (tests/store/test_store_contract.py) checks. Re-exported by
``runtime.ports``, where the other seams are; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

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

__all__ = ["Store", "StoreInfo"]

_IdemRow = tuple[str, str, str, str, int, str]  # an Idempotency-Key row (WriteBatch)


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """``incarnation`` changes every time a store starts empty (a new actor for dots)."""

    region: str
    incarnation: int
    fresh: bool
    # the first incarnation of the store (its ``born`` meta row, written when it started
    # empty); 0 for a store an earlier release created (runtime/pruning.py ``held``)
    born_ms: int = 0


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

    async def load_usage_carry(self) -> dict[tuple[str, str], int] | None:
        """The usage counter moves committed and not yet recorded (``WriteBatch.usage``),
        by (tenant, counter); None for a store that keeps no carry (its write path then
        records the moves with every commit)."""
        ...

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

    async def forget_origins(self, origins: Iterable[str]) -> None:
        """Delete every trace of ``origins`` (retired actors pruned from the version
        vector, core/pruning.py): their version vector rows, log records and log floors.
        Atomic."""
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

    async def load_idempotency(
        self, after: tuple[str, str] | None = None, limit: int | None = None
    ) -> list[_IdemRow]:
        """The stored ``(tenant, key, event_id, body_sha256, created_at_ms, region)`` rows
        whose ``(tenant, key)`` comes after ``after`` (None: from the first), in that
        order, at most ``limit`` (None: all; the key filter reads a page at a time)."""
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
        per_endpoint: int | None = None,
    ) -> list[Delivery]:
        """Pending deliveries owned by ``region`` with ``next_attempt_at_ms <= now_ms``, in
        that order, skipping ids in ``exclude`` and endpoints in ``exclude_endpoints``
        (lanes that are full). With ``per_endpoint``: at most that many of each endpoint,
        round-robin (ordered by rank within the endpoint, then due time, then id: every
        endpoint's first row before any endpoint's second; issue 17, fan-in)."""
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
        descending: bool = False,
    ) -> list[Attempt]:
        """Attempts to an endpoint ordered by ``(at_ms, delivery_id, n)``, after the cursor
        ``after`` (``descending``: newest first, before the cursor); ``succeeded`` filters
        on whether the attempt had no error."""
        ...

    async def purge_attempts(self, before_ms: int, limit: int) -> int:
        """Delete at most ``limit`` attempts older than ``before_ms`` (a short transaction,
        so ingest is never held up); returns how many."""
        ...

    async def purge_events(
        self, before_ms: int, limit: int, tenant: str | None = None, skip: Sequence[str] = ()
    ) -> tuple[list[str], list[str], int]:
        """Event retention, one batch in one short transaction: delete at most ``limit``
        events received before ``before_ms`` (of ``tenant`` only if not None, of no tenant
        in ``skip``) none of whose deliveries is pending, with
        their deliveries and those deliveries' attempts (never a pending delivery, never
        a delivery without its event; SQL stores keep events a log record may still need,
        ``adapters/retention_sql.py``). Returns (event ids, delivery ids, attempts)
        deleted; callers repeat until no event was deleted."""
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

    async def pending_by_tenant(self, region: str) -> dict[str, int]:
        """Pending deliveries owned by ``region`` per tenant (tenants with none left out):
        one read of the pending rows' index (at start and when custody hands back)."""
        ...
