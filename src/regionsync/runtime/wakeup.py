"""The delivery worker's wait between claims (runtime/delivery.py).

A claim round that started what it could waits for the first of: a wake-up (an attempt
finished, an event or a recovery added due deliveries), the soonest time a blocked lane
could start one, the next due delivery's time, or ``poll_interval_s``. The next-due
query runs while the wake-up is awaited, so under load (a wake-up per finished attempt)
no claim round waits for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .ports import Clock

__all__ = ["sleep_until_due"]


async def sleep_until_due(
    wake: asyncio.Event,
    next_due_ms: Callable[[], Awaitable[int | None]],
    clock: Clock,
    poll_interval_s: float,
    soonest_s: float | None,
) -> None:
    """Return once ``wake`` is set, ``soonest_s`` seconds passed (None: no bound), the
    time ``next_due_ms()`` answers (Unix ms; None or past: no bound; due deliveries that
    could not start wait for a wake-up or ``soonest_s``) is reached, or
    ``poll_interval_s`` passed, whichever is first (at least 1 ms). ``next_due_ms`` is
    never cancelled mid-query: when the wake-up comes first its answer is dropped."""
    wait = poll_interval_s if soonest_s is None else min(poll_interval_s, soonest_s)
    wait = max(wait, 0.001)
    woken = asyncio.ensure_future(wake.wait())
    planned = asyncio.ensure_future(next_due_ms())
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(wait) as deadline:
            done, _ = await asyncio.wait((woken, planned), return_when=asyncio.FIRST_COMPLETED)
            if woken not in done:
                nxt = planned.result()
                later_s = None if nxt is None else (nxt - clock.wall_ms()) / 1000
                if later_s is not None and 0 < later_s < (deadline.when() or 0) - loop.time():
                    deadline.reschedule(loop.time() + max(later_s, 0.001))
                await woken
    except TimeoutError:
        pass
    finally:
        woken.cancel()
        planned.add_done_callback(_drop)


def _drop(task: asyncio.Future[int | None]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a failed dropped query is not an unhandled error
