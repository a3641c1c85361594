"""A watchdog for one test (tests/conftest.py starts one per test): a test still running
after its deadline gets its asyncio tasks, each with its chain of awaits, and every
thread's stack written out, and the task running the test function is cancelled, so the
test fails with the dump instead of holding the whole run (a CI run hung for the rest of
its time in one test, idle in its event loop, and showed nothing of where).

The dump is made from the watchdog's thread, so it works also when the event loop is
stuck in synchronous code (the cancellation then waits for the loop, and the stacks still
show where it is)."""

from __future__ import annotations

import asyncio
import faulthandler
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import IO, Any

__all__ = ["Watchdog", "await_chain"]


def await_chain(coro: Any) -> list[str]:
    """Where ``coro`` waits: one line per coroutine or generator it awaits through,
    outermost first, ending with what the innermost awaits (a future, if any)."""
    lines: list[str] = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            if type(coro).__name__ == "FutureIter":  # ``await future``: the task's waiter
                lines.append("    awaiting a future")
            elif not hasattr(coro, "cr_code") and not hasattr(coro, "gi_code"):
                lines.append(f"    awaiting {coro!r}"[:300])
            break
        code = frame.f_code
        lines.append(f"    {code.co_filename}:{frame.f_lineno} in {code.co_qualname}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return lines


def _tasks() -> list[asyncio.Task[Any]]:
    """Every live task of every loop (CPython keeps them in ``asyncio.tasks._all_tasks``);
    copied with retries, as its owner thread may change it meanwhile."""
    tasks = getattr(asyncio.tasks, "_all_tasks", ())
    for _ in range(100):
        try:
            return [t for t in list(tasks) if not t.done()]
        except RuntimeError:  # changed size during iteration
            continue
    return []


class Watchdog:
    """``start()`` arms it for ``seconds``; ``stop()`` disarms it. On expiry it writes the
    dump to ``out`` (within ``quiet()``: the test runner's output capture suspended) and
    cancels the live tasks whose coroutine is the function named ``test_name``."""

    def __init__(
        self,
        seconds: float,
        test_id: str,
        test_name: str,
        out: IO[str] | None = None,
        quiet: Callable[[], AbstractContextManager[Any]] = nullcontext,
    ) -> None:
        self.seconds, self.test_id, self.test_name = seconds, test_id, test_name
        self.out, self.quiet = out, quiet
        self.fired = threading.Event()
        self._timer = threading.Timer(seconds, self._expired)
        self._timer.daemon = True

    def start(self) -> Watchdog:
        self._timer.start()
        return self

    def stop(self) -> None:
        self._timer.cancel()

    def _expired(self) -> None:
        tasks = _tasks()
        with self.quiet():
            out = self.out or sys.stderr
            out.write(f"\n=== hang watchdog: {self.test_id} still running after "
                      f"{self.seconds:g} s; {len(tasks)} asyncio tasks:\n")  # fmt: skip
            for task in tasks:
                waiter = getattr(task, "_fut_waiter", None)  # what it waits for, if a future
                head = f"  {task.get_name()} {task.get_coro()!r} waiting {waiter!r}"
                out.write(head[:400] + "\n")
                out.write("".join(line + "\n" for line in await_chain(task.get_coro())))
            out.write("=== threads:\n")
            out.flush()
            try:
                faulthandler.dump_traceback(file=out, all_threads=True)
            except (ValueError, OSError, AttributeError):  # ``out`` has no file descriptor
                out.write("    (thread stacks need a file with a descriptor)\n")
            out.flush()
        for task in tasks:
            code = getattr(task.get_coro(), "cr_code", None)
            if code is not None and code.co_name == self.test_name:
                task.get_loop().call_soon_threadsafe(task.cancel)
        self.fired.set()
