"""Decides set membership under concurrent add and remove: an add not seen by a remove wins.
Never keeps tombstones and never reads a clock; dots come from the caller's actor.
Rules: Almeida, Shoker, Baquero 2018 "Delta State Replicated Data Types" (AWORSet); Bieniusa 2012.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Self

from crdt._clock import CausalContext, Dot, check_dot
from crdt._codec import CRDT, INT_MIN, UINT_MAX, check_actor, check_text, two
from crdt._invariants import InvariantViolation

__all__ = ["ORSet"]

Element = str | int | bytes

_EMPTY: frozenset[Dot] = frozenset()
_RANK = {int: 0, str: 1, bytes: 2}


def check_element(element: object) -> Element:
    """Return `element` if it is a str, int (not bool, msgpack range) or bytes.

    Raises TypeError for other types (including bool and subclasses), ValueError for an
    int outside int64..uint64, InvalidTextError (a ValueError) for a str with a lone
    surrogate.
    """
    kind = type(element)
    if kind is str:
        assert isinstance(element, str)
        return check_text(element, what="element")
    if kind is bytes:
        assert isinstance(element, bytes)
        return element
    if kind is int:
        assert isinstance(element, int)
        if element < INT_MIN or element > UINT_MAX:
            raise ValueError(f"int element {element} outside the msgpack range")
        return element
    raise TypeError(f"ORSet elements must be str, int or bytes, got {kind.__name__}")


def element_key(element: Element) -> tuple[int, Element]:
    """Total order over mixed elements: ints, then strs, then bytes."""
    return (_RANK[type(element)], element)


_FEW_DOTS = 64  # a context of at most this many dots is joined by its dots (ORSet.merge)


def _few_dots(ctx: CausalContext) -> frozenset[Dot] | None:
    """Every dot of `ctx` if it holds at most `_FEW_DOTS` of them, else None."""
    vector = ctx.vector
    if sum(vector.values()) + len(ctx.cloud) > _FEW_DOTS:
        return None
    return frozenset(ctx.dots())


class ORSet(CRDT, tag="orset"):
    """An immutable add-wins observed-remove set in dot-store form.

    State: `entries` element -> non-empty frozenset of dots (each dot under one element),
    and a `context` (CausalContext) holding every dot ever seen, including all entry dots.
    Elements are str, int (not bool) or bytes. The constructor raises TypeError/ValueError
    for bad elements or dots, and ValueError if a dot is outside the context or shared.
    """

    __slots__ = ("_entries", "_context")
    _entries: dict[Element, frozenset[Dot]]
    _context: CausalContext

    def __init__(
        self,
        entries: Mapping[Element, frozenset[Dot]] | None = None,
        context: CausalContext | None = None,
    ) -> None:
        ctx = CausalContext() if context is None else context
        if not isinstance(ctx, CausalContext):
            raise TypeError(f"context must be a CausalContext, got {type(ctx).__name__}")
        clean: dict[Element, frozenset[Dot]] = {}
        owner: dict[Dot, Element] = {}
        for element, dots in (entries or {}).items():
            check_element(element)
            checked = frozenset(check_dot(tuple(d)) for d in dots)
            for dot in checked:
                if not ctx.contains(dot):
                    raise ValueError(f"dot {dot} of {element!r} is not in the context")
                if dot in owner:
                    raise ValueError(f"dot {dot} belongs to {owner[dot]!r} and {element!r}")
                owner[dot] = element
            if checked:
                clean[element] = checked
        self._init(clean, ctx)

    def _init(self, entries: dict[Element, frozenset[Dot]], context: CausalContext) -> None:
        object.__setattr__(self, "_entries", entries)
        object.__setattr__(self, "_context", context)

    @classmethod
    def _new(cls, entries: dict[Element, frozenset[Dot]], context: CausalContext) -> ORSet:
        s = cls.__new__(cls)
        s._init(entries, context)
        return s

    @classmethod
    def empty(cls) -> Self:
        """Return the empty set with an empty context."""
        return cls()

    # -- mutators (return deltas) -----------------------------------------------------------

    def add(self, element: Element, *, actor: str) -> ORSet:
        """Return the DELTA of adding `element` as `actor`.

        New dot (actor, context.max(actor) + 1); delta entries {element: {dot}}, delta
        context = {dot} | the dots of `element` seen here (so the add also supersedes them).
        Raises TypeError/ValueError for a bad element or actor (InvalidTextError for a str
        with a lone surrogate).
        """
        check_element(element)
        check_actor(actor)
        dot: Dot = (actor, self._context.max(actor) + 1)
        if self._context.contains(dot):  # a seen dot: a merge would drop this add
            raise InvariantViolation(f"new dot {dot} of {element!r} is already in the context")
        seen = self._entries.get(element, _EMPTY)
        ctx = CausalContext.from_dots(seen | {dot})
        if not ctx.contains(dot):  # a dot outside the context: a later add could reuse it
            raise InvariantViolation(f"new dot {dot} of {element!r} is not in the delta's context")
        return ORSet._new({element: frozenset([dot])}, ctx)

    def remove(self, element: Element) -> ORSet:
        """Return the DELTA of removing `element`: no entries, context = its dots seen here.

        Removing an absent element returns an empty delta. Raises TypeError/ValueError for
        a bad element.
        """
        check_element(element)
        return ORSet._new({}, CausalContext.from_dots(self._entries.get(element, _EMPTY)))

    # -- lattice ------------------------------------------------------------------------------

    def merge(self, other: ORSet) -> ORSet:
        """Return the dot-store join: a dot survives if both hold it, or one holds it and the
        other's context has not seen it; contexts unite. TypeError if `other` is not an ORSet.

        A small `other` (a delta: fewer entries, at most `_FEW_DOTS` dots in its context)
        leaves every element of `self` that holds none of those dots as it is, so only
        the others are joined dot by dot; the result is the same.
        """
        self._check_peer(other)
        mine, theirs = self._entries, other._entries
        my_ctx, their_ctx = self._context, other._context
        seen = _few_dots(their_ctx) if len(theirs) < len(mine) else None
        out: dict[Element, frozenset[Dot]] = {} if seen is None else dict(mine)
        if seen is None:
            touched = mine.keys() | theirs.keys()
        else:
            touched = {e for e, dots in mine.items() if not seen.isdisjoint(dots)} | theirs.keys()
        for element in touched:
            a = mine.get(element, _EMPTY)
            b = theirs.get(element, _EMPTY)
            kept = (
                (a & b)
                | {d for d in a - b if not their_ctx.contains(d)}
                | {d for d in b - a if not my_ctx.contains(d)}
            )
            if kept:
                out[element] = frozenset(kept)
            else:
                out.pop(element, None)
        return ORSet._new(out, my_ctx.union(their_ctx))

    def prune(self, removed: str, into: str) -> ORSet:
        """Return the set with `removed`'s dots dropped from its context, or itself while
        an element present holds a dot of `removed` (see `crdt._prune`).

        Entry dots are the elements' identities (tenant and endpoint generations), so they
        are never rewritten; and while one is present, a replica that has removed it needs
        the whole of `removed`'s context to drop it again from a replica that has not.
        Once none is present in states the caller merges (all of them have seen every
        removal), the context no longer decides anything about `removed`. Members are
        unchanged; `into` is checked only.
        """
        check_actor(removed)
        check_actor(into)
        if removed == into or self._context.max(removed) == 0:
            return self
        if any(d[0] == removed for dots in self._entries.values() for d in dots):
            return self
        return ORSet._new(self._entries, self._context.without(removed))

    def strip(self, removed: str) -> ORSet:
        """Return the set without any dot of `removed`, in its entries (an element left
        with no dot is gone) or its context: how a replica that pruned `removed` from a
        context holding none of its dots reads a state that still holds some (each such
        dot was removed there, and a retired actor adds no more). Not a join
        homomorphism on its own: see `crdt._prune` for when a caller may use it."""
        check_actor(removed)
        if self._context.max(removed) == 0:
            return self
        entries: dict[Element, frozenset[Dot]] = {}
        for element, dots in self._entries.items():
            kept = frozenset(d for d in dots if d[0] != removed)
            if kept:
                entries[element] = kept
        return ORSet._new(entries, self._context.without(removed))

    # -- queries ------------------------------------------------------------------------------

    def value(self) -> frozenset[Element]:
        """Return the elements present."""
        return frozenset(self._entries)

    def elements(self) -> list[Element]:
        """Return the elements present, sorted: ints, then strs, then bytes."""
        try:  # one type (the usual case): its natural order is element_key's
            return sorted(self._entries)
        except TypeError:  # mixed types cannot be compared with each other
            return sorted(self._entries, key=element_key)

    def __contains__(self, element: object) -> bool:
        if type(element) is bool:
            return False
        return element in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Element]:
        return iter(self.elements())

    @property
    def entries(self) -> Mapping[Element, frozenset[Dot]]:
        """Read-only view element -> dots supporting it."""
        return MappingProxyType(self._entries)

    @property
    def context(self) -> CausalContext:
        """Every dot this state has seen (added, and possibly since removed)."""
        return self._context

    def __repr__(self) -> str:
        return f"ORSet({self.elements()!r})"

    # -- codec --------------------------------------------------------------------------------

    def _body(self) -> list[object]:
        by_element, entries = self._entries, []
        for element in self.elements():
            dots = by_element[element]
            if len(dots) == 1:  # the usual case: one add, nothing to sort
                ((a, c),) = dots
                entries.append([element, [[a, c]]])
            else:
                entries.append([element, [[a, c] for a, c in sorted(dots)]])
        return [entries, self._context._body()]

    @classmethod
    def _from_body(cls, body: object) -> Self:
        entries_body, ctx_body = two(body)
        if type(entries_body) is not list:
            raise ValueError("orset entries must be a list")
        entries: dict[Element, frozenset[Dot]] = {}
        for item in entries_body:
            element, dots_body = two(item)
            check_element(element)
            if element in entries:
                raise ValueError(f"duplicate element {element!r}")
            if type(dots_body) is not list or not dots_body:
                raise ValueError("element dots must be a non-empty list")
            entries[element] = frozenset(check_dot(tuple(two(d))) for d in dots_body)
        return cls(entries, CausalContext._from_body(ctx_body))
