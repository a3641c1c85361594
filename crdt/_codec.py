"""Decides the shared CRDT protocol and the canonical msgpack form `[TAG, VERSION, body]`.
Never does I/O, never reads time, never accepts a non-canonical encoding as valid input.
Rules: riak_dt behaviour (new/value/merge/equal/to_binary) and msgpack spec, canonical subset.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self

import msgpack  # type: ignore[import-untyped]

__all__ = [
    "COUNTER_MAX",
    "CRDT",
    "LOGICAL_MAX",
    "WALL_MS_MAX",
    "DecodeError",
    "InvalidTextError",
    "decode",
]

# msgpack integers span int64 .. uint64; anything outside cannot be encoded.
INT_MIN = -(2**63)
UINT_MAX = 2**64 - 1

# The ranges every layer agrees on (kernel, wire and store), decided here once:
# - counters (vector clock entries, dot counters, PN-Counter totals, and the replication
#   sequence numbers and version vectors built on them) fit SQLite's signed 64-bit INTEGER
#   and the proto's uint64;
COUNTER_MAX = 2**63 - 1
# - HLC wall_ms fits SQLite INTEGER and the proto's uint64 `hlc_wall_ms`;
WALL_MS_MAX = 2**63 - 1
# - HLC logical fits the proto's uint32 `hlc_logical` (proto/regionsync/v1/replication.proto).
LOGICAL_MAX = 2**32 - 1
# Nesting bound for register values, far below msgpack's and Python's recursion limits.
MAX_DEPTH = 32

# What a body decoder may raise on a malformed (but well-formed msgpack) body.
_BODY_ERRORS = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    ArithmeticError,
    RecursionError,
)

_REGISTRY: dict[str, type[CRDT]] = {}


class DecodeError(ValueError):
    """Bytes are not the canonical encoding of a state of the expected type.

    Raised by `CRDT.from_bytes` and `crdt.decode` for bad msgpack, unknown or wrong tag,
    unsupported version, wrong shapes or types, out-of-range counters, or a well-formed but
    non-canonical encoding. It is always the peer's (or the store's) fault, never the caller's.
    """


class InvalidTextError(ValueError):
    """A str given to the kernel is not valid Unicode text (it holds a lone surrogate such as
    "\\ud83d"), so it has no UTF-8 form and could never be encoded by `to_bytes`.

    Raised when the str enters the kernel (actors, OR-Set elements, register values and
    their dict keys), never later. It is the caller's fault. Subclass of ValueError.
    """


class CRDT(ABC):
    """The protocol every state-based CRDT in `crdt` implements (an ABC).

    Instances are immutable. Mutators live on the concrete types, take actors and stamps as
    arguments and return a delta (itself a state of the same type) to be merged. Equality is
    structural and defined as equality of canonical encodings, so `a == b` iff
    `a.to_bytes() == b.to_bytes()`, and `hash` agrees with it.
    """

    __slots__ = ("_bytes_cache",)
    _bytes_cache: bytes | None

    TAG: ClassVar[str]
    VERSION: ClassVar[int] = 1

    def __init_subclass__(cls, *, tag: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if tag is not None:
            if tag in _REGISTRY:
                raise RuntimeError(f"CRDT tag {tag!r} registered twice")
            cls.TAG = tag
            _REGISTRY[tag] = cls

    # -- protocol -------------------------------------------------------------------------

    @classmethod
    @abstractmethod
    def empty(cls) -> Self:
        """Return the bottom state (the identity of `merge`)."""

    @abstractmethod
    def merge(self, other: Self) -> Self:
        """Return the join of `self` and `other`; pure. Raises TypeError on another type."""

    @abstractmethod
    def value(self) -> Any:
        """Return the query value of this state (type-specific, never shares mutable state)."""

    @abstractmethod
    def _body(self) -> Any:
        """Return the canonical msgpack-ready body (lists, sorted pairs, no dicts)."""

    @classmethod
    @abstractmethod
    def _from_body(cls, body: Any) -> Self:
        """Build a state from a decoded body; raise ValueError/TypeError/... when malformed."""

    # -- shared machinery -----------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Return the canonical msgpack encoding `[TAG, VERSION, body]` of this state.

        Equal states give equal bytes regardless of construction or merge order.
        """
        try:
            cached: bytes | None = self._bytes_cache
        except AttributeError:
            cached = None
        if cached is None:
            cached = pack([self.TAG, self.VERSION, self._body()])
            # A cache of a pure function of immutable state: not an observable mutation.
            object.__setattr__(self, "_bytes_cache", cached)
        return cached

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        """Decode `data` produced by `to_bytes` of this class.

        Accepts bytes, bytearray or memoryview (TypeError for anything else). Raises
        DecodeError for malformed input, another type's tag, or a non-canonical encoding.
        """
        tag, version, body, raw = _unpack(data)
        if tag != cls.TAG:
            raise DecodeError(f"expected tag {cls.TAG!r}, got {tag!r}")
        return cls._decode_checked(version, body, raw)

    @classmethod
    def _decode_checked(cls, version: object, body: object, raw: bytes) -> Self:
        if type(version) is not int or version != cls.VERSION:
            raise DecodeError(f"{cls.TAG}: unsupported version {version!r}")
        try:
            state = cls._from_body(body)
            encoded = state.to_bytes()
        except DecodeError:
            raise
        except _BODY_ERRORS as exc:
            raise DecodeError(f"{cls.TAG}: malformed body: {exc}") from exc
        if encoded != raw:
            raise DecodeError(f"{cls.TAG}: non-canonical encoding")
        return state

    def _check_peer(self, other: object) -> None:
        if type(other) is not type(self):
            raise TypeError(f"cannot merge {type(self).__name__} with {type(other).__name__}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, CRDT)
        return self.to_bytes() == other.to_bytes()

    def __hash__(self) -> int:
        return hash((self.TAG, self.to_bytes()))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")


def decode(data: bytes) -> CRDT:
    """Decode any CRDT state by its tag: `[TAG, VERSION, body]` -> VectorClock, ORSet, ...

    Accepts bytes, bytearray or memoryview (TypeError otherwise). Raises DecodeError for
    malformed input, an unknown tag, or a non-canonical encoding.
    """
    tag, version, body, raw = _unpack(data)
    cls = _REGISTRY.get(tag) if type(tag) is str else None
    if cls is None:
        raise DecodeError(f"unknown CRDT tag {tag!r}")
    return cls._decode_checked(version, body, raw)


def _unpack(data: bytes) -> tuple[object, object, object, bytes]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"expected bytes, got {type(data).__name__}")
    raw = bytes(data)
    try:
        obj = msgpack.unpackb(raw, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises a zoo of types; all mean "bad bytes"
        raise DecodeError(f"invalid msgpack: {exc}") from exc
    if type(obj) is not list or len(obj) != 3:
        raise DecodeError("expected a 3-element array [tag, version, body]")
    tag, version, body = obj
    return tag, version, body, raw


# -- canonical helpers shared by the types --------------------------------------------------


def pack(obj: object) -> bytes:
    """Pack an already-canonical structure (lists, sorted maps) with bin types."""
    packed: bytes = msgpack.packb(obj, use_bin_type=True)
    return packed


def check_text(text: str, *, what: str = "str") -> str:
    """Return `text` if it has a UTF-8 form (no lone surrogates), else raise InvalidTextError.

    msgpack encodes str as UTF-8 (msgpack spec, str format family).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidTextError(
            f"{what} {text[:40]!r} is not valid Unicode text: {exc.reason} at {exc.start}"
        ) from None
    return text


def check_actor(actor: object) -> str:
    """Return `actor` if it is a non-empty str, else raise TypeError/ValueError.

    Raises InvalidTextError (a ValueError) for a str with a lone surrogate.
    """
    if type(actor) is not str:
        raise TypeError(f"actor must be str, got {type(actor).__name__}")
    if not actor:
        raise ValueError("actor must be a non-empty string")
    return check_text(actor, what="actor")


def check_count(
    n: object, *, minimum: int = 0, maximum: int = COUNTER_MAX, what: str = "counter"
) -> int:
    """Return `n` if it is an int (not bool) in [minimum, maximum], else raise ValueError.

    `maximum` defaults to COUNTER_MAX (2**63-1).
    """
    if type(n) is not int:
        raise ValueError(f"{what} must be int, got {type(n).__name__}")
    if n < minimum or n > maximum:
        raise ValueError(f"{what} {n} outside [{minimum}, {maximum}]")
    return n


def counts_from_mapping(entries: Mapping[str, int] | None) -> dict[str, int]:
    """Validate a mapping actor -> count >= 0; return it sorted by actor with zeros dropped."""
    if entries is None:
        return {}
    if not isinstance(entries, Mapping):
        raise TypeError(f"expected a mapping, got {type(entries).__name__}")
    out: dict[str, int] = {}
    for actor in sorted(check_actor(a) for a in entries):
        n = check_count(entries[actor])
        if n:
            out[actor] = n
    return out


def pairs(entries: Mapping[str, int]) -> list[list[object]]:
    """Encode a mapping actor -> int as a list of `[actor, n]` sorted by actor."""
    return [[a, entries[a]] for a in sorted(entries)]


def pairs_to_dict(body: object) -> dict[str, int]:
    """Decode a list of `[actor, n]` pairs with n >= 1 and unique actors."""
    if type(body) is not list:
        raise ValueError("expected a list of [actor, count] pairs")
    out: dict[str, int] = {}
    for item in body:
        actor, n = two(item)
        check_actor(actor)
        if actor in out:
            raise ValueError(f"duplicate actor {actor!r}")
        out[actor] = check_count(n, minimum=1)
    return out


def two(item: object) -> tuple[Any, Any]:
    """Unpack a 2-element list, else raise ValueError."""
    if type(item) is not list or len(item) != 2:
        raise ValueError("expected a 2-element array")
    return item[0], item[1]


def canonical_value(value: object, _depth: int = 0) -> Any:
    """Return a canonical copy of a register value: dict keys sorted, lists copied.

    Accepts None, bool, int (int64..uint64), float, str, bytes, list and dict with str keys,
    nested at most MAX_DEPTH deep. Raises TypeError for other types (tuples, sets, objects,
    subclasses), ValueError for out-of-range ints or too deep nesting, and InvalidTextError
    (a ValueError) for a str value or key with a lone surrogate.
    """
    kind = type(value)
    if kind is str:
        assert isinstance(value, str)
        return check_text(value, what="str value")
    if value is None or kind is bool or kind is bytes or kind is float:
        return value
    if kind is int:
        assert isinstance(value, int)
        if value < INT_MIN or value > UINT_MAX:
            raise ValueError(f"int {value} outside the msgpack range")
        return value
    if kind is list or kind is dict:
        if _depth >= MAX_DEPTH:
            raise ValueError(f"value nested deeper than {MAX_DEPTH}")
        if isinstance(value, list):
            return [canonical_value(v, _depth + 1) for v in value]
        assert isinstance(value, dict)
        for key in value:
            if type(key) is not str:
                raise TypeError(f"dict keys must be str, got {type(key).__name__}")
            check_text(key, what="dict key")
        return {k: canonical_value(value[k], _depth + 1) for k in sorted(value)}
    raise TypeError(f"unsupported value type {kind.__name__}")


def sorted_by_bytes(items: Iterable[object]) -> list[object]:
    """Sort msgpack-ready items by their packed bytes (a total, type-agnostic order)."""
    return [obj for _, obj in sorted(((pack(o), o) for o in items), key=lambda p: p[0])]
