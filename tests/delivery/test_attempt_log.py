"""Every request sent is an attempt row (issue 38, kind 4), whatever happened to its
delivery meanwhile. The example: an endpoint answers after 2 s, the delivery is retried
three times meanwhile; the receiver got 2 requests and the attempt log showed 1 (the
outcome of the superseded generation was dropped whole, its attempt row with it)."""

from __future__ import annotations

import asyncio

import pytest
from worker_nodes import stop, until, worker_node

from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.model import Delivery, DeliveryStatus, WriteBatch
from regionsync.core.retry import AttemptOutcome, OutcomeKind, attempt_row
from regionsync.runtime.outcomes import Outcome
from regionsync.runtime.ports import OutboundRequest


class SlowFirstSender:
    """Holds the first request until ``gate`` opens and answers it 503; answers the
    others 204 at once. ``sent`` counts the requests."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.sent = 0

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        self.sent += 1
        if self.sent == 1:
            await self.gate.wait()
            return AttemptOutcome(OutcomeKind.FAILED, status_code=503)
        return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)


async def _in_flight(node, sender) -> Delivery:  # type: ignore[no-untyped-def]
    """A tenant, an endpoint and a published event whose first attempt is in flight."""
    await node.registry_ops.create_tenant("t1", "One")
    await node.registry_ops.create_endpoint("t1", {"url": "https://example.com/hook"})
    event, _ = await node.ingest.publish("t1", "a", b'{"n":1}', None)
    [d] = await node.store.deliveries_of_event(event.id)

    async def sending() -> bool:
        return sender.sent == 1

    await until(sending, "the first attempt")
    return d


@pytest.mark.parametrize("retries", [1, 3])
async def test_retries_during_an_attempt_keep_its_row(retries: int) -> None:
    sender = SlowFirstSender()
    node, net = worker_node(sender, retry_schedule_s=[3600.0])
    await node.start()
    try:
        d = await _in_flight(node, sender)
        for _ in range(retries):
            await node.recovery.retry_delivery("t1", d.id)
        sender.gate.set()

        async def settled() -> bool:
            row = await node.store.get_delivery(d.id)
            rows = await node.store.attempts_of(d.id)
            return row is not None and row.status is DeliveryStatus.DELIVERED and len(rows) == 2

        await until(settled, "both attempts recorded")
        rows = await node.store.attempts_of(d.id)
        assert sender.sent == 2
        assert sorted((a.generation, a.n, a.status_code) for a in rows) == [
            (0, 1, 503),
            (retries, 1, 204),
        ]
        # the delivery's state is its current generation's alone
        row = await node.store.get_delivery(d.id)
        assert row is not None and (row.generation, row.attempts) == (retries, 1)
        assert node.queue.backlog == 0
    finally:
        await stop(node, net)


async def test_a_sent_request_whose_outcome_failed_to_commit_keeps_its_row() -> None:
    """The outcome's commit fails once: the delivery is pushed back (the crash path) and
    the request it sent is still an attempt row, numbered as sent."""

    class FailsOnce(MemoryStore):
        failed = False

        async def commit(self, batch: WriteBatch) -> None:
            if batch.attempts and not self.failed:
                self.failed = True
                raise OSError("disk full")
            await super().commit(batch)

    class Answers503:
        sent = 0

        async def send(self, request: OutboundRequest) -> AttemptOutcome:
            self.sent += 1
            return AttemptOutcome(OutcomeKind.FAILED, status_code=503)

    sender, store = Answers503(), FailsOnce()
    node, net = worker_node(sender, store=store, retry_schedule_s=[3600.0])
    await node.start()
    try:
        await node.registry_ops.create_tenant("t1", "One")
        await node.registry_ops.create_endpoint("t1", {"url": "https://example.com/hook"})
        event, _ = await node.ingest.publish("t1", "a", b'{"n":1}', None)
        [d] = await node.store.deliveries_of_event(event.id)

        async def pushed_back() -> bool:
            row = await node.store.get_delivery(d.id)
            return store.failed and row is not None and row.attempts == 1

        await until(pushed_back, "the push-back")
        assert sender.sent == 1
        assert [(a.n, a.status_code) for a in await node.store.attempts_of(d.id)] == [(1, 503)]
    finally:
        await stop(node, net)


async def test_two_sends_of_one_attempt_number_are_two_rows() -> None:
    """Two processes of a region sent the same attempt of one generation (a claim that
    expired under a stalled process): the later outcome is numbered after the first, not
    dropped as a duplicate key, and the delivery counts both."""
    sender = SlowFirstSender()  # the worker's own attempt stays in flight
    node, net = worker_node(sender)
    node.delivery.recorder.shared = True  # as with claims (several processes per region)
    await node.start()
    try:
        d = await _in_flight(node, sender)
        later = node.clock.wall_ms() + 3_600_000
        for code in (502, 503):  # the same claimed state, sent twice
            sent = AttemptOutcome(OutcomeKind.FAILED, status_code=code)
            row = attempt_row(d, 1, node.clock.wall_ms(), "a", sent)
            await node.delivery.recorder.record(
                Outcome(d, DeliveryStatus.PENDING, later, 1, row, "failure")
            )
        rows = await node.store.attempts_of(d.id)
        assert sorted((a.n, a.status_code) for a in rows) == [(1, 502), (2, 503)]
        got = await node.store.get_delivery(d.id)
        assert got is not None and got.attempts == 2
    finally:
        await stop(node, net)
