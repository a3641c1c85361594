"""The garbage collector and a large registry (issue 42).

A registry of 300k keys is about 1.6M objects the cyclic garbage collector tracks; a full
collection walks every one of them (1.2 s at 300k keys, seconds at 1M) in one go on the
event loop, and any burst of allocation (a snapshot merged, a copy of the registry)
brings one on. ``settle`` moves what is alive now out of the collector's generations
(``gc.freeze``): it is still freed by reference counting, but no longer walked, so a full
collection walks only what was made since. Called once the registry is loaded and after
every merged state chunk, and only for a registry larger than ``LARGE`` keys (so small
nodes, the tests and the simulator keep the collector as it is). The price: a reference
cycle made before a ``settle`` and not yet collected by it is never collected; the
registry's states hold none (young ones are collected first).
"""

from __future__ import annotations

import gc

__all__ = ["LARGE", "settle"]

LARGE = 20_000  # registry keys


def settle(registry_keys: int) -> bool:
    """Collect the young generations and freeze what is alive, if the registry holds
    more than ``LARGE`` keys; returns whether it did."""
    if registry_keys <= LARGE:
        return False
    gc.collect(1)
    gc.freeze()
    return True
