"""A changed limit counts at the next claim (issue 38, kind 6), on virtual time (sim's
loop: timers jump, no wall time passes, so every figure here is exact).

The example: an endpoint at 0.05/s with 4 events waiting, PATCHed to 10,000/s; the rest
arrived 20 s later, since a lane blocked on its bucket kept the old rate (``retune`` ran
only when an attempt was admitted). Its neighbours: a raised ``max_in_flight`` or tenant
``delivery_max_in_flight`` waited for the next poll (no wake-up on a registry change); a
paused endpoint's rows waited for a token before being recorded as skipped; and a region
whose health view of an endpoint is disabled or failing kept it after the endpoint was
re-enabled or reset elsewhere (re-disabling it on the next success, or holding its
deliveries for the probe backoff)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from worker_nodes import stop, worker_node

from regionsync.core.health import Health, behind
from regionsync.core.lanes import TokenBucket
from regionsync.core.model import DeliveryStatus
from regionsync.core.retry import AttemptOutcome, OutcomeKind
from regionsync.runtime.node import Node
from regionsync.runtime.ports import OutboundRequest
from sim import run_virtual
from sim._world import SimClock

EVENTS = 5


class TimedSender:
    """Answers 204, noting the virtual time of each send (``at``) and how many are in
    flight at most (``peak``); holds each while ``gate`` is closed."""

    def __init__(self, clock: SimClock, held: bool = False) -> None:
        self.clock, self.at, self.inflight, self.peak = clock, [], 0, 0
        self.gate = asyncio.Event()
        if not held:
            self.gate.set()

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        self.at.append(self.clock.monotonic())
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        try:
            await self.gate.wait()
        finally:
            self.inflight -= 1
        return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)


Scenario = Callable[[Node, TimedSender, str], Awaitable[None]]


def _run(
    scenario: Scenario,
    endpoint: dict,
    held: bool = False,
    tenant_cap: int | None = None,
    **delivery: object,
) -> None:
    async def main() -> None:
        clock = SimClock()
        sender = TimedSender(clock, held)
        node, net = worker_node(sender, clock=clock, tenant_max_in_flight=100, **delivery)
        await node.start()
        try:
            await node.registry_ops.create_tenant("acme", "A", delivery_max_in_flight=tenant_cap)
            ep = await node.registry_ops.create_endpoint(
                "acme", {"url": "https://hook.example/", **endpoint}
            )
            for _ in range(EVENTS):
                await node.ingest.publish("acme", "push", b"{}", None)
            await scenario(node, sender, ep.id)
        finally:
            sender.gate.set()
            await stop(node, net)

    run_virtual(main())


def test_a_raised_rate_counts_for_a_waiting_lane() -> None:
    async def scenario(node: Node, sender: TimedSender, eid: str) -> None:
        await asyncio.sleep(1.0)
        assert len(sender.at) == 1  # the first token; the next is due at 20 s
        await node.registry_ops.patch_endpoint("acme", eid, {"rate_limit_per_s": 10_000})
        await asyncio.sleep(1.0)
        assert len(sender.at) == EVENTS, sender.at  # before: at 20 s
        assert max(sender.at) - 1.0 < 0.1

    _run(scenario, {"rate_limit_per_s": 0.05})


def test_a_lowered_rate_keeps_what_was_earned_at_the_old_one() -> None:
    bucket = TokenBucket.new(1.0, 0.0)
    assert bucket.take(0.0)
    bucket.retune(0.001, 0.5)  # half a token earned at 1/s
    assert bucket.tokens == pytest.approx(0.5)
    assert bucket.wait_s(0.5) == pytest.approx(500.0)  # the other half at 0.001/s
    bucket.retune(1000.0, 0.5)
    assert bucket.wait_s(0.5) == pytest.approx(0.0005)


def test_a_raised_max_in_flight_counts_at_once() -> None:
    async def scenario(node: Node, sender: TimedSender, eid: str) -> None:
        await asyncio.sleep(1.0)
        assert sender.inflight == 1
        await node.registry_ops.patch_endpoint("acme", eid, {"max_in_flight": EVENTS})
        await asyncio.sleep(0.5)
        assert sender.inflight == EVENTS  # before: at the next poll (30 s)

    _run(scenario, {"max_in_flight": 1}, held=True, poll_interval_s=30.0)


def test_a_raised_tenant_cap_counts_at_once() -> None:
    async def scenario(node: Node, sender: TimedSender, eid: str) -> None:
        await asyncio.sleep(1.0)
        assert sender.inflight == 1
        # not offered by the API (set at creation), but replicated like any field
        await node.registry_ops.patch_tenant("acme", {"delivery_max_in_flight": 100})
        await asyncio.sleep(0.5)
        assert sender.inflight == EVENTS  # before: at the next poll (30 s)

    _run(scenario, {"max_in_flight": 100}, held=True, tenant_cap=1, poll_interval_s=30.0)


def test_pausing_a_waiting_lane_records_its_rows_at_once() -> None:
    async def scenario(node: Node, sender: TimedSender, eid: str) -> None:
        await asyncio.sleep(1.0)
        await node.registry_ops.patch_endpoint("acme", eid, {"paused": True})
        await asyncio.sleep(1.0)
        counts = await node.store.counts("a")
        # before: the rows waited 100 s for a token to be recorded as skipped
        assert counts[f"deliveries_{DeliveryStatus.SKIPPED.value}"] == EVENTS - 1
        assert len(sender.at) == 1

    _run(scenario, {"rate_limit_per_s": 0.01})


def test_a_re_enabled_endpoint_is_not_disabled_again() -> None:
    """This region's view says disabled; the endpoint was re-enabled in another region
    (the registry says active): a success must not write ``disabled`` back."""

    async def scenario(node: Node, sender: TimedSender, eid: str) -> None:
        await asyncio.sleep(1.0)
        assert len(sender.at) == EVENTS
        node.queue.health[eid] = Health("disabled")  # as before the re-enable arrived
        await node.ingest.publish("acme", "push", b"{}", None)
        await asyncio.sleep(1.0)
        assert len(sender.at) == EVENTS + 1
        assert not node.catalog.registry.endpoint(eid).disabled  # before: disabled again

    _run(scenario, {})


def test_a_failing_view_reset_elsewhere_does_not_hold_deliveries() -> None:
    """This region's view says failing with its next probe a day away; the registry says
    active (reset, or found healthy, in another region): the next delivery goes now."""

    async def scenario(node: Node, sender: TimedSender, eid: str) -> None:
        await asyncio.sleep(1.0)
        day = node.clock.wall_ms() + 86_400_000
        node.queue.health[eid] = Health("failing", 5, node.clock.wall_ms(), day, 86_400.0)
        await node.ingest.publish("acme", "push", b"{}", None)
        await asyncio.sleep(1.0)
        assert len(sender.at) == EVENTS + 1  # before: held for the day

    _run(scenario, {})


@pytest.mark.parametrize(
    ("local", "replicated", "stale"),
    [
        ("active", "failing", True),  # the cluster judged it failing: only a success ends it
        ("active", "disabled", True),
        ("failing", "failing", False),
        ("failing", "active", True),
        ("failing", "disabled", True),
        ("disabled", "active", True),
        ("disabled", "disabled", False),
        ("paused", "active", True),
        ("paused", "paused", False),
    ],
)
def test_behind(local: str, replicated: str, stale: bool) -> None:
    assert behind(Health(local), replicated) is stale
