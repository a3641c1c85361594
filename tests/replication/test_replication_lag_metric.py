"""Issue 18 item 3: applying a peer's records observes the replication lag histogram,
labelled with the origin region."""

from __future__ import annotations

from memnodes import eventually, make_node


def _lag_count(node, origin: str) -> float:
    for family in node.telemetry.replication_lag.collect():
        for s in family.samples:
            if s.name.endswith("_count") and s.labels.get("origin") == origin:
                return s.value
    return 0.0


async def test_applied_records_observe_lag_by_origin(net, started) -> None:
    a, b = make_node(net, "a", ["b"]), make_node(net, "b", ["a"])
    for n in (a, b):
        await n.start()
        started.append(n)
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: b.catalog.registry.tenant("acme") is not None)
    assert _lag_count(b, "a") >= 1
    assert _lag_count(a, "a") == 0  # own records are not applied from peers
