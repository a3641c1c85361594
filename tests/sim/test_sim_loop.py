"""The virtual loop: timers jump, no wall time passes, deadlocks and hot loops are reported."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from regionsync.adapters.sender import HttpxSender
from regionsync.core.retry import OutcomeKind
from regionsync.runtime.ports import OutboundRequest
from sim import Deadlock, Livelock, VirtualLoop, run_virtual
from sim._receivers import ReceiverTransport
from sim._world import derive_rng


def test_sleep_and_timeout_are_virtual() -> None:
    async def main() -> tuple[float, bool]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(3 * 3600)
        timed_out = False
        try:
            async with asyncio.timeout(5):
                await asyncio.Event().wait()
        except TimeoutError:
            timed_out = True
        return loop.time(), timed_out

    started = time.perf_counter()
    now, timed_out = run_virtual(main())
    assert now == pytest.approx(3 * 3600 + 5) and timed_out
    # waited for in real time it would take 3 hours: a bound far from both, not a goal
    assert time.perf_counter() - started < 60.0


def test_waiting_forever_is_a_deadlock() -> None:
    async def main() -> None:
        await asyncio.Event().wait()

    with pytest.raises(Deadlock):
        run_virtual(main(), VirtualLoop())


def test_a_hot_loop_is_reported_even_while_other_timers_move_time() -> None:
    """A task that re-polls without waiting, while another task's timer fires every 10 ms
    of virtual time: time advances, so the spin check alone never fired (the delivery
    worker's read-ahead re-reading a row it could not start did this, issue 17); the turns
    per virtual second do."""

    async def main(spin: bool) -> int:
        stop = asyncio.Event()

        async def ticker() -> None:
            for _ in range(300):  # 3 virtual seconds
                await asyncio.sleep(0.01)
            stop.set()

        async def poller() -> int:
            polls = 0
            while not stop.is_set():
                polls += 1
                await (asyncio.sleep(0) if spin else asyncio.sleep(0.05))
            return polls

        t = asyncio.create_task(ticker())
        polls = await poller()
        await t
        return polls

    assert run_virtual(main(spin=False), VirtualLoop()) < 100
    with pytest.raises(Livelock, match="within virtual second 0"):
        run_virtual(main(spin=True), VirtualLoop())


def test_httpx_sender_over_simulated_receivers_measures_virtual_latency() -> None:
    async def main() -> tuple[OutcomeKind, float, OutcomeKind]:
        loop = asyncio.get_running_loop()
        receivers = ReceiverTransport(derive_rng(1, "r"))
        async with httpx.AsyncClient(transport=receivers, trust_env=False) as client:
            sender = HttpxSender(client, timer=loop.time)
            ok = await sender.send(OutboundRequest("https://slow-1.rcv/h", {}, b"{}", 15.0))
            tarpit = await sender.send(OutboundRequest("https://tarpit-1.rcv/h", {}, b"{}", 15))
        return ok.kind, ok.latency_ms, tarpit.kind

    ok, latency_ms, tarpit = run_virtual(main())
    assert ok is OutcomeKind.SUCCEEDED and 1000 <= latency_ms <= 8000
    assert tarpit is OutcomeKind.INDETERMINATE
