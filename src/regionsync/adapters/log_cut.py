"""Event records kept without their event's payload (issue 17), for the SQLite and
PostgreSQL stores.

An ``event`` log record's body (core.records) embeds its event's payload, which the events
row committed with it holds too. A store keeps such a body with the payload cut out, plus
the events row's id and the byte offset it was cut from, and puts it back when the record
is read (``splice``), so what replicates is byte for byte what was committed. A body is
cut only for an events row that the same commit inserts (a row stored before may hold
other bytes: an inbound redelivery elsewhere with another body), never when it may hold a
secret (it is sealed at rest whole, ``core.registry.may_hold_secret``), and not for
payloads under ``CUT_MIN_BYTES``. Events rows are never updated or deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.model import Record
from ..core.registry import may_hold_secret

__all__ = ["CUT_MIN_BYTES", "find_cuts", "splice"]

# payloads shorter than this stay in their record: too little to save (bench/README.md,
# ingest.py's "Event records without their payload")
CUT_MIN_BYTES = 256


def find_cuts(records: Sequence[Record], payloads: Sequence[bytes]) -> list[tuple[int, int] | None]:
    """Where each of ``records`` may be cut: ``(i, offset)`` if its body holds
    ``payloads[i]`` at byte ``offset``, None to keep it whole (not an ``event`` record,
    one that may hold a secret, or no payload found).

    ``payloads`` are those of the commit's events a body may be cut for (inserted by it,
    ``CUT_MIN_BYTES`` or longer), in batch order: records and events of a batch come in
    the same order, so the search for a record's payload starts after the last one found.
    A payload found is compared whole, so a cut body always splices back to its bytes.
    """
    out: list[tuple[int, int] | None] = []
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
                if cut >= 0 and body[cut : cut + len(payload)] == payload:
                    at, found = i + 1, (i, cut)
                    break
        out.append(found)
    return out


def splice(body: bytes, payload: bytes, offset: int) -> bytes:
    """A cut body with its event's ``payload`` put back at byte ``offset``."""
    return body[:offset] + payload + body[offset:]
