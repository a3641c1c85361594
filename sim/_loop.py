"""A virtual-time asyncio event loop: ``time()`` is virtual and the selector never blocks.

When no callback is ready, the loop's "poll" jumps virtual time straight to the earliest
scheduled timer, so ``asyncio.sleep``/``asyncio.timeout`` in the node code cost no wall
time. There is no I/O at all: no self-pipe, no sockets, no threads. If nothing is ready
and nothing is scheduled, every task is waiting on something that can never happen, and
the loop raises ``Deadlock`` instead of blocking forever; a run of callbacks that never
lets virtual time advance raises ``Livelock``, and so does a hot loop that other tasks'
timers keep moving through time: more than ``hot_limit`` loop turns within one virtual
second (the scenarios' busiest second takes about 1,500).
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["Deadlock", "Livelock", "VirtualLoop", "run_virtual"]

T = TypeVar("T")


class Deadlock(RuntimeError):
    """Nothing is ready and no timer is scheduled: the simulation can never progress."""


class Livelock(RuntimeError):
    """Too many loop iterations without virtual time advancing (a hot loop)."""


class _VirtualSelector:
    """Stands in for ``selectors``: ``select(timeout)`` advances virtual time instead of
    waiting, and never reports I/O events."""

    def __init__(self, loop: VirtualLoop, spin_limit: int, hot_limit: int):
        self._loop = loop
        self._spins = 0
        self._spin_limit = spin_limit
        self._second, self._turns, self._hot_limit = -1, 0, hot_limit

    def select(self, timeout: float | None) -> list[Any]:
        loop = self._loop
        if timeout is None:
            raise Deadlock(f"no ready callbacks and no timers at virtual t={loop.time():.3f}s")
        second = int(loop.time())
        if second != self._second:
            self._second, self._turns = second, 0
        self._turns += 1
        if self._turns > self._hot_limit:
            raise Livelock(
                f"{self._turns} loop iterations within virtual second {second} (a hot loop "
                "that other timers move through time)"
            )
        if timeout > 0:
            self._spins = 0
            loop._advance(timeout)
        else:
            self._spins += 1
            if self._spins > self._spin_limit:
                raise Livelock(
                    f"{self._spins} loop iterations at virtual t={loop.time():.3f}s "
                    "without time advancing"
                )
        return []

    def close(self) -> None:
        pass


class VirtualLoop(asyncio.base_events.BaseEventLoop):
    """An asyncio loop over virtual seconds starting at 0.0.

    ``iterations`` counts loop turns (a cheap cost measure for reports).
    """

    def __init__(self, spin_limit: int = 2_000_000, hot_limit: int = 20_000):
        super().__init__()
        self._now = 0.0
        self._selector = _VirtualSelector(self, spin_limit, hot_limit)
        self.iterations = 0

    def time(self) -> float:
        return self._now

    def _advance(self, seconds: float) -> None:
        target = self._now + seconds
        if self._scheduled:
            # land exactly on the timer so float rounding cannot leave it unfired
            target = max(target, min(self._scheduled[0]._when, target + 1e-6))
        self._now = target

    def _run_once(self) -> None:
        self.iterations += 1
        super()._run_once()  # type: ignore[misc]

    # BaseEventLoop hooks for I/O: there is none.
    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def close(self) -> None:
        if self.is_running():
            raise RuntimeError("cannot close a running event loop")
        if not self.is_closed():
            self._selector.close()
        super().close()


def run_virtual(coro: Coroutine[Any, Any, T], loop: VirtualLoop | None = None) -> T:
    """Run ``coro`` to completion on a (new) VirtualLoop, then cancel leftovers and close."""
    loop = loop or VirtualLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
