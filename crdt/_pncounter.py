"""Decides a counter's value under concurrent increments and decrements from many actors.
Never reads a clock, never loses or double counts an actor's contribution on re-delivery.
Rules: Shapiro, Preguica, Baquero, Zawirski 2011, "A comprehensive study of CRDTs" (PN-Counter).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

from crdt._codec import (
    CRDT,
    check_actor,
    check_count,
    counts_from_mapping,
    pairs,
    pairs_to_dict,
    two,
)

__all__ = ["RETIRED", "PNCounter"]

# The prefix of a retired actor's entry: ``RETIRED + actor`` holds that actor's totals once
# it is retired (`PNCounter.retire`) and absorbs its plain entry in every merge, by max. An
# actor's count is max(totals[actor], totals[RETIRED + actor]) and the entry is kept under
# the retired name once either state has it: the product of a max-lattice (the count) and
# a flag lattice (retired), so the merge stays a join, and a replica that retired the
# actor and one that did not never count its totals twice. ``~`` is in no actor a node
# writes as (region names are ``[a-z0-9-]``).
RETIRED = "~retired:"


def _absorb(totals: dict[str, int]) -> dict[str, int]:
    """``totals`` with every actor that has a retired entry folded into it (by max)."""
    retired = [k for k in totals if k.startswith(RETIRED)]
    if not retired:
        return totals
    out = dict(totals)
    for k in retired:
        plain = k[len(RETIRED) :]
        if plain in out:
            out[k] = max(out[k], out.pop(plain))
    return out


def _count(totals: dict[str, int], actor: str) -> int:
    return max(totals.get(actor, 0), totals.get(RETIRED + actor, 0))


def _join(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for actor, n in b.items():
        if n > out.get(actor, 0):
            out[actor] = n
    out = _absorb(out)
    return {k: out[k] for k in sorted(out)}


def _retire(totals: dict[str, int], actor: str) -> dict[str, int]:
    if actor not in totals:
        return totals
    out = dict(totals)
    n = out.pop(actor)
    out[RETIRED + actor] = max(n, out.get(RETIRED + actor, 0))
    return {k: out[k] for k in sorted(out)}


def _collapse(totals: dict[str, int], removed: str, into: str) -> dict[str, int]:
    if removed not in totals:
        return totals
    out = {a: n for a, n in totals.items() if a != removed}
    if RETIRED + into in out:  # `into`'s count lives under its retired entry
        into = RETIRED + into
    out[into] = check_count(out.get(into, 0) + totals[removed], what="collapsed total")
    return {k: out[k] for k in sorted(out)}


def _check_amount(n: object) -> int:
    if type(n) is not int or n < 1:
        raise ValueError(f"amount must be a positive int, got {n!r}")
    return n


class PNCounter(CRDT, tag="pnc"):
    """An immutable counter: P (increments) and N (decrements), each actor -> total >= 0.

    `value() = sum(P) - sum(N)`. The constructor raises TypeError/ValueError for bad
    actors or counts (each total must fit in [0, COUNTER_MAX = 2**63-1]; InvalidTextError,
    a ValueError, for an actor with a lone surrogate). `value()` is a Python int and, once
    concurrent totals of many actors are merged, may lie outside that range.
    """

    __slots__ = ("_p", "_n")
    _p: dict[str, int]
    _n: dict[str, int]

    def __init__(
        self, p: Mapping[str, int] | None = None, n: Mapping[str, int] | None = None
    ) -> None:
        p_, n_ = _absorb(counts_from_mapping(p)), _absorb(counts_from_mapping(n))
        self._init({k: p_[k] for k in sorted(p_)}, {k: n_[k] for k in sorted(n_)})

    def _init(self, p: dict[str, int], n: dict[str, int]) -> None:
        object.__setattr__(self, "_p", p)
        object.__setattr__(self, "_n", n)

    @classmethod
    def _new(cls, p: dict[str, int], n: dict[str, int]) -> PNCounter:
        c = cls.__new__(cls)
        c._init(p, n)
        return c

    @classmethod
    def empty(cls) -> Self:
        """Return the zero counter."""
        return cls()

    def increment(self, actor: str, n: int = 1) -> PNCounter:
        """Return the DELTA adding `n` (int >= 1) for `actor`: P = {actor: P[actor] + n}.

        Raises ValueError if `n` is not a positive int or the total would exceed
        COUNTER_MAX (2**63-1), TypeError/ValueError for a bad actor.
        """
        check_actor(actor)
        total = check_count(_count(self._p, actor) + _check_amount(n), what="increment total")
        return PNCounter._new({actor: total}, {})

    def decrement(self, actor: str, n: int = 1) -> PNCounter:
        """Return the DELTA subtracting `n` (int >= 1) for `actor`: N = {actor: N[actor] + n}.

        Raises like `increment`.
        """
        check_actor(actor)
        total = check_count(_count(self._n, actor) + _check_amount(n), what="decrement total")
        return PNCounter._new({}, {actor: total})

    def merge(self, other: PNCounter) -> PNCounter:
        """Return the pointwise max of P and of N. TypeError if `other` is not a PNCounter."""
        self._check_peer(other)
        return PNCounter._new(_join(self._p, other._p), _join(self._n, other._n))

    def prune(self, removed: str, into: str) -> PNCounter:
        """Return the counter with `removed`'s totals added to `into`'s (see `crdt._prune`).

        value() is unchanged. Raises ValueError if a collapsed total passes COUNTER_MAX.
        """
        check_actor(removed)
        check_actor(into)
        if removed == into or (removed not in self._p and removed not in self._n):
            return self
        return PNCounter._new(_collapse(self._p, removed, into), _collapse(self._n, removed, into))

    def retire(self, actor: str) -> PNCounter:
        """Return the counter with `actor`'s totals kept under its retired entry
        (``RETIRED + actor``), which absorbs any plain entry of `actor` merged later.

        value() is unchanged, and so is the join with any state that still holds the
        plain entry (max per actor): idempotent, and a join homomorphism with no
        precondition, unlike `prune`. Raises ValueError for an actor that starts with
        ``~`` (a retired entry is never retired again: `prune` folds it instead).
        """
        check_actor(actor)
        if actor.startswith("~"):
            raise ValueError(f"cannot retire {actor!r}")
        if actor not in self._p and actor not in self._n:
            return self
        return PNCounter._new(_retire(self._p, actor), _retire(self._n, actor))

    def value(self) -> int:
        """Return sum(P) - sum(N) (may be negative)."""
        return sum(self._p.values()) - sum(self._n.values())

    @property
    def p(self) -> dict[str, int]:
        """A copy of the increment totals, actor -> int."""
        return dict(self._p)

    @property
    def n(self) -> dict[str, int]:
        """A copy of the decrement totals, actor -> int."""
        return dict(self._n)

    def __repr__(self) -> str:
        return f"PNCounter(p={self._p!r}, n={self._n!r})"

    def _body(self) -> list[object]:
        return [pairs(self._p), pairs(self._n)]

    @classmethod
    def _from_body(cls, body: object) -> Self:
        p_body, n_body = two(body)
        return cls(pairs_to_dict(p_body), pairs_to_dict(n_body))
