"""A watchdog for one test (tests/conftest.py starts one per test): a test still running
after its deadline gets its asyncio tasks, each with its chain of awaits, and every
thread's stack written out, and the task running the test function is cancelled, so the
test fails with the dump instead of holding the whole run (a CI run hung for the rest of
its time in one test, idle in its event loop, and showed nothing of where). A hang that
the cancellation does not end (a synchronous test, a task ignoring it) ends the process
a while later, after a second dump.

The dump is made from the watchdog's thread, so it works also when the event loop is
stuck in synchronous code."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import os
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
    """Every live task of every loop, from CPython's registries (``_all_tasks`` up to 3.11;
    ``_scheduled_tasks`` and ``_eager_tasks`` from 3.12), copied with retries, as their
    owner threads may change them meanwhile."""
    names = ("_all_tasks", "_scheduled_tasks", "_eager_tasks")
    found: list[asyncio.Task[Any]] = []
    for registry in [r for n in names if (r := getattr(asyncio.tasks, n, None)) is not None]:
        for _ in range(100):
            try:
                found += [t for t in list(registry) if not t.done()]
                break
            except RuntimeError:  # changed size during iteration
                continue
    return list(dict.fromkeys(found))


class Watchdog:
    """``start()`` arms it for ``seconds``; ``stop()`` disarms it. On expiry it writes the
    dump to ``out`` (within ``quiet()``: the test runner's output capture suspended),
    cancels the live tasks whose coroutine is the function named ``test_name`` and sets
    ``fired``; if it is still not stopped ``exit_after_s`` later (a hang no cancellation
    ends: a synchronous test, a task that ignores it), it dumps again and ends the
    process (exit status 70), so that a run waits for nothing."""

    def __init__(
        self,
        seconds: float,
        test_id: str,
        test_name: str,
        out: IO[str] | None = None,
        quiet: Callable[[], AbstractContextManager[Any]] = nullcontext,
        exit_after_s: float | None = None,
    ) -> None:
        self.seconds, self.test_id, self.test_name = seconds, test_id, test_name
        self.out, self.quiet, self.exit_after_s = out, quiet, exit_after_s
        self.fired = threading.Event()
        self._stopped = threading.Event()
        self._timer = threading.Timer(seconds, self._expired)
        self._timer.daemon = True

    def start(self) -> Watchdog:
        self._timer.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._timer.cancel()

    def _expired(self) -> None:
        tasks = _tasks()
        try:
            self._dump(tasks, f"still running after {self.seconds:g} s")
        finally:
            for task in tasks:
                code = getattr(task.get_coro(), "cr_code", None)
                if code is not None and code.co_name == self.test_name:
                    with contextlib.suppress(RuntimeError):  # its loop is closed
                        task.get_loop().call_soon_threadsafe(task.cancel, "hang watchdog")
            self.fired.set()
        if self.exit_after_s is not None and not self._stopped.wait(self.exit_after_s):
            self._dump(_tasks(), "not ended by its cancellation; ending the run")
            os._exit(70)

    def _dump(self, tasks: list[asyncio.Task[Any]], why: str) -> None:
        """The dump; never raises (it runs on the watchdog's thread)."""
        try:
            with self.quiet():
                out = self.out or sys.stderr
                out.write(f"\n=== hang watchdog: {self.test_id} {why}; "
                          f"{len(tasks)} asyncio tasks:\n")  # fmt: skip
                for task in tasks:
                    waiter = getattr(task, "_fut_waiter", None)  # the future it waits for
                    head = f"  {task.get_name()} {task.get_coro()!r} waiting {waiter!r}"
                    out.write(head[:400] + "\n")
                    out.write("".join(line + "\n" for line in await_chain(task.get_coro())))
                out.write("=== threads:\n")
                out.flush()
                try:
                    faulthandler.dump_traceback(file=out, all_threads=True)
                except (ValueError, OSError, AttributeError):  # ``out`` has no descriptor
                    out.write("    (thread stacks need a file with a descriptor)\n")
                out.flush()
        except Exception as exc:  # a repr or a write that failed: the cancellation goes on
            with contextlib.suppress(Exception):
                sys.__stderr__.write(f"hang watchdog: dump of {self.test_id} failed: {exc!r}\n")
