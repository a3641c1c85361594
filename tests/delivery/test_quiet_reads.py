"""A read ahead that found nothing is not repeated while it holds (runtime/ready.py,
issue 44): the deliveries of live publishes come by hand-over, so the worker needs no
store read and no next-due query per delivery. Before, each round with nothing ready
read the store again (a due read, and an idle read of the earliest schedules) and each
wait asked for the next due time: about 1.5 due reads and 1.5 next-due queries per
delivery in bench/cpu.py's live phase (15,112 and 15,735 for 10,000 deliveries), now a
handful in all. What a read could not see still ends the quiet: a retry scheduled by
an attempt, rows dropped from memory, deliveries added without a hand-over, time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from worker_nodes import CountingSender, FlakySender, stop, until, worker_node

from regionsync.adapters.memory_store import MemoryStore
from regionsync.runtime.node import Node
from regionsync.runtime.ready import Reads

IDLE_POLL_S = 60.0  # the longest idle wait: far past every deadline below


class QueryCountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.due_reads = self.next_due_reads = 0

    async def due_deliveries(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.due_reads += 1
        return await super().due_deliveries(*args, **kwargs)

    async def next_due_ms(self, region: str) -> int | None:
        self.next_due_reads += 1
        return await super().next_due_ms(region)


@asynccontextmanager
async def delivered_once(
    sender: CountingSender, store: MemoryStore | None = None
) -> AsyncIterator[Node]:
    """A started node (idle poll ``IDLE_POLL_S``) with one endpoint, once its first
    delivery was sent: the worker has gone quiet since."""
    node, net = worker_node(sender, store, poll_interval_s=IDLE_POLL_S)
    await node.start()
    try:
        await node.registry_ops.create_tenant("acme", "A")
        await node.registry_ops.create_endpoint("acme", {"url": "https://ep.example/"})
        await node.ingest.publish("acme", "push", b"{}", None)
        await until(lambda: _sent(sender, 1), "the first delivery")
        yield node
    finally:
        await stop(node, net)


async def test_handed_over_deliveries_need_no_store_read() -> None:
    store, sender = QueryCountingStore(), CountingSender()
    async with delivered_once(sender, store) as node:
        store.due_reads = store.next_due_reads = 0
        for n in range(2, 102):  # one at a time: each delivery is a claim round of its own
            await node.ingest.publish("acme", "push", b"{}", None)
            await until(lambda n=n: _sent(sender, n), f"delivery {n}")
        # was 600 and 200: per delivery three claim rounds each read the store (a due
        # read finding nothing, the idle read of the earliest schedules behind it), and
        # two waits each asked for the next due time
        assert store.due_reads <= 4 and store.next_due_reads <= 4, (
            store.due_reads, store.next_due_reads)  # fmt: skip


async def test_a_retry_scheduled_while_quiet_is_attempted_when_due() -> None:
    """The failed attempt's row was in flight when the quiet read ran: the attempt's
    retry time ends the quiet (else the worker waits for its 60 s idle poll)."""
    sender = FlakySender()
    node, net = worker_node(sender, poll_interval_s=IDLE_POLL_S, retry_schedule_s=[0.2])
    await node.start()
    try:
        await node.registry_ops.create_tenant("acme", "A")
        await node.registry_ops.create_endpoint("acme", {"url": "https://ep.example/"})
        await node.ingest.publish("acme", "push", b"{}", None)
        await until(lambda: _true(sender.sent >= 1), "the first attempt")
        sender.up = True
        await until(lambda: _true(sender.sent >= 2), "the retry", tries=1000)  # 10 s
    finally:
        await stop(node, net)


async def test_deliveries_added_without_hand_over_end_the_quiet() -> None:
    """Publishes while the hand-over is off (as when it is full) reach the worker by a
    store read only: ``DeliveryQueue.add`` ends the quiet."""
    sender = CountingSender()
    async with delivered_once(sender) as node:
        node.queue.handoff = False
        for n in range(2, 5):
            await node.ingest.publish("acme", "push", b"{}", None)
            await until(lambda n=n: _sent(sender, n), f"delivery {n}")


async def _true(v: bool) -> bool:
    return v


async def _sent(sender: CountingSender, n: int) -> bool:
    return sum(sender.sent.values()) >= n


A = {"ep_a"}


def _quiet(reads: Reads, blocked: set[str] = A, later_ms: int | None = 5_000) -> Reads:
    seen = reads.start(added=0)
    reads.found_nothing(at_s=10.0, later_ms=later_ms, blocked=blocked, seen=seen)
    return reads


@pytest.mark.parametrize(
    ("change", "holds"),
    [
        (lambda r: None, True),
        (lambda r: r.drop(0), True),  # nothing let go
        (lambda r: r.drop(3), False),  # rows held unstarted were let go
        (lambda r: r.retried(4_000), False),  # due at 4,000: past now (4,500)
        (lambda r: r.retried(6_000), True),  # later than what the read found
    ],
)
def test_what_ends_the_quiet(change, holds: bool) -> None:  # type: ignore[no-untyped-def]
    reads = _quiet(Reads())
    change(reads)
    assert reads.holds(0, 10.5, 4_500, max_age_s=1.0, blocked=A) is holds


@pytest.mark.parametrize(
    ("added", "now_s", "now_ms", "blocked", "holds"),
    [
        (0, 10.5, 4_500, A, True),
        (0, 10.5, 4_500, A | {"ep_b"}, True),  # skips more: finds nothing either
        (0, 10.5, 4_500, set(), False),  # ep_a's lane freed: its rows may be due
        (0, 10.5, 4_500, None, True),  # the wait asks for the next due time alone
        (1, 10.5, 4_500, A, False),  # deliveries added without a hand-over
        (0, 11.0, 4_500, A, False),  # the idle poll's age passed
        (0, 10.5, 5_000, A, False),  # the earliest row skipped as not due is due
    ],
)
def test_when_the_quiet_holds(
    added: int, now_s: float, now_ms: int, blocked: set[str] | None, holds: bool
) -> None:
    reads = _quiet(Reads())
    assert reads.holds(added, now_s, now_ms, max_age_s=1.0, blocked=blocked) is holds
    if holds:
        assert reads.quiet is not None and reads.quiet.until_ms == 5_000


def test_a_retry_during_the_read_bounds_its_quiet() -> None:
    reads = Reads()
    seen = reads.start(added=0)
    reads.retried(3_000)  # that row was held: the read does not return it
    reads.found_nothing(at_s=10.0, later_ms=None, blocked=set(), seen=seen)
    assert reads.quiet is not None and reads.quiet.until_ms == 3_000
    assert not reads.holds(0, 10.1, 3_000, max_age_s=1.0, blocked=set())
    # a read that started after the retry was recorded saw its row: not carried over
    _quiet(reads, later_ms=None)
    assert reads.quiet is not None and reads.quiet.until_ms is None


def test_a_drop_during_the_read_leaves_no_quiet() -> None:
    reads = Reads()
    seen = reads.start(added=0)
    reads.drop(2)  # rows held when the read started (so not read) were let go
    reads.found_nothing(at_s=10.0, later_ms=None, blocked=set(), seen=seen)
    assert not reads.holds(0, 10.1, 0, max_age_s=1.0, blocked=set())


async def test_a_round_with_a_rate_limited_lane_passes_over_ready_once() -> None:
    """Rows held in memory for a lane its rate limit blocks: each claim round passes over
    them once (a second pass would find the same lanes blocked; the read ahead runs on
    its own and wakes the loop with its rows), and a success there wakes no round (its
    freed slot starts nothing before the lane's next token, which the round that spent
    the last one sleeps until). Was four passes per round, and three rounds per delivery
    (the answer and the attempt's end each woke one): bench/cpu.py's replay."""
    sender = CountingSender()
    async with delivered_once(sender) as node:
        eid = node.catalog.registry.endpoint_ids("acme")[0]
        await node.registry_ops.patch_endpoint("acme", eid, {"rate_limit_per_s": 50})
        worker = node.delivery
        rounds = passes = 0
        launch_due, select = worker._launch_due, worker._select

        async def counted_round():  # type: ignore[no-untyped-def]
            nonlocal rounds
            rounds += 1
            return await launch_due()

        def counted_pass(*args):  # type: ignore[no-untyped-def]
            nonlocal passes
            passes += 1
            return select(*args)

        worker._launch_due, worker._select = counted_round, counted_pass  # type: ignore[method-assign]
        for _ in range(100):  # 50 go at once (the burst), then one per 20 ms
            await node.ingest.publish("acme", "push", b"{}", None)
        await until(lambda: _sent(sender, 51), "the burst", tries=3000)
        rounds_then, sent_then = rounds, sum(sender.sent.values())
        await until(lambda: _sent(sender, 101), "100 deliveries at 50/s", tries=3000)
        assert passes <= rounds, (passes, rounds)  # was 683 passes in 275 rounds
        paced = 101 - sent_then  # sent one per token, after the burst
        assert rounds - rounds_then <= 1.5 * paced + 2, (rounds - rounds_then, paced)  # was 3x


@pytest.mark.parametrize(
    "limit",
    [{"endpoint": {"max_in_flight": 1}}, {"tenant": {"delivery_max_in_flight": 1}},
     {"delivery": {"concurrency": 1}}],
    ids=["endpoint-cap", "tenant-cap", "node-concurrency"],
)  # fmt: skip
async def test_a_success_under_a_slot_limit_starts_the_next_at_once(limit) -> None:  # type: ignore[no-untyped-def]
    """A success frees its slot: where a slot is what held the next delivery back (the
    endpoint's or the tenant's cap, the node's concurrency), the claim loop is woken
    (``DeliveryWorker.slot_bound``), not left to its 60 s idle poll."""
    sender = CountingSender(held=True)
    node, net = worker_node(sender, poll_interval_s=IDLE_POLL_S, **limit.get("delivery", {}))
    await node.start()
    try:
        await node.registry_ops.create_tenant("acme", "A")
        body = {"url": "https://ep.example/", **limit.get("endpoint", {})}
        await node.registry_ops.create_endpoint("acme", body)
        if "tenant" in limit:
            await node.registry_ops.patch_tenant("acme", limit["tenant"])
        for _ in range(3):
            await node.ingest.publish("acme", "push", b"{}", None)
        await until(lambda: _sent(sender, 1), "the first attempt", tries=3000)
        await asyncio.sleep(0.1)
        assert sum(sender.sent.values()) == 1  # the limit holds the others back
        sender.gate.set()
        await until(lambda: _sent(sender, 3), "the others, each once a slot is free", tries=3000)
    finally:
        await stop(node, net)
