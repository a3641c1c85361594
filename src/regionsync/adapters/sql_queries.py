"""The list and read queries of the SQL stores (SqliteStore and PostgresStore), each
declared once and built for a ``Dialect``: the driver's placeholder and the few spellings
that differ between SQLite and PostgreSQL.

A ``Queries`` method returns ``(sql, args)`` for the store to run; the rows come back as
the column lists below name them, in the order of the model's fields (``Event(*row)``,
``Attempt(*row)``, ``AuditEntry(*row)``, ``delivery_of(row)``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.model import Delivery, DeliveryQuery, DeliveryStatus, EventQuery

__all__ = [
    "ATTEMPT_COLS",
    "AUDIT_COLS",
    "DELIVERY_COLS",
    "EVENT_COLS",
    "IDEMPOTENCY_COLS",
    "POSTGRES",
    "SQLITE",
    "Dialect",
    "Queries",
    "Query",
    "counts_of",
    "delivery_of",
    "prefixed",
]

Query = tuple[str, list[Any]]

ATTEMPT_COLS = (
    "delivery_id, n, at_ms, region, status_code, latency_ms, error, response_excerpt, "
    "endpoint_id, generation, response_headers, owner_gen, request_headers"
)
AUDIT_COLS = "origin, seq, hlc_wall, hlc_logical, who, op, object, tenant, detail"
DELIVERY_COLS = (
    "id, event_id, endpoint_id, tenant, status, attempts, next_attempt_at_ms, region, "
    "created_at_ms, updated_at_ms, generation, owner_gen"
)
EVENT_COLS = "id, tenant, event_type, payload, region, received_at_ms, owner_gen"
# WriteBatch.idempotency's rows, in this order
IDEMPOTENCY_COLS = "tenant, key, event_id, body_sha256, created_at_ms, region"


def prefixed(cols: str, table: str) -> str:
    """``cols`` each qualified by ``table`` (``d.id, d.event_id, ...``)."""
    return ", ".join(f"{table}.{c}" for c in cols.split(", "))


def delivery_of(row: Sequence[Any]) -> Delivery:
    """The Delivery of a ``DELIVERY_COLS`` row."""
    return Delivery(row[0], row[1], row[2], row[3], DeliveryStatus(row[4]), *row[5:12])


def counts_of(rows: Iterable[Sequence[Any]], region: str) -> dict[str, int]:
    """``Store.counts`` of ``region`` from ``row_counts`` rows (kind, region, status, n)."""
    out = {"events": 0, "events_accepted": 0}
    out.update((f"deliveries_{s.value}", 0) for s in DeliveryStatus)
    for kind, r, status, n in rows:  # a few rows: kinds x regions x statuses
        if kind == "event":
            out["events"] += int(n)
            if r == region:
                out["events_accepted"] += int(n)
        elif r == region:
            out[f"deliveries_{status}"] = int(n)
    return out


@dataclass(frozen=True)
class Dialect:
    """What differs between the stores' SQL: the placeholder (``?`` in the text below),
    the LIMIT argument that means none, and how a column is matched against a list."""

    param: str
    no_limit: int | None
    any_array: bool  # ``col = ANY(%s)`` with one list argument, else ``col IN (?, ?, ...)``
    row_id: str  # the column naming a row's place in its table (rowid, ctid)

    def sql(self, text: str) -> str:
        return text if self.param == "?" else text.replace("?", self.param)

    def limit(self, limit: int | None) -> int | None:
        return self.no_limit if limit is None else limit

    def is_in(self, column: str, values: Sequence[Any]) -> Query:
        """``column`` is one of ``values`` (``?`` placeholders, not yet ``sql``'d)."""
        if self.any_array:
            return f"{column} = ANY(?)", [list(values)]
        return f"{column} IN ({','.join('?' * len(values))})", list(values)


SQLITE = Dialect("?", -1, any_array=False, row_id="rowid")
POSTGRES = Dialect("%s", None, any_array=True, row_id="ctid")


class _Select:
    """A query built clause by clause; ``?`` stands for each argument."""

    def __init__(self, text: str, *args: Any) -> None:
        self.text, self.args = text, list(args)

    def add(self, text: str, *args: Any) -> _Select:
        self.text += text
        self.args.extend(args)
        return self

    def where(self, cond: str, *args: Any) -> _Select:
        """`` AND cond`` with ``args``, unless the first of them is None (no filter)."""
        return self if args[0] is None else self.add(f" AND {cond}", *args)


class Queries:
    """The stores' list and read queries in dialect ``d``."""

    def __init__(self, d: Dialect) -> None:
        self.d = d
        self.registry = "SELECT key, state FROM registry"
        self.version_vector = "SELECT origin, seq FROM version_vector"
        self.log_floor = "SELECT origin, seq FROM log_floor"
        self.usage_carry = "SELECT tenant, counter, n FROM usage_carry"  # SQLite only

    def _done(self, s: _Select) -> Query:
        return self.d.sql(s.text), s.args

    def event_ids(self, after: str, limit: int | None) -> Query:
        sql = "SELECT id FROM events WHERE id > ? ORDER BY id LIMIT ?"
        return self.d.sql(sql), [after, self.d.limit(limit)]

    def deliveries_after(self, after: str, limit: int | None) -> Query:
        sql = f"SELECT {DELIVERY_COLS} FROM deliveries WHERE id > ? ORDER BY id LIMIT ?"
        return self.d.sql(sql), [after, self.d.limit(limit)]

    def event(self, event_id: str) -> Query:
        return self.d.sql(f"SELECT {EVENT_COLS} FROM events WHERE id = ?"), [event_id]

    def delivery(self, delivery_id: str) -> Query:
        return self.d.sql(f"SELECT {DELIVERY_COLS} FROM deliveries WHERE id = ?"), [delivery_id]

    def by_ids(self, cols: str, table: str, ids: Sequence[str]) -> Query:
        """``cols`` of the rows of ``table`` whose id is in ``ids`` (in no order)."""
        cond, args = self.d.is_in("id", ids)
        return self.d.sql(f"SELECT {cols} FROM {table} WHERE {cond}"), args

    def deliveries_of_event(self, event_id: str) -> Query:
        sql = f"SELECT {DELIVERY_COLS} FROM deliveries WHERE event_id = ? ORDER BY id"
        return self.d.sql(sql), [event_id]

    def deliveries_of_events(self, event_ids: Sequence[str]) -> Query:
        cond, args = self.d.is_in("event_id", event_ids)
        return self.d.sql(f"SELECT {DELIVERY_COLS} FROM deliveries WHERE {cond} ORDER BY id"), args

    def endpoint_deliveries(
        self,
        endpoint_id: str,
        status: DeliveryStatus | None,
        since_ms: int | None,
        after_id: str | None,
        limit: int,
    ) -> Query:
        s = _Select(f"SELECT {DELIVERY_COLS} FROM deliveries WHERE endpoint_id = ?", endpoint_id)
        s.where("status = ?", status and status.value)
        s.where("created_at_ms >= ?", since_ms)
        s.where("id > ?", after_id)
        return self._done(s.add(" ORDER BY id LIMIT ?", limit))

    def tenant_events(self, q: EventQuery, before: tuple[int, str] | None, limit: int) -> Query:
        # walks events_tenant backwards; the delivery filters probe deliveries_event
        s = _Select(f"SELECT {EVENT_COLS} FROM events WHERE tenant = ?", q.tenant)
        s.where("event_type = ?", q.event_type)
        if q.type_prefix:
            # a range in the bytewise order (SQLite's binary collation, PostgreSQL's "C"):
            # "a." <= type < "a/"
            upper = q.type_prefix[:-1] + chr(ord(q.type_prefix[-1]) + 1)
            s.add(" AND event_type >= ? AND event_type < ?", q.type_prefix, upper)
        s.where("received_at_ms >= ?", q.since_ms)
        s.where("received_at_ms < ?", q.until_ms)
        if q.endpoint_id is not None or q.status is not None:
            s.add(" AND EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id")
            s.where("d.endpoint_id = ?", q.endpoint_id)
            s.where("d.status = ?", q.status and q.status.value)
            s.add(")")
        if before is not None:
            s.add(" AND (received_at_ms, id) < (?, ?)", *before)
        return self._done(s.add(" ORDER BY received_at_ms DESC, id DESC LIMIT ?", limit))

    def tenant_deliveries(
        self, q: DeliveryQuery, before: tuple[int, str] | None, limit: int
    ) -> Query:
        s = _Select(f"SELECT {DELIVERY_COLS} FROM deliveries WHERE tenant = ?", q.tenant)
        s.where("endpoint_id = ?", q.endpoint_id)
        s.where("status = ?", q.status and q.status.value)
        s.where("created_at_ms >= ?", q.since_ms)
        if before is not None:
            s.add(" AND (created_at_ms, id) < (?, ?)", *before)
        return self._done(s.add(" ORDER BY created_at_ms DESC, id DESC LIMIT ?", limit))

    def next_due_ms(self, region: str) -> Query:
        sql = (
            "SELECT min(next_attempt_at_ms) FROM deliveries WHERE region = ? AND status = 'pending'"
        )
        return self.d.sql(sql), [region]

    def pending_by_tenant(self, region: str) -> Query:
        sql = (
            "SELECT tenant, count(*) FROM deliveries WHERE region = ? AND status = 'pending' "
            "GROUP BY tenant"
        )
        return self.d.sql(sql), [region]

    def attempts_of(self, delivery_id: str) -> Query:
        sql = (
            f"SELECT {ATTEMPT_COLS} FROM attempts WHERE delivery_id = ? "
            "ORDER BY at_ms, generation, n"
        )
        return self.d.sql(sql), [delivery_id]

    def endpoint_attempts(
        self,
        endpoint_id: str,
        succeeded: bool | None,
        since_ms: int | None,
        after: tuple[int, str, int] | None,
        limit: int,
        descending: bool = False,
    ) -> Query:
        s = _Select(f"SELECT {ATTEMPT_COLS} FROM attempts WHERE endpoint_id = ?", endpoint_id)
        if succeeded is not None:
            s.add(" AND error IS NULL" if succeeded else " AND error IS NOT NULL")
        s.where("at_ms >= ?", since_ms)
        if after is not None:
            s.add(f" AND (at_ms, delivery_id, n) {'<' if descending else '>'} (?, ?, ?)", *after)
        if descending:
            return self._done(
                s.add(" ORDER BY at_ms DESC, delivery_id DESC, n DESC LIMIT ?", limit)
            )
        return self._done(s.add(" ORDER BY at_ms, delivery_id, n LIMIT ?", limit))

    def audit(
        self,
        tenant: str | None,
        since_ms: int | None,
        before: tuple[int, int, str, int] | None,
        limit: int,
    ) -> Query:
        s = _Select(f"SELECT {AUDIT_COLS} FROM audit WHERE true")
        s.where("tenant = ?", tenant)
        s.where("hlc_wall >= ?", since_ms)
        if before is not None:
            s.add(" AND (hlc_wall, hlc_logical, origin, seq) < (?, ?, ?, ?)", *before)
        s.add(" ORDER BY hlc_wall DESC, hlc_logical DESC, origin DESC, seq DESC LIMIT ?", limit)
        return self._done(s)

    def idempotency_after(self, after: tuple[str, str] | None, limit: int | None) -> Query:
        sql = (
            f"SELECT {IDEMPOTENCY_COLS} FROM idempotency"
            " WHERE (tenant, key) > (?, ?) ORDER BY tenant, key LIMIT ?"
        )
        return self.d.sql(sql), [*(after or ("", "")), self.d.limit(limit)]

    def idempotency(self, tenant: str, key: str) -> Query:
        sql = f"SELECT {IDEMPOTENCY_COLS} FROM idempotency WHERE tenant = ? AND key = ?"
        return self.d.sql(sql), [tenant, key]

    def purge(self, table: str, column: str, before: int, limit: int) -> Query:
        """Delete at most ``limit`` rows of ``table`` whose ``column`` is under ``before``
        (by ``row_id``: a DELETE takes no LIMIT)."""
        rid = self.d.row_id
        rows = f"SELECT {rid} FROM {table} WHERE {column} < ? LIMIT ?"
        cond = f"{rid} = ANY(ARRAY({rows}))" if self.d.any_array else f"{rid} IN ({rows})"
        return self.d.sql(f"DELETE FROM {table} WHERE {cond}"), [before, limit]

    def idempotency_of_events(self, event_ids: Sequence[str]) -> Query:
        """The idempotency rows of ``event_ids`` (in no order)."""
        cond, args = self.d.is_in("event_id", event_ids)
        return self.d.sql(f"SELECT {IDEMPOTENCY_COLS} FROM idempotency WHERE {cond}"), args
