"""A retry scheduled while this region's clock ran ahead is not waited out once the clock
is right again (issue 41: a region 10 minutes ahead, restarted with a correct clock, kept
its deliveries' ``next_attempt_at`` 10 minutes out and sent nothing for 10 minutes)."""

from __future__ import annotations

import pytest
from worker_nodes import FlakySender, StaticResolver, stop, until, worker_node

from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.adapters.postgres_coordinator import PostgresCoordinator
from regionsync.adapters.postgres_store import PostgresStore
from regionsync.adapters.system import SystemClock, UlidSource, system_rng
from regionsync.adapters.wiring import build_store
from regionsync.config import load_settings
from regionsync.core.model import Delivery, DeliveryStatus
from regionsync.runtime.due import SKEW_READ_S
from regionsync.runtime.node import Node
from regionsync.runtime.state import PeerStatus


class ShiftedClock(SystemClock):
    """The system clock plus ``offset_ms`` (the test moves it, as libfaketime would)."""

    offset_ms = 0

    def wall_ms(self) -> int:
        return super().wall_ms() + self.offset_ms


def claiming_node(sender: FlakySender, clock: ShiftedClock, pg_url: str) -> Node:
    """A process of a PostgreSQL region: due deliveries claimed through its coordinator."""
    delivery = {"poll_interval_s": 0.05, "retry_schedule_s": [30, 30, 30]}
    settings = load_settings(None, region="a", store=pg_url, delivery=delivery)
    store = build_store(settings)
    assert isinstance(store, PostgresStore)
    rng = system_rng()
    coordinator = PostgresCoordinator(store, "a", "p1")
    return Node(settings, store=store, clock=clock, rng=rng, ids=UlidSource(clock, rng),
                transport=MemoryNetwork().transport("a"), sender=sender,
                resolver=StaticResolver(), coordinator=coordinator)  # fmt: skip


@pytest.mark.parametrize("claims", [False, True], ids=["one-process", "claims"])
async def test_a_schedule_written_ahead_is_due_once_the_clock_is_right(
    claims: bool, request: pytest.FixtureRequest
) -> None:
    sender, clock = FlakySender(), ShiftedClock()
    clock.offset_ms = 600_000  # ten minutes ahead
    if claims:  # several processes per region claim due rows (issue 41 left it waiting)
        node, net = claiming_node(sender, clock, request.getfixturevalue("pg_url")), None
    else:
        node, net = worker_node(sender, clock=clock, retry_schedule_s=[30, 30, 30])
    await node.start()
    try:
        await node.registry_ops.create_tenant("t1", "One")
        await node.registry_ops.create_endpoint(
            "t1", {"url": "https://example.com/hook", "event_types": ["a"]}
        )
        event, _ = await node.ingest.publish("t1", "a", b'{"n":1}', None)
        [d] = await node.store.deliveries_of_event(event.id)

        async def tried() -> bool:
            row = await node.store.get_delivery(d.id)
            return row is not None and row.attempts >= 1

        await until(tried, "the first attempt")
        row = await node.store.get_delivery(d.id)
        assert row is not None and row.status is DeliveryStatus.PENDING
        clock.offset_ms = 0  # the clock is right again; the row says 10 min + 30 s out
        assert row.next_attempt_at_ms is not None
        assert row.next_attempt_at_ms - clock.wall_ms() > 600_000
        sender.up = True

        async def delivered() -> bool:
            now = await node.store.get_delivery(d.id)
            return now is not None and now.status is DeliveryStatus.DELIVERED

        await until(delivered, "the delivery written ahead")  # 3 s, not 10 minutes
        assert sender.sent == 2
    finally:
        if net is None:
            await node.stop()
        else:
            await stop(node, net)


def test_a_contact_time_gossiped_from_ahead_counts_as_now() -> None:
    """A peer whose clock ran ahead gossiped that it heard ``b`` 10 minutes from now;
    kept, ``b`` could not be suspected for 10 minutes after it went silent."""
    clock = ShiftedClock()
    node, _ = worker_node(FlakySender(), clock=clock)
    node.custody.peers["b"] = PeerStatus("b", "127.0.0.1:1")
    now = clock.wall_ms()
    node.custody.merge_gossip({"b": now + 600_000})
    assert now <= node.custody.heard["b"] <= clock.wall_ms()
    node.custody.merge_gossip({"b": now - 5})  # an older contact changes nothing
    assert node.custody.heard["b"] >= now


class _Claims:
    """Claims of a process whose peer holds every row due by its schedule: claim_due
    finds nothing; claim_ids records what it was asked for."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    async def claim_due(self, region, now_ms, limit, lease_ms, exclude_endpoints=()):
        return []

    async def claim_ids(self, region, delivery_ids, now_ms, lease_ms):
        self.asked.append(list(delivery_ids))
        return []


class _Pending:
    """A store's due read over ``rows`` (pending, in schedule order)."""

    def __init__(self, rows: list[Delivery]) -> None:
        self.rows, self.reads = rows, 0

    async def due_deliveries(self, region, cutoff_ms, limit, exclude, exclude_endpoints=(),
                             per_endpoint=None):  # fmt: skip
        self.reads += 1
        return [d for d in self.rows if d.next_attempt_at_ms <= cutoff_ms][:limit]


def _pending(i: int, at_ms: int, updated_ms: int) -> Delivery:
    return Delivery(f"dlv_{i}", f"evt_{i}", "ep_1", "t1", DeliveryStatus.PENDING, 1, at_ms,
                    "a", 0, updated_ms)  # fmt: skip


@pytest.mark.parametrize("ahead", [False, True], ids=["held-only", "held-and-ahead"])
async def test_a_row_another_process_holds_is_not_claimed_by_id(ahead: bool) -> None:
    """An empty claim round of a PostgreSQL process reads the earliest pending rows for
    schedules written ahead (``_skewed``). A row due by its schedule that claim_due passed
    over is another process's claim: asking claim_ids for it failed in every such round
    (0.8 statements per event at 4 processes, bench/README.md). Only rows written ahead
    are asked for; and that read is made at most every ``SKEW_READ_S`` (it cost a
    statement and up to ``limit`` rows in every empty round)."""
    clock, mono = ShiftedClock(), [100.0]
    clock.monotonic = lambda: mono[0]  # type: ignore[method-assign]
    node, _ = worker_node(FlakySender(), clock=clock, retry_schedule_s=[30, 30, 30])
    worker = node.delivery
    now = clock.wall_ms()
    rows = [_pending(1, now - 50, now - 40_000)]  # in flight at the other process
    if ahead:  # scheduled 30 s out by a clock 10 minutes ahead
        rows.append(_pending(2, now + 630_000, now + 600_000))
    claims, store = _Claims(), _Pending(rows)
    worker.claims, worker.store = claims, store
    got, _ = await worker._due(now, 10, set())
    assert got == []
    assert claims.asked == ([["dlv_2"]] if ahead else [])
    assert store.reads == 1
    mono[0] += SKEW_READ_S / 2
    await worker._due(now, 10, set())  # the next empty round, within the second
    assert store.reads == 1
    mono[0] += SKEW_READ_S / 2
    await worker._due(now, 10, set())
    assert store.reads == 2
    assert claims.asked == ([["dlv_2"]] * 2 if ahead else [])
