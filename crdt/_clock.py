"""Decides causality: vector clock order and join, and exact causal contexts (sets of dots).
Never reads time, never guesses: a context holding only (a, 5) does not imply (a, 1..4).
Rules: Mattern 1988 / Fidge 1988 vector clocks; Almeida, Shoker, Baquero 2018 causal contexts.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping
from typing import Literal, Self

from crdt._codec import (
    CRDT,
    check_actor,
    check_count,
    counts_from_mapping,
    pairs,
    pairs_to_dict,
    two,
)

__all__ = ["CausalContext", "Dot", "VectorClock"]

Dot = tuple[str, int]
"""A dot `(actor, counter)`: the counter-th event of `actor`, counter >= 1."""

Order = Literal["before", "after", "equal", "concurrent"]


class VectorClock(CRDT, tag="vc"):
    """An immutable version vector: actor (str) -> counter (int >= 0; zeros are dropped).

    `VectorClock({"a": 0}) == VectorClock()`. Raises TypeError for a non-str actor or a
    non-mapping argument, ValueError for an empty actor or a counter outside
    [0, COUNTER_MAX = 2**63-1], InvalidTextError (a ValueError) for an actor with a lone
    surrogate.
    """

    __slots__ = ("_entries", "_key")
    _entries: dict[str, int]
    _key: tuple[tuple[str, int], ...]

    def __init__(self, entries: Mapping[str, int] | None = None) -> None:
        self._init(counts_from_mapping(entries))

    def _init(self, sorted_entries: dict[str, int]) -> None:
        object.__setattr__(self, "_entries", sorted_entries)
        object.__setattr__(self, "_key", tuple(sorted_entries.items()))

    @classmethod
    def _new(cls, entries: Mapping[str, int]) -> VectorClock:
        """Trusted constructor: entries already validated, zeros allowed (dropped here)."""
        clock = cls.__new__(cls)
        clock._init({a: entries[a] for a in sorted(entries) if entries[a]})
        return clock

    @classmethod
    def empty(cls) -> Self:
        """Return the clock with no entries."""
        return cls()

    def get(self, actor: str) -> int:
        """Return the counter of `actor`, 0 if absent."""
        return self._entries.get(actor, 0)

    def increment(self, actor: str) -> VectorClock:
        """Return the DELTA `{actor: get(actor) + 1}`; merge it to apply. Raises like __init__
        (ValueError once the counter would pass COUNTER_MAX)."""
        check_actor(actor)
        return VectorClock._new({actor: check_count(self.get(actor) + 1)})

    def merge(self, other: VectorClock) -> VectorClock:
        """Return the pointwise maximum. Raises TypeError if `other` is not a VectorClock."""
        self._check_peer(other)
        if not other._entries:
            return self
        if not self._entries:
            return other
        joined = dict(self._entries)
        for actor, n in other._entries.items():
            if n > joined.get(actor, 0):
                joined[actor] = n
        return VectorClock._new(joined)

    def prune(self, removed: str, into: str) -> VectorClock:
        """Return this clock without `removed`'s entry (see `crdt._prune`).

        A version vector counts each actor's own events, so nothing is added to `into`
        (that would invent events); `into` is checked only. Dropping an entry commutes
        with the pointwise max, so prune(a).merge(prune(b)) == prune(a.merge(b)) always.
        """
        check_actor(removed)
        check_actor(into)
        if removed not in self._entries or removed == into:
            return self
        return VectorClock._new({a: n for a, n in self._entries.items() if a != removed})

    def value(self) -> dict[str, int]:
        """Return a fresh dict actor -> counter (sorted by actor, no zeros)."""
        return dict(self._entries)

    def items(self) -> ItemsView[str, int]:
        """Return a read-only view of `(actor, counter)` pairs sorted by actor."""
        return self._entries.items()

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __le__(self, other: object) -> bool:
        """`self <= other`: every counter of self is <= the same counter of other."""
        if not isinstance(other, VectorClock):
            return NotImplemented
        theirs = other._entries
        return all(n <= theirs.get(a, 0) for a, n in self._entries.items())

    def dominates(self, other: VectorClock) -> bool:
        """Return True if self >= other pointwise (also True when equal)."""
        return other <= self

    def compare(self, other: VectorClock) -> Order:
        """Return "before" (self < other), "after", "equal" or "concurrent"."""
        le = self <= other
        ge = other <= self
        if le and ge:
            return "equal"
        if le:
            return "before"
        if ge:
            return "after"
        return "concurrent"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VectorClock):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return hash(("vc", self._key))

    def __repr__(self) -> str:
        return f"VectorClock({self._entries!r})"

    def _body(self) -> list[list[object]]:
        return pairs(self._entries)

    @classmethod
    def _from_body(cls, body: object) -> Self:
        return cls(pairs_to_dict(body))


def check_dot(dot: object) -> Dot:
    """Return `dot` as a `(actor, counter)` tuple; raise TypeError/ValueError if invalid."""
    if not isinstance(dot, tuple | list) or len(dot) != 2:
        raise TypeError(f"dot must be a (actor, counter) pair, got {dot!r}")
    actor, counter = dot
    return check_actor(actor), check_count(counter, minimum=1, what="dot counter")


class CausalContext:
    """An immutable, EXACT set of dots: a compact version vector plus a dot cloud.

    The vector holds, per actor, n such that dots (actor, 1..n) are all present; the cloud
    holds the other dots (always > n + 1, so the form is canonical and compact). Raises
    TypeError/ValueError for malformed actors, counters or dots.
    """

    __slots__ = ("_vv", "_cloud", "_cloud_max", "_key")
    _vv: dict[str, int]
    _cloud: frozenset[Dot]
    _cloud_max: dict[str, int]
    _key: tuple[tuple[tuple[str, int], ...], tuple[Dot, ...]]

    def __init__(self, vector: Mapping[str, int] | None = None, cloud: Iterable[Dot] = ()) -> None:
        vv = counts_from_mapping(vector)
        self._init(vv, {check_dot(d) for d in cloud})

    def _init(self, vv: dict[str, int], cloud: set[Dot]) -> None:
        by_actor: dict[str, list[int]] = {}
        for actor, counter in cloud:
            if counter > vv.get(actor, 0):
                by_actor.setdefault(actor, []).append(counter)
        rest: list[Dot] = []
        cloud_max: dict[str, int] = {}
        for actor, counters in by_actor.items():
            top = vv.get(actor, 0)
            counters.sort()
            i = 0
            while i < len(counters) and counters[i] == top + 1:  # compact the contiguous run
                top += 1
                i += 1
            if top:
                vv[actor] = top
            if i < len(counters):
                rest.extend((actor, c) for c in counters[i:])
                cloud_max[actor] = counters[-1]
        vv = {a: vv[a] for a in sorted(vv)}
        rest.sort()
        object.__setattr__(self, "_vv", vv)
        object.__setattr__(self, "_cloud", frozenset(rest))
        object.__setattr__(self, "_cloud_max", cloud_max)
        object.__setattr__(self, "_key", (tuple(vv.items()), tuple(rest)))

    @classmethod
    def _new(cls, vv: dict[str, int], cloud: set[Dot]) -> CausalContext:
        ctx = cls.__new__(cls)
        ctx._init(vv, cloud)
        return ctx

    @classmethod
    def from_dots(cls, dots: Iterable[Dot]) -> CausalContext:
        """Return the context holding exactly `dots`."""
        return cls(None, dots)

    @property
    def vector(self) -> dict[str, int]:
        """The compact prefix: actor -> n where (actor, 1..n) are all in the set (a copy)."""
        return dict(self._vv)

    @property
    def cloud(self) -> frozenset[Dot]:
        """The dots not covered by the compact prefix."""
        return self._cloud

    def contains(self, dot: Dot) -> bool:
        """Return True if `dot` is in the set."""
        actor, counter = dot
        return counter <= self._vv.get(actor, 0) or dot in self._cloud

    def __contains__(self, dot: object) -> bool:
        if not isinstance(dot, tuple) or len(dot) != 2:
            return False
        return self.contains(dot)

    def max(self, actor: str) -> int:
        """Return the highest counter of `actor` in the set (prefix or cloud), 0 if none."""
        return max(self._vv.get(actor, 0), self._cloud_max.get(actor, 0))

    def add(self, dot: Dot) -> CausalContext:
        """Return a new context with `dot` added. Raises TypeError/ValueError if invalid."""
        dot = check_dot(dot)
        if self.contains(dot):
            return self
        return CausalContext._new(dict(self._vv), set(self._cloud) | {dot})

    def union(self, other: CausalContext) -> CausalContext:
        """Return the union of both sets of dots (compacted)."""
        if not isinstance(other, CausalContext):
            raise TypeError(f"cannot union CausalContext with {type(other).__name__}")
        if not other._key[0] and not other._cloud:
            return self
        if not self._key[0] and not self._cloud:
            return other
        vv = dict(self._vv)
        for actor, n in other._vv.items():
            if n > vv.get(actor, 0):
                vv[actor] = n
        return CausalContext._new(vv, set(self._cloud) | other._cloud)

    def without(self, actor: str) -> CausalContext:
        """Return the set without any dot of `actor` (pruning)."""
        if actor not in self._vv and actor not in self._cloud_max:
            return self
        vv = {a: n for a, n in self._vv.items() if a != actor}
        return CausalContext._new(vv, {d for d in self._cloud if d[0] != actor})

    def dots(self) -> Iterator[Dot]:
        """Iterate every dot in the set (prefix dots first, by actor, then the cloud)."""
        for actor, n in self._vv.items():
            for counter in range(1, n + 1):
                yield (actor, counter)
        yield from sorted(self._cloud)

    @property
    def is_empty(self) -> bool:
        """True if the set holds no dot."""
        return not self._vv and not self._cloud

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CausalContext):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return hash(("cc", self._key))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CausalContext is immutable")

    def __repr__(self) -> str:
        return f"CausalContext({self._vv!r}, {sorted(self._cloud)!r})"

    def _body(self) -> list[object]:
        return [pairs(self._vv), [[a, c] for a, c in sorted(self._cloud)]]

    @classmethod
    def _from_body(cls, body: object) -> CausalContext:
        vv_body, cloud_body = two(body)
        if type(cloud_body) is not list:
            raise ValueError("cloud must be a list of dots")
        cloud = {check_dot(tuple(two(d))) for d in cloud_body}
        if len(cloud) != len(cloud_body):
            raise ValueError("duplicate dot in cloud")
        return cls(pairs_to_dict(vv_body), cloud)
