"""The garbage collector and a large registry (issue 42).

A registry of 300k keys is about 1.6M objects the cyclic garbage collector tracks; a full
collection walks every one of them (1.2 s at 300k keys, seconds at 1M) in one go on the
event loop, and any burst of allocation (a snapshot merged, a copy of the registry)
brings one on. ``settle`` moves what is alive now out of the collector's generations
(``gc.freeze``): it is still freed by reference counting, but no longer walked, so a full
collection walks only what was made since. Called once the registry is loaded, as a tree
is built and after merged state chunks, only above ``LARGE`` keys (so small nodes, the
tests and the simulator keep the collector as it is) and again only once grown by a
tenth. The price: a reference cycle made before a ``settle`` and not collected by it is
never collected; the registry's states hold none (young ones are collected first).
"""

from __future__ import annotations

import gc

__all__ = ["LARGE", "settle"]

LARGE = 20_000  # registry keys


_sizes: dict[str, int] = {}  # what grows -> its size at the last settle


def settle(size: int, what: str = "registry") -> bool:
    """Collect the young generations and freeze what is alive, if ``size`` (of
    ``what``: registry keys, or a tree's items) is above ``LARGE`` and a tenth more than
    at the last settle for it (so a joining node settles a few dozen times, not at every
    chunk); returns whether it did."""
    if size <= LARGE or size < _sizes.get(what, 0) * 11 // 10:
        return False
    gc.collect(1)
    gc.freeze()
    _sizes[what] = size
    return True
