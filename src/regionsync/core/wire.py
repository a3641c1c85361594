"""Decides how replication messages are cut so each fits the negotiated gRPC message limit.

Never does I/O: takes records (or item sizes) and a byte budget, returns what to send.
Rule: one setting, ``replication.max_message_bytes``, is gRPC's max send/receive message
length on both ends (adapters/grpc_transport.py); batches and StateChunks are cut below it
by ``message_budget``, and ``config`` refuses an ``ingest.max_payload_bytes`` or
``replication.state_chunk_bytes`` that would let one record or chunk exceed it
(``RECORD_OVERHEAD_BYTES`` of headroom per record; proto/regionsync/v1/replication.proto).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .model import Record

__all__ = [
    "ENVELOPE_BYTES",
    "RECORD_OVERHEAD_BYTES",
    "cut_by_bytes",
    "fit_batch",
    "message_budget",
    "oversize_note",
    "record_wire_size",
    "state_item_wire_size",
]

# Upper bound of the protobuf framing of one DeltaRecord or StateItem besides its strings
# and body: field tags, length prefixes (<= 10 bytes each), seq and HLC varints.
_FIELD_OVERHEAD = 64
# Headroom of a SyncMessage/Batch/StateChunk envelope (tags, lengths, version vector).
ENVELOPE_BYTES = 64 * 1024
# What an event record carries besides its payload (ids, tenant, type, delivery rows,
# idempotency key, usage counter deltas), bounded generously; config checks
# max_payload_bytes + RECORD_OVERHEAD_BYTES + ENVELOPE_BYTES <= max_message_bytes.
RECORD_OVERHEAD_BYTES = 192 * 1024


def record_wire_size(r: Record) -> int:
    """Upper bound, in bytes, of ``r`` encoded as a DeltaRecord inside a Batch."""
    return len(r.body) + len(r.origin.encode()) + len(r.kind.encode()) + _FIELD_OVERHEAD


def state_item_wire_size(kind: str, body: bytes) -> int:
    """Upper bound, in bytes, of one StateItem inside a StateChunk."""
    return len(body) + len(kind.encode()) + _FIELD_OVERHEAD


def message_budget(max_message_bytes: int) -> int:
    """Bytes of records (or items) one message may carry under ``max_message_bytes``.

    Raises ValueError if the limit leaves no room past the envelope.
    """
    budget = max_message_bytes - ENVELOPE_BYTES
    if budget <= 0:
        raise ValueError(f"max_message_bytes {max_message_bytes} <= envelope {ENVELOPE_BYTES}")
    return budget


def cut_by_bytes(sizes: Iterable[int], max_bytes: int) -> int:
    """How many leading items (sizes in bytes) to send together: the longest prefix whose
    sizes sum to at most ``max_bytes``, but always at least 1 if there is any item (so a
    cut always makes progress; an oversize item goes alone and the caller reports it)."""
    total = 0
    n = 0
    for size in sizes:
        total += size
        if n and total > max_bytes:
            break
        n += 1
    return n


def fit_batch(records: Sequence[Record], max_message_bytes: int) -> list[Record]:
    """The leading records of ``records`` that fit one Batch under ``max_message_bytes``.

    At least one record when ``records`` is not empty. A prefix of a per-origin contiguous
    list stays contiguous per origin, so the receiver never holds records back for it.
    """
    budget = message_budget(max_message_bytes)
    n = cut_by_bytes((record_wire_size(r) for r in records), budget)
    return list(records[:n])


def oversize_note(batch: Sequence[Record], max_message_bytes: int) -> str | None:
    """A message naming the first record of ``batch`` if it alone exceeds the budget of
    ``max_message_bytes`` (config makes this impossible for records made here), else None."""
    if not batch:
        return None
    size = record_wire_size(batch[0])
    if size <= message_budget(max_message_bytes):
        return None
    r = batch[0]
    return (
        f"record {r.origin}#{r.seq} is {size} bytes on the wire, over "
        f"replication.max_message_bytes {max_message_bytes} - envelope {ENVELOPE_BYTES}"
    )
