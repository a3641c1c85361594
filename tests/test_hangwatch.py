"""The per-test hang watchdog (tests/hangwatch.py, armed by tests/conftest.py)."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from pathlib import Path

import pytest
from hangwatch import Watchdog, _tasks, await_chain


async def _inner(gate: asyncio.Event) -> None:
    await gate.wait()


async def _outer(gate: asyncio.Event) -> None:
    await _inner(gate)


async def test_a_hung_test_is_dumped_and_its_task_cancelled() -> None:
    """A test function waiting on an event nobody sets: once the deadline passes its
    tasks are written out with their await chains (down to the future) and the task
    running the function is cancelled, which the test sees as CancelledError."""
    out = io.StringIO()
    gate = asyncio.Event()
    dog = Watchdog(0.2, "tests/x.py::hung", "hung", out=out)

    async def hung() -> None:
        await _outer(gate)

    task = asyncio.get_running_loop().create_task(hung(), name="the-test")
    dog.start()
    try:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
    finally:
        dog.stop()
    text = out.getvalue()
    assert dog.fired.is_set()
    assert "tests/x.py::hung still running after 0.2 s" in text
    assert "the-test" in text
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if line.endswith("<locals>.hung")]
    assert at, text
    chain = lines[at[0] : at[0] + 4]
    assert "_outer" in chain[1] and "_inner" in chain[2] and "Event.wait" in chain[3]
    assert "waiting <Future pending" in text  # the future the test's task waits for


async def test_a_watchdog_stopped_in_time_does_nothing() -> None:
    out = io.StringIO()
    dog = Watchdog(0.2, "t", "anything", out=out).start()
    dog.stop()
    await asyncio.sleep(0.4)
    assert not dog.fired.is_set() and out.getvalue() == ""


def test_await_chain_ends_with_the_awaited_future() -> None:
    loop = asyncio.new_event_loop()
    try:
        fut = loop.create_future()

        async def waits() -> None:
            await fut

        coro = waits()
        coro.send(None)  # now suspended on the future
        chain = await_chain(coro)
        assert "in test_await_chain_ends_with_the_awaited_future.<locals>.waits" in chain[0]
        assert chain[-1].strip() == "awaiting a future"
        coro.close()
    finally:
        loop.close()


async def test_every_live_task_is_found() -> None:
    """The task registries read are this Python's (they moved in 3.12)."""
    assert asyncio.current_task() in _tasks()


def test_a_hang_no_cancellation_ends_ends_the_process() -> None:
    """A synchronous hang: dumped, then, ``exit_after_s`` later, dumped again and the
    process ended with status 70."""
    script = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from hangwatch import Watchdog\n"
        "Watchdog(0.2, 'tests/x.py::sleeps', 'sleeps', exit_after_s=0.3).start()\n"
        "time.sleep(30)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=25)  # fmt: skip
    assert done.returncode == 70, done.stderr
    assert "tests/x.py::sleeps still running after 0.2 s" in done.stderr
    assert "not ended by its cancellation; ending the run" in done.stderr
    assert "line 5 in <module>" in done.stderr  # the main thread's stack: the sleep
