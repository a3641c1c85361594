"""Invariant checks of the replication path (core/invariants.py), each fed the value it
guards against: a log read the dialer would send, a commit past memory's version vector.
These tests fail without the checks."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping

import pytest
from memnodes import make_node

from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.core import invariants
from regionsync.core import peer_session as ps
from regionsync.core.invariants import InvariantViolation
from regionsync.core.model import Record, WriteBatch
from regionsync.runtime.replication import _Dialer


def rec(origin: str, seq: int) -> Record:
    return Record(origin, seq, "registry", b"\x80", (1000 + seq, 0))


class LogStore:
    """A log that answers every read with ``records``."""

    def __init__(self, records: list[Record]) -> None:
        self.records = records

    async def records_after(self, after: Mapping[str, int], limit: int) -> list[Record]:
        return self.records


async def test_the_dialer_sends_only_what_the_peer_lacks(
    net: MemoryNetwork, violations: Counter[str]
) -> None:
    node = make_node(net, "a", ["b"])
    dialer = _Dialer(node.links, node.peers["b"], None)  # type: ignore[arg-type]
    dialer.wake = asyncio.Event()
    read = ps.ReadRecords({"a:1": 2, "b:7": 1 << 62}, 4)
    node.links.store = LogStore([rec("a:1", 3), rec("c:1", 1)])  # type: ignore[assignment]
    got = await dialer._do(read)
    assert isinstance(got, ps.Records) and len(got.records) == 2
    node.links.store = LogStore([rec("a:1", 3), rec("a:1", 2)])  # type: ignore[assignment]
    with pytest.raises(InvariantViolation, match="read a:1#2 after a:1#3"):
        await dialer._do(read)


def test_a_commit_never_passes_memorys_version_vector(
    net: MemoryNetwork, violations: Counter[str]
) -> None:
    writer = make_node(net, "a", []).writer
    writer.version_vector = {"b:1": 5}
    writer._on_commit(WriteBatch(version_vector={"b:1": 5}))
    assert writer.durable_vv == {"b:1": 5}
    with pytest.raises(InvariantViolation, match="committed b:1#6 past memory"):
        writer._on_commit(WriteBatch(version_vector={"b:1": 6}))  # seq 6 would be reused


def test_in_production_a_commit_past_memory_moves_memory_on(
    net: MemoryNetwork, violations: Counter[str]
) -> None:
    writer = make_node(net, "a", []).writer
    writer.version_vector = {"b:1": 5}
    invariants.set_mode("log")
    try:
        writer._on_commit(WriteBatch(version_vector={"b:1": 6}))
    finally:
        invariants.set_mode("raise")
    assert writer.version_vector == writer.durable_vv == {"b:1": 6}  # 6 is never reused
    assert sum(violations.values()) == 1
