"""Generations: an owner's add dots in its OR-Set, as ``actor#n,...``. Objects record
the generation of their owner when made; a deleted and re-created id gets new dots, so
what was made under its earlier life stops belonging to it (core.registry)."""

from __future__ import annotations

import functools
from typing import Any

from crdt import ORSet


@functools.lru_cache(maxsize=4096)
def gen_of(dots: frozenset[tuple[str, int]]) -> str:
    """``actor#n,...`` of an owner's add dots, sorted; cached per (immutable) dot set, as
    every publish stamps its event with its tenant's generation."""
    return ",".join(sorted(f"{actor}#{n}" for actor, n in dots))


def gen_live(recorded: str, live: str | None) -> bool:
    """Does an object stamped with generation ``recorded`` belong to the owner whose live
    generation is ``live``? Generations are the owner's add dots (``Registry.tenant_gen``,
    ``endpoint_gen``); they match if they share a dot. ``""`` (rows written before
    generations existed) matches any live owner; ``live`` None (owner gone) matches nothing.
    """
    if live is None:
        return False
    if not recorded:
        return True
    return not set(recorded.split(",")).isdisjoint(live.split(","))


def changed_members(old: ORSet, new: ORSet) -> set[Any]:
    """Elements whose dots differ between two states of one OR-Set: added, removed or
    re-added. A re-added tenant counts, as its generation is its dots (``gen_live``).
    O(elements) dict work, no CRDT operation."""
    before, after = old.entries, new.entries
    out = set(before.keys() ^ after.keys())
    out.update(e for e, dots in after.items() if before.get(e, dots) != dots)
    return out
