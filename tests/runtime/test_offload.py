"""runtime/offload.py: jobs run on threads, a tenant one at a time and in turn with the
others, at most ``max_queued`` waiting per tenant (429 ``cpu_busy``)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from regionsync.errors import TooManyRequests
from regionsync.runtime.offload import Offload


def held(gate: threading.Event, started: threading.Event, value: str) -> str:
    started.set()
    assert gate.wait(10)
    return value


async def test_a_held_job_of_one_tenant_delays_another_tenant_not_at_all() -> None:
    pool = Offload(threads=2, max_queued=8)
    gate, started = threading.Event(), threading.Event()
    try:
        first = asyncio.create_task(pool.run("a", held, gate, started, "a1"))
        assert await asyncio.to_thread(started.wait, 10)
        second = asyncio.create_task(pool.run("a", str.upper, "a2"))  # waits its turn
        assert await pool.run("b", str.upper, "b1") == "B1"  # the other thread
        await asyncio.sleep(0.05)
        assert not first.done() and not second.done()
        gate.set()
        assert await first == "a1" and await second == "A2"
    finally:
        gate.set()
        pool.close()


async def test_a_tenant_over_its_queue_gets_429_and_errors_reach_the_caller() -> None:
    pool = Offload(threads=1, max_queued=2)
    gate, started = threading.Event(), threading.Event()
    try:
        running = asyncio.create_task(pool.run("a", held, gate, started, "x"))
        assert await asyncio.to_thread(started.wait, 10)
        waiting = [asyncio.create_task(pool.run("a", str.upper, "y")) for _ in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(TooManyRequests) as info:
            await pool.run("a", str.upper, "z")
        assert (info.value.code, info.value.field) == ("cpu_busy", "tenant")
        waiting[0].cancel()  # a caller that went away is skipped
        gate.set()
        assert await running == "x" and await waiting[1] == "Y"
        with pytest.raises(ZeroDivisionError):
            await pool.run("a", divmod, 1, 0)
    finally:
        gate.set()
        pool.close()


async def test_tenants_take_turns_on_one_thread() -> None:
    pool = Offload(threads=1, max_queued=8)
    gate, started = threading.Event(), threading.Event()
    order: list[str] = []
    try:
        first = asyncio.create_task(pool.run("a", held, gate, started, "a0"))
        assert await asyncio.to_thread(started.wait, 10)
        jobs = [
            asyncio.create_task(pool.run(t, order.append, f"{t}{i}"))
            for t, i in (("a", 1), ("a", 2), ("b", 1), ("b", 2))
        ]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(first, *jobs)
        assert order == ["b1", "a1", "b2", "a2"]
    finally:
        pool.close()
