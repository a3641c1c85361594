"""Event records kept without their event's payload (issue 17), for the SQLite and
PostgreSQL stores.

An ``event`` log record's body (core.records) embeds its event's payload, which the events
row committed with it holds too. A store keeps such a body with the payload cut out
(``find_cuts``), plus the events row's id and the byte offset it was cut from, and puts it
back when the record is read (``records_sql``, ``body_of``), so what replicates is byte
for byte what was committed. A body is cut only for an events row that the same commit
inserts (a row stored before may hold other bytes: an inbound redelivery elsewhere with
another body), never when it may hold a secret (it is sealed at rest whole,
``core.registry.may_hold_secret``), and not for payloads under ``CUT_MIN_BYTES``. Events
rows are never updated, and deleted (retention, ``retention_sql``) only well before the
oldest log record.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.model import Record
from ..core.registry import may_hold_secret
from .secretbox import AtRest

__all__ = ["CUT_MIN_BYTES", "PAYLOAD_JOIN", "RECORD_COLS", "body_of", "find_cuts", "records_sql"]

# payloads shorter than this stay in their record: too little to save (bench/README.md,
# ingest.py's "Event records without their payload")
CUT_MIN_BYTES = 256


def find_cuts(
    records: Sequence[Record], payloads: Sequence[bytes]
) -> list[tuple[int, int, bytes] | None]:
    """How each of ``records`` is stored: ``(i, offset, rest)`` if its body holds
    ``payloads[i]`` at byte ``offset`` (``rest``: the body without it, never sealed: it
    holds no secret), None to keep it whole (not an ``event`` record, one that may hold a
    secret, or no payload found).

    ``payloads`` are those of the commit's events a body may be cut for (inserted by it,
    ``CUT_MIN_BYTES`` or longer), in batch order: records and events of a batch come in
    the same order, so the search for a record's payload starts after the last one found.
    A payload found is compared whole, so a cut body always goes back to its bytes.
    """
    out: list[tuple[int, int, bytes] | None] = []
    at = 0  # where the search for the next record's payload starts
    for r in records:
        found = None
        if r.kind == "event" and not may_hold_secret(r.body):
            body = r.body
            for i in range(at, len(payloads)):
                payload = payloads[i]
                # found by its first bytes, then compared whole: a search for all of it
                # costs 3 us of preprocessing per call (CPython's two-way search)
                cut = body.find(payload[:64])
                end = cut + len(payload)
                if cut >= 0 and body[cut:end] == payload:
                    at, found = i + 1, (i, cut, body[:cut] + body[end:])
                    break
        out.append(found)
    return out


# what ``body_of`` reads of a log row ``l`` joined with ``PAYLOAD_JOIN``
RECORD_COLS = "l.origin, l.seq, l.kind, l.body, l.hlc_wall, l.hlc_logical, l.event_at, e.payload"
PAYLOAD_JOIN = "LEFT JOIN events e ON l.event_at IS NOT NULL AND e.id = l.event_id"


def records_sql(p: str) -> str:
    """A store's read of one origin's log records after a seq, ``LIMIT``ed, with what
    ``body_of`` needs: columns origin, seq, kind, body, hlc_wall, hlc_logical, event_at and
    the payload of the events row a body was cut for. ``p``: the driver's placeholder."""
    return (
        f"SELECT {RECORD_COLS} FROM log l {PAYLOAD_JOIN} "
        f"WHERE l.origin = {p} AND l.seq > {p} ORDER BY l.seq LIMIT {p}"
    )


def body_of(row: Sequence, at_rest: AtRest, missing: type[Exception]) -> bytes:
    """The record body of a ``records_sql`` row: opened if sealed, or its event's payload
    put back where it was cut. Raises ``missing`` (the store's database error) if the
    events row it was cut for is gone (events rows are never deleted: a damaged store)."""
    origin, seq, _, body, _, _, cut, payload = row
    body = bytes(body)
    if cut is None:
        return at_rest.open_body(origin, seq, body)
    if payload is None:
        raise missing(f"log record {origin}:{seq} lost its event's row")
    return body[:cut] + bytes(payload) + body[cut:]
