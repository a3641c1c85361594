"""Long synchronous work on the event loop in bounded slices (issue 42).

A ``Slicer`` is told between two small steps of a long piece of work (``tick``); once the
steps since the last yield took ``slice_s`` of loop time, it yields to the loop: for a
pause as long as the slice took times ``pause_ratio`` (1.0: the work takes at most half
of the loop; 0.0: only a yield, so requests and commits waiting run first). On the
simulator's virtual loop no loop time passes during synchronous work, so a slicer never
yields there and the simulated trace is unchanged.
"""

from __future__ import annotations

import asyncio

__all__ = ["SLICE_S", "Slicer"]

SLICE_S = 0.01  # 10 ms: the serving side's requests wait at most about this much


class Slicer:
    """Yields to the loop every ``slice_s`` of synchronous work (see the module)."""

    def __init__(self, slice_s: float = SLICE_S, pause_ratio: float = 1.0):
        self.loop = asyncio.get_running_loop()
        self.slice_s, self.pause_ratio = slice_s, pause_ratio
        self.started = self.loop.time()
        self.yields = 0  # times it returned to the loop (tests)

    def due(self) -> bool:
        """Whether the current slice has run its time (a cheap check per step)."""
        return self.loop.time() - self.started >= self.slice_s

    async def tick(self) -> None:
        """Between two steps: yield to the loop if the slice has run its time."""
        took = self.loop.time() - self.started
        if took >= self.slice_s:
            await asyncio.sleep(took * self.pause_ratio)
            self.yields += 1
            self.started = self.loop.time()
