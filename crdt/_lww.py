"""Decides which write a register holds: causality first, then HLC stamp, then actor, then bytes.
Never reads a clock or picks an actor: writes carry the caller's stamp and actor.
Rules: multi-value register (Shapiro et al. 2011, "A comprehensive study of CRDTs", MV-Register)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Self

import msgpack  # type: ignore[import-untyped]

from crdt._clock import VectorClock
from crdt._codec import (
    CRDT,
    canonical_value,
    check_actor,
    pack,
    pairs,
    pairs_to_dict,
    sorted_by_bytes,
)
from crdt._hlc import Timestamp
from crdt._invariants import InvariantViolation

__all__ = ["LWWRegister"]

_SCALARS = (type(None), bool, int, float, str, bytes)


@dataclass(frozen=True, slots=True)
class _Write:
    """One write: its causal clock, HLC stamp, writer and the canonical bytes of its value."""

    clock: VectorClock
    stamp: Timestamp
    actor: str
    value_bytes: bytes
    canonical: Any = field(compare=False, hash=False, repr=False)

    @property
    def rank(self) -> tuple[Timestamp, str, bytes]:
        return (self.stamp, self.actor, self.value_bytes)

    def wire(self) -> list[object]:
        return [pairs(self.clock.value()), self.stamp.to_list(), self.actor, self.canonical]

    def read(self) -> Any:
        # Containers are rebuilt from bytes so callers never share our (immutable) state.
        if type(self.canonical) in _SCALARS:
            return self.canonical
        return msgpack.unpackb(self.value_bytes, raw=False, use_list=True)


def _write(clock: VectorClock, stamp: Timestamp, actor: str, value: object) -> _Write:
    canonical = canonical_value(value)
    return _Write(clock, stamp, check_actor(actor), pack(canonical), canonical)


def _maximal(writes: Iterable[_Write]) -> frozenset[_Write]:
    """Keep the writes whose clock is not strictly below another write's clock."""
    unique = list(set(writes))
    keep = []
    for w in unique:
        dominated = False
        for o in unique:
            if o is not w and w.clock != o.clock and w.clock <= o.clock:
                dominated = True
                break
        if not dominated:
            keep.append(w)
    return frozenset(keep)


class LWWRegister(CRDT, tag="lww"):
    """An immutable last-writer-wins register kept as the set of causally maximal writes.

    State: writes (vector clock, Timestamp, actor, value), none strictly dominated by
    another. The read is the write maximal by (stamp, actor, canonical value bytes) among
    them, so a causally newer write wins even with an older stamp, and stamps then actors
    only break ties between concurrent writes. Values: None, bool, int, float, str, bytes,
    list, dict with str keys (nested, at most 32 deep).
    """

    __slots__ = ("_writes", "_winner")
    _writes: frozenset[_Write]
    _winner: _Write | None

    def __init__(self) -> None:
        self._init(frozenset())

    def _init(self, writes: frozenset[_Write]) -> None:
        object.__setattr__(self, "_writes", writes)
        winner = max(writes, key=lambda w: w.rank) if writes else None
        object.__setattr__(self, "_winner", winner)

    @classmethod
    def _new(cls, writes: frozenset[_Write]) -> LWWRegister:
        reg = cls.__new__(cls)
        reg._init(writes)
        return reg

    @classmethod
    def empty(cls) -> Self:
        """Return the register that was never written."""
        return cls()

    def set(self, value: object, *, actor: str, stamp: Timestamp) -> LWWRegister:
        """Return the DELTA of writing `value` as `actor` at HLC `stamp`.

        The delta's clock is the join of every write seen here, incremented at `actor`, so
        it supersedes all of them once merged. Raises TypeError for an unsupported value
        type or a non-Timestamp stamp, ValueError for an empty actor, an out-of-range int
        or nesting deeper than 32.
        """
        if not isinstance(stamp, Timestamp):
            raise TypeError(f"stamp must be a Timestamp, got {type(stamp).__name__}")
        check_actor(actor)
        seen = self.clock
        clock = seen.merge(seen.increment(actor))
        return LWWRegister._new(frozenset([_write(clock, stamp, actor, value)]))

    def merge(self, other: LWWRegister) -> LWWRegister:
        """Return the join: union of writes minus strictly dominated ones. TypeError if
        `other` is not an LWWRegister."""
        self._check_peer(other)
        if not other._writes or other._writes == self._writes:
            return self
        if not self._writes:
            return other
        return LWWRegister._new(_maximal(self._writes | other._writes))

    def prune(self, removed: str, into: str) -> LWWRegister:
        """Return the register with `removed`'s entry dropped from every write's clock.

        When the writes held all carry the same counter for `removed`, dropping it keeps
        their order, so every write stays. Otherwise dropping it could make one write
        dominate another it was concurrent with, so the register collapses to its winner
        with the join of all clocks (minus `removed`), which dominates them all. value()
        is unchanged either way; `into` is checked only (see `crdt._prune`).
        """
        check_actor(removed)
        check_actor(into)
        counts = {w.clock.get(removed) for w in self._writes}
        if removed == into or counts <= {0}:
            return self
        if len(counts) == 1:
            writes = [replace(w, clock=w.clock.prune(removed, into)) for w in self._writes]
            return LWWRegister._new(frozenset(writes))
        if self._winner is None:
            raise InvariantViolation("a register holding writes has no winner")
        winner = replace(self._winner, clock=self.clock.prune(removed, into))
        return LWWRegister._new(frozenset([winner]))

    def value(self) -> Any:
        """Return the winning value (a fresh copy for lists and dicts), None if empty."""
        return None if self._winner is None else self._winner.read()

    def values(self) -> list[Any]:
        """Every value held: the winner's and those of the concurrent writes it beat (the
        siblings of a multi-value register), in rank order, winner last."""
        return [w.read() for w in sorted(self._writes, key=lambda w: w.rank)]

    @property
    def clock(self) -> VectorClock:
        """The join of the clocks of all writes held (everything this state has seen)."""
        joined = VectorClock()
        for w in self._writes:
            joined = joined.merge(w.clock)
        return joined

    @property
    def stamp(self) -> Timestamp | None:
        """The HLC stamp of the winning write, None if empty."""
        return None if self._winner is None else self._winner.stamp

    @property
    def actor(self) -> str | None:
        """The actor of the winning write, None if empty."""
        return None if self._winner is None else self._winner.actor

    @property
    def is_empty(self) -> bool:
        """True if no write is held."""
        return not self._writes

    @property
    def conflicts(self) -> int:
        """How many concurrent writes are held (1 when settled, 0 when empty)."""
        return len(self._writes)

    def __repr__(self) -> str:
        if self._winner is None:
            return "LWWRegister()"
        return (
            f"LWWRegister(value={self._winner.read()!r}, stamp={self._winner.stamp!r}, "
            f"actor={self._winner.actor!r}, conflicts={len(self._writes)})"
        )

    def _body(self) -> list[object]:
        return sorted_by_bytes(w.wire() for w in self._writes)

    @classmethod
    def _from_body(cls, body: object) -> Self:
        if type(body) is not list:
            raise ValueError("lww body must be a list of writes")
        writes = []
        for item in body:
            if type(item) is not list or len(item) != 4:
                raise ValueError("a write must be [clock, stamp, actor, value]")
            clock_body, stamp_body, actor, value = item
            writes.append(
                _write(
                    VectorClock(pairs_to_dict(clock_body)),
                    Timestamp.from_list(stamp_body),
                    actor,
                    value,
                )
            )
        reg = cls.__new__(cls)
        reg._init(_maximal(writes))
        return reg
