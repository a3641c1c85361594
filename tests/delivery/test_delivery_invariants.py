"""The delivery worker's invariant checks (core/invariants.py), each fed the value it
guards against: a due read that returns what custody or a full lane left out, a slot
released with no lane, a tenant admitted over its cap. These tests fail without them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest
from worker_nodes import CountingSender, stop, worker_node

from regionsync.core import invariants
from regionsync.core.invariants import InvariantViolation
from regionsync.core.lanes import TenantSlots
from regionsync.core.model import Delivery, DeliveryStatus
from regionsync.runtime.delivery import DeliveryWorker


def row(did: str, endpoint: str, region: str = "a") -> Delivery:
    return Delivery(did, "ev_1", endpoint, "t1", DeliveryStatus.PENDING, 0, 0, region, 0, 0)


class RowsStore:
    """A store whose due read returns ``rows``, whatever it was asked."""

    def __init__(self, rows: list[Delivery]) -> None:
        self.rows = rows

    async def due_deliveries(self, region: str, now_ms: int, limit: int, exclude: Sequence[str],
                             exclude_endpoints: Sequence[str] = (),
                             per_endpoint: int | None = None) -> list[Delivery]:  # fmt: skip
        return list(self.rows)


def worker() -> DeliveryWorker:
    node, _net = worker_node(CountingSender())
    return node.delivery


async def test_a_due_read_returns_only_what_was_asked(violations: Counter[str]) -> None:
    w = worker()
    w.store = RowsStore([row("d1", "ep_ok")])  # type: ignore[assignment]
    assert [d.id for d in (await w._due(0, 10, {"ep_full"}))[0]] == ["d1"]
    w.store = RowsStore([row("d2", "ep_full")])  # type: ignore[assignment]
    with pytest.raises(InvariantViolation, match="due read of a returned d2"):
        await w._due(0, 10, {"ep_full"})  # a blocked (or another custodian's) endpoint
    w.store = RowsStore([row("d3", "ep_ok", region="b")])  # type: ignore[assignment]
    with pytest.raises(InvariantViolation, match=r"returned d3 \(b, ep_ok\)"):
        await w._due(0, 10, set())  # an owner custody does not give this region


def test_a_slot_is_given_back_to_its_lane(violations: Counter[str]) -> None:
    w = worker()
    d = row("d1", "ep_1")
    w.inflight[d.id] = d.endpoint_id
    w.slots.add(d.id)
    w.tenants.admit(d.tenant, 1)  # the lane is missing: dropped while in use
    with pytest.raises(InvariantViolation, match="d1 held a slot of no lane"):
        w._release(d)


class LyingSlots(TenantSlots):
    """Says a tenant has room, then refuses to admit it."""

    def full(self, tenant: str, cap: int) -> bool:
        return False

    def admit(self, tenant: str, cap: int) -> bool:
        return False


async def test_a_tenant_is_never_admitted_over_its_cap(violations: Counter[str]) -> None:
    node, net = worker_node(CountingSender())
    w = node.delivery
    await node.start()
    try:
        await node.registry_ops.create_tenant("t1", "One")
        ep = await node.registry_ops.create_endpoint("t1", {"url": "https://example.com/hook"})
    finally:
        await stop(node, net)
    w.tenants = LyingSlots()
    with pytest.raises(InvariantViolation, match="tenant 't1' over its cap"):
        w._select([row("d1", ep.id)], 1, set(), 0, 0.0)


async def test_in_production_a_foreign_row_is_left_to_its_custodian(
    violations: Counter[str],
) -> None:
    w = worker()
    w.store = RowsStore([row("d1", "ep_ok"), row("d2", "ep_full")])  # type: ignore[assignment]
    invariants.set_mode("log")
    try:
        due, _ = await w._due(0, 10, {"ep_full"})
    finally:
        invariants.set_mode("raise")
    assert [d.id for d in due] == ["d1"] and sum(violations.values()) == 1
