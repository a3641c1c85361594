"""Issue 12 item 1: a legal remote stamp at the edge of the wire's range never leaves this
node unable to encode its own records (which would stop replication to every peer)."""

from __future__ import annotations

import pytest
from memnodes import eventually, make_node

from crdt import LOGICAL_MAX
from regionsync.core.model import Record


async def _start(started, *nodes):
    for n in nodes:
        await n.start()
        started.append(n)
    return nodes


@pytest.mark.parametrize("ahead_ms", [1000, 0])
@pytest.mark.parametrize("logical", [2**32 - 1, 2**32 - 2])
async def test_stamp_at_the_logical_edge_never_blocks_the_log(
    net, started, ahead_ms: int, logical: int
) -> None:
    # a pushes to b; c (unpeered) made the record a peer hands to a
    a, b, c = await _start(
        started,
        make_node(net, "a", ["b"]),
        make_node(net, "b", ["a"]),
        make_node(net, "c", []),
    )
    await c.registry_ops.create_tenant("from-c", "C")
    (rec,) = await c.store.records_after({}, 1)
    edge = Record(rec.origin, rec.seq, rec.kind, rec.body, (a.clock.wall_ms() + ahead_ms, logical))
    rejected = await a.replica.apply_records([edge])
    # at LOGICAL_MAX a's next stamp carries into the next millisecond: merged, never
    # refused (issue 41: one stamp never stops replication)
    assert rejected == [] and a.catalog.registry.tenant("from-c") is not None
    assert a.writer.hlc.last.logical <= LOGICAL_MAX
    # local writes still replicate to the peer, and every record in a's log is encodable
    for i in range(3):
        await a.registry_ops.create_tenant(f"t{i}", "T")
    await eventually(lambda: all(b.catalog.registry.tenant(f"t{i}") is not None for i in range(3)))
    for r in await a.store.records_after({}, 100):
        assert 0 <= r.hlc[1] <= LOGICAL_MAX
    await eventually(lambda: b.catalog.registry.tenant("from-c") is not None)
