"""Claims are fair across endpoints (issue 17, fan-in): endpoint A has a backlog of 300
due deliveries (older than anything else) that fills every worker; endpoint B then gets
one delivery. B's delivery goes out in the first claim after a worker frees up, not after
A's backlog. Before the round-robin claim (global ``(next_attempt_at_ms, id)`` order) B's
delivery was sent after all of A's: B's was the last of the 301 sends.

The store-level half (``due_deliveries(per_endpoint=...)``) is in the store contract
suite (tests/store/test_store_contract.py)."""

from __future__ import annotations

import asyncio

from worker_nodes import stop, worker_node

from regionsync.core.lanes import fair_order
from regionsync.core.model import Delivery, DeliveryStatus
from regionsync.core.retry import AttemptOutcome, OutcomeKind
from regionsync.runtime.ports import OutboundRequest

BACKLOG = 300
WORKERS = 4


class GatedSender:
    """Holds every attempt until ``gate`` opens; records the host of each send in the
    order the attempts started."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.order: list[str] = []
        self.waiting = 0

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        self.order.append(request.url.split("/")[2])
        if not self.gate.is_set():
            self.waiting += 1
            await self.gate.wait()
        return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)


async def _wait(cond, what: str) -> None:
    for _ in range(500):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_fresh_endpoint_is_claimed_before_a_backlog() -> None:
    sender = GatedSender()
    node, net = worker_node(sender, concurrency=WORKERS, tenant_max_in_flight=100)
    await node.start()
    try:
        ops = node.registry_ops
        await ops.create_tenant("acme", "A")
        # A's lane never blocks (1,000 in flight, 10,000/s): only fairness lets B in
        burst = {"url": "https://burst.example/", "event_types": ["push"],
                 "max_in_flight": 1000, "rate_limit_per_s": 10000}  # fmt: skip
        await ops.create_endpoint("acme", burst)
        await ops.create_endpoint("acme", {"url": "https://quiet.example/",
                                           "event_types": ["ping"]})  # fmt: skip
        for _ in range(BACKLOG):
            await node.ingest.publish("acme", "push", b"{}", None)
        await _wait(lambda: sender.waiting == WORKERS, "A's attempts to fill every worker")
        await node.ingest.publish("acme", "ping", b"{}", None)
        await asyncio.sleep(0.05)  # B is due; every worker is held by A
        assert "quiet.example" not in sender.order
        sender.gate.set()
        await _wait(lambda: len(sender.order) == BACKLOG + 1, "every delivery sent")
        # the first claim after A's four attempts finish starts B's delivery first
        assert sender.order.index("quiet.example") <= 2 * WORKERS
        for _ in range(500):  # and every outcome recorded
            if (await node.store.counts("a"))["deliveries_delivered"] == BACKLOG + 1:
                break
            await asyncio.sleep(0.01)
        assert (await node.store.counts("a"))["deliveries_delivered"] == BACKLOG + 1
    finally:
        sender.gate.set()
        await stop(node, net)


def _d(i: int, endpoint: str, at: int) -> Delivery:
    return Delivery(f"dlv_{i:03}", f"evt_{i}", endpoint, "acme", DeliveryStatus.PENDING, 0, at,
                    "a", at, at)  # fmt: skip


def test_fair_order_round_robin_counts_attempts_in_flight() -> None:
    due = [_d(1, "ep_a", 1), _d(2, "ep_a", 2), _d(3, "ep_a", 3), _d(4, "ep_b", 50),
           _d(5, "ep_c", 40), _d(6, "ep_b", 60)]  # fmt: skip
    got = [d.id for d in fair_order(due, {})]
    # turn 0 of each endpoint by due time, then turn 1, ...; each endpoint keeps its order
    assert got == ["dlv_001", "dlv_005", "dlv_004", "dlv_002", "dlv_006", "dlv_003"]
    # ep_a has two attempts in flight: its first row waits for the others' second
    got = [d.id for d in fair_order(due, {"ep_a": 2})]
    assert got == ["dlv_005", "dlv_004", "dlv_006", "dlv_001", "dlv_002", "dlv_003"]
    assert fair_order([], {"ep_a": 1}) == []
