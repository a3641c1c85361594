"""Issue 12 item 2: replication messages are cut by bytes below the one message limit."""

from __future__ import annotations

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from regionsync.config import load_settings
from regionsync.core.model import Record
from regionsync.core.wire import (
    ENVELOPE_BYTES,
    RECORD_OVERHEAD_BYTES,
    cut_by_bytes,
    fit_batch,
    message_budget,
    oversize_note,
    record_wire_size,
)
from regionsync.v1 import replication_pb2 as pb

KIB = 1024
MIB = 1024 * KIB


def _rec(origin: str, seq: int, size: int) -> Record:
    return Record(origin, seq, "event", b"x" * size, (1_700_000_000_000, 2**32 - 1))


def test_record_wire_size_bounds_the_protobuf_encoding() -> None:
    for size in (0, 1, 127, 128, 16_383, 16_384, 256 * KIB):
        r = _rec("us-east-1:1234567", 2**63 - 1, size)
        encoded = pb.DeltaRecord(
            origin=r.origin,
            origin_seq=r.seq,
            kind=r.kind,
            body=r.body,
            hlc_wall_ms=r.hlc[0],
            hlc_logical=r.hlc[1],
        ).ByteSize()
        assert encoded <= record_wire_size(r)


@pytest.mark.parametrize(
    ("sizes", "limit", "n"),
    [
        ([], 10, 0),
        ([5], 10, 1),
        ([50], 10, 1),  # an oversize item still goes, alone: progress
        ([5, 5], 10, 2),
        ([5, 5, 1], 10, 2),
        ([5, 6], 10, 1),
        ([50, 1], 10, 1),
    ],
)
def test_cut_by_bytes(sizes: list[int], limit: int, n: int) -> None:
    assert cut_by_bytes(sizes, limit) == n


@given(st.lists(st.integers(0, 100), max_size=30), st.integers(1, 300))
def test_cut_is_the_longest_fitting_prefix_and_never_empty(sizes: list[int], limit: int) -> None:
    n = cut_by_bytes(sizes, limit)
    assert (n >= 1) == bool(sizes)
    assert n == 1 or sum(sizes[:n]) <= limit
    if n < len(sizes):
        assert sum(sizes[: n + 1]) > limit


def test_the_issue_input_is_cut_under_64_mib() -> None:
    """270 records of 256 KiB: 256 of them were about 67 MB, over gRPC's 64 MiB."""
    records = [_rec("a:1", i + 1, 256 * KIB) for i in range(270)][:256]
    batch = fit_batch(records, 64 * MIB)
    assert 1 <= len(batch) < 256
    message = pb.SyncMessage(
        batch=pb.Batch(records=[pb.DeltaRecord(origin=r.origin, body=r.body) for r in batch])
    )
    assert message.ByteSize() <= 64 * MIB - ENVELOPE_BYTES
    assert batch == records[: len(batch)]


def test_fit_batch_keeps_per_origin_prefixes() -> None:
    records = [_rec(o, s, 100 * KIB) for s in (1, 2, 3) for o in ("a:1", "b:1")]
    batch = fit_batch(records, ENVELOPE_BYTES + 350 * KIB)
    assert [(r.origin, r.seq) for r in batch] == [("a:1", 1), ("b:1", 1), ("a:1", 2)]


def test_oversize_note_names_the_record() -> None:
    big = _rec("a:1", 7, MIB)
    assert oversize_note([], MIB) is None
    assert oversize_note([_rec("a:1", 1, 10)], MIB) is None
    note = oversize_note([big], MIB)
    assert note is not None and "a:1#7" in note


def test_default_settings_leave_room_for_the_largest_record() -> None:
    s = load_settings(None)
    need = s.ingest.max_payload_bytes + RECORD_OVERHEAD_BYTES
    assert need <= message_budget(s.replication.max_message_bytes)
    assert s.replication.state_chunk_bytes <= message_budget(s.replication.max_message_bytes)


@pytest.mark.parametrize(
    "overrides",
    [
        {"ingest": {"max_payload_bytes": 64 * MIB}},
        {"replication": {"max_message_bytes": 300 * KIB}},  # default payload 256 KiB
        {"replication": {"max_message_bytes": MIB, "state_chunk_bytes": MIB}},
        {"replication": {"max_message_bytes": 100 * KIB}},
    ],
)
def test_config_refuses_limits_that_break_the_message_bound(overrides: dict) -> None:
    with pytest.raises(pydantic.ValidationError):
        load_settings(None, **overrides)


def test_config_accepts_a_small_consistent_limit() -> None:
    s = load_settings(
        None,
        ingest={"max_payload_bytes": 64 * KIB},
        replication={"max_message_bytes": 512 * KIB, "state_chunk_bytes": 128 * KIB},
    )
    assert s.replication.max_message_bytes == 512 * KIB
