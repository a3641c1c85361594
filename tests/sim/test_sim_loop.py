"""The virtual loop: timers jump, no wall time passes, deadlocks are reported."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from regionsync.adapters.sender import HttpxSender
from regionsync.core.retry import OutcomeKind
from regionsync.runtime.ports import OutboundRequest
from sim import Deadlock, VirtualLoop, run_virtual
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
    assert time.perf_counter() - started < 1.0


def test_waiting_forever_is_a_deadlock() -> None:
    async def main() -> None:
        await asyncio.Event().wait()

    with pytest.raises(Deadlock):
        run_virtual(main(), VirtualLoop())


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
