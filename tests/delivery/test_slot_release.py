"""A successful attempt gives its lane slot back once its response is read, before its
outcome is durable (issue 17); a failed one holds it until recorded (its health may change).

An endpoint with ``max_in_flight`` 1 gets two deliveries; the first attempt's record is
held up (the test takes the write lock when the receiver answers). With a 204 the second
attempt goes out while the first is still unrecorded; with a 500 it waits for the record
(the control run: the test fails if slots were freed regardless of the outcome)."""

from __future__ import annotations

import asyncio

import pytest
from worker_nodes import stop, worker_node

from regionsync.adapters.system import SystemClock
from regionsync.core.retry import AttemptOutcome, OutcomeKind
from regionsync.runtime.ports import OutboundRequest
from regionsync.runtime.wakeup import sleep_until_due


class LockingSender:
    """Answers ``status``; the first request waits for ``published``, then has the
    holder take the write lock (``hold``) and answers once it holds it (``locked``)."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.published, self.hold, self.locked = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.ids: list[str] = []  # webhook-id of each request, in order
        self.while_held: list[str] = []  # those sent while the lock was held

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        self.ids.append(request.headers["webhook-id"])
        if self.hold.is_set():
            self.while_held.append(request.headers["webhook-id"])
        if len(self.ids) == 1:
            await self.published.wait()
            self.hold.set()
            await self.locked.wait()  # the record of this attempt now waits for the lock
        ok = self.status < 300
        return AttemptOutcome(OutcomeKind.SUCCEEDED if ok else OutcomeKind.FAILED,
                              status_code=self.status, reason=None if ok else "http")  # fmt: skip


async def _run(status: int) -> tuple[list[str], list[str], int]:
    """(requests, those sent while the first attempt's record was held up, attempts
    recorded once released)."""
    sender = LockingSender(status)
    node, net = worker_node(sender)
    release = asyncio.Event()

    async def holder() -> None:
        await sender.hold.wait()
        async with node.writer.local_lock():
            sender.locked.set()
            await release.wait()
        sender.hold.clear()

    await node.start()
    task = asyncio.create_task(holder())
    try:
        ops = node.registry_ops
        await ops.create_tenant("t", "T")
        ep = await ops.create_endpoint(
            "t", {"url": "https://hook.example/", "max_in_flight": 1, "rate_limit_per_s": 1000}
        )
        for _ in range(2):
            await node.ingest.publish("t", "t", b"{}", None)
        sender.published.set()
        await sender.locked.wait()
        for _ in range(100):  # the second request, if its slot is free, goes out now
            if len(sender.ids) == 2:
                break
            await asyncio.sleep(0.005)
        held = list(sender.while_held)
        release.set()
        await task
        for _ in range(200):
            rows = await node.store.list_deliveries(ep.id, None, 0, None, 10)
            if len(rows) == 2 and all(d.attempts >= 1 for d in rows):
                break
            await asyncio.sleep(0.01)
        recorded = sum(d.attempts for d in rows)
        assert not node.delivery.inflight and not node.delivery.slots
        assert node.delivery.recording == 0
        return list(sender.ids), held, recorded
    finally:
        release.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await stop(node, net)


async def test_a_success_frees_the_lane_before_its_record_is_durable() -> None:
    ids, held, recorded = await _run(204)
    assert len(ids) == 2 and ids[0] != ids[1]
    assert held == [ids[1]]  # sent while the first attempt was still unrecorded
    assert recorded == 2  # and both recorded once the lock was released


async def test_a_failure_holds_the_lane_until_recorded() -> None:
    ids, held, recorded = await _run(500)
    assert held == []  # the second attempt waited for the first one's record
    assert len(ids) >= 2 and recorded >= 2


@pytest.mark.parametrize("due_in_ms", [None, -5_000])
async def test_sleep_until_due_returns_on_a_wake_up_before_the_query(
    due_in_ms: int | None,
) -> None:
    """A wake-up ends the wait while the next-due query is still running (its answer is
    dropped); a past or missing next-due time never ends it (due rows that could not
    start wait for a wake-up: no busy loop)."""
    clock, wake, answered = SystemClock(), asyncio.Event(), asyncio.Event()
    gate = asyncio.Event()

    async def next_due() -> int | None:
        await gate.wait()
        answered.set()
        return None if due_in_ms is None else clock.wall_ms() + due_in_ms

    sleeper = asyncio.create_task(sleep_until_due(wake, next_due, clock, 60.0, None))
    gate.set()
    await answered.wait()
    for _ in range(20):
        await asyncio.sleep(0)
    assert not sleeper.done()  # the query answered; nothing due later: still waiting
    gate.clear()
    answered.clear()
    wake.set()
    await asyncio.wait_for(sleeper, 5)

    wake.clear()
    sleeper = asyncio.create_task(sleep_until_due(wake, next_due, clock, 60.0, None))
    for _ in range(5):
        await asyncio.sleep(0)
    wake.set()  # the query is still blocked on the gate
    await asyncio.wait_for(sleeper, 5)
    assert not answered.is_set()
    gate.set()
    await asyncio.wait_for(answered.wait(), 5)  # it ran on, not cancelled mid-query


async def test_sleep_until_due_ends_at_the_next_due_time() -> None:
    clock, wake = SystemClock(), asyncio.Event()

    async def next_due() -> int | None:
        return clock.wall_ms() + 20

    await asyncio.wait_for(sleep_until_due(wake, next_due, clock, 60.0, None), 5)
    assert not wake.is_set()  # ended by the due time, not a wake-up or the 60 s poll
