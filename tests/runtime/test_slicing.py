"""runtime/slicing.py: a Slicer returns to the loop only once a slice ran its time."""

from __future__ import annotations

import asyncio
import time

from regionsync.runtime.slicing import Slicer


async def test_no_yield_within_a_slice_then_a_pause_as_long_as_it_took() -> None:
    slicer = Slicer(slice_s=0.05, pause_ratio=1.0)
    await slicer.tick()  # nothing ran yet: no yield
    assert slicer.yields == 0 and not slicer.due()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.06:  # synchronous work past the slice
        pass
    assert slicer.due()
    loop = asyncio.get_running_loop()
    before = loop.time()
    await slicer.tick()
    assert slicer.yields == 1
    assert loop.time() - before >= 0.05  # paused about as long as the slice took
    assert not slicer.due()  # a new slice starts after the pause


async def test_a_ratio_of_zero_only_yields() -> None:
    slicer = Slicer(slice_s=0.0, pause_ratio=0.0)
    ran = []
    asyncio.get_running_loop().call_soon(ran.append, 1)
    await slicer.tick()
    assert ran == [1] and slicer.yields == 1
