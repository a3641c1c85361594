"""The registry's state: key -> CRDT, merged by ``apply``, hashed for convergence checks.

core.registry.Registry adds the reads and the mutators; the keys are core.registry_keys.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Self

from crdt import CRDT, LWWRegister, ORSet, Timestamp, decode

from .generations import changed_members
from .registry_keys import key_type
from .registry_views import EndpointView

Deltas = dict[str, CRDT]

_MOD = 1 << 256


def _key_digest(key: str, data: bytes) -> int:
    """One non-empty state's part of ``RegistryState.digest``: sha256 over the same
    framing as ``state_hash`` (key and canonical bytes, each length-prefixed)."""
    raw = key.encode()
    h = hashlib.sha256(len(raw).to_bytes(4, "big") + raw + len(data).to_bytes(4, "big") + data)
    return int.from_bytes(h.digest(), "big")


@functools.cache
def _empty_bytes(cls: type[CRDT]) -> bytes:
    """The canonical bytes of ``cls``'s bottom state (a state equal to it is empty)."""
    return cls.empty().to_bytes()


def _part(key: str, state: CRDT | None) -> int:
    """``state``'s part of the digest: 0 when absent or empty."""
    if state is None:
        return 0
    data = state.to_bytes()  # cached on the (immutable) state
    return 0 if data == _empty_bytes(type(state)) else _key_digest(key, data)


def hash_items(items: Iterable[tuple[str, CRDT]]) -> str:
    """``state_hash`` over ``(key, state)`` pairs in key order (empty states skipped)."""
    h = hashlib.sha256()
    for key, state in items:
        data = state.to_bytes()
        if data == _empty_bytes(type(state)):
            continue
        h.update(len(key).to_bytes(4, "big") + key.encode())
        h.update(len(data).to_bytes(4, "big") + data)
    return h.hexdigest()


class RegistryState:
    """In-memory registry state: key -> CRDT, and the caches ``apply`` keeps true."""

    def __init__(self, states: Mapping[str, CRDT] | None = None, digest: int | None = None):
        self._states: dict[str, CRDT] = dict(states or {})
        self._hash: str | None = None
        # sum mod 2**256 of ``_key_digest`` over the non-empty states (``digest``), kept
        # by ``apply``; None: not worked out yet (``from_bytes`` passes it in)
        self._digest: int | None = digest
        self.changes = 0  # ``apply`` calls that changed something (a cached hash's stamp)
        self._sorted_keys: list[str] | None = None  # for state_hash; None: a key was added
        # tenants whose dots the last ``apply`` changed: created, deleted or re-created
        self.tenants_changed: set[str] = set()
        # live endpoint id -> its view, built on first read; ``apply`` drops the views a
        # change can affect (``_forget_views``; delivery reads the view per attempt,
        # ingest per matched endpoint)
        self._views: dict[str, EndpointView] = {}
        # removal records' keys (core.removal): read on every Hello and Ack, never a scan
        self._removal_keys = {k for k in self._states if k.startswith(("x/", "p/"))}

    @classmethod
    def from_bytes(cls, rows: Mapping[str, bytes]) -> Self:
        """Load from stored ``key -> canonical bytes``; raises crdt.DecodeError."""
        states = {k: decode(v) for k, v in rows.items()}
        total = 0  # the digest from the stored bytes (canonical: what to_bytes gives)
        for k, v in rows.items():
            if v != _empty_bytes(type(states[k])):
                total += _key_digest(k, v)
        return cls(states, total % _MOD)

    def _get(self, key: str, cls: type) -> Any:
        state = self._states.get(key)
        return state if state is not None else cls.empty()

    def get(self, key: str, cls: type) -> Any:
        """The state under ``key`` (``cls.empty()`` if none); for modules that keep
        their own keys in this map (core.tokens)."""
        return self._get(key, cls)

    def _set(self, key: str, value: Any, actor: str, stamp: Timestamp) -> tuple[str, CRDT]:
        return key, self._get(key, LWWRegister).set(value, actor=actor, stamp=stamp)

    def apply(self, deltas: Mapping[str, CRDT]) -> dict[str, CRDT]:
        """Merge ``deltas`` into the state; returns ``{key: new state}`` for changed keys.

        Raises TypeError if a delta's type does not match its key.
        """
        changed: dict[str, CRDT] = {}
        olds: dict[str, CRDT | None] = {}
        for key, delta in deltas.items():
            cls = key_type(key)
            if cls is None or not isinstance(delta, cls):
                raise TypeError(f"registry key {key!r} cannot hold {type(delta).__name__}")
            old = self._states.get(key)
            new = delta if old is None else old.merge(delta)
            if new != old:
                if old is None:
                    self._sorted_keys = None
                    if key.startswith(("x/", "p/")):
                        self._removal_keys.add(key)
                if self._digest is not None:
                    self._digest = (self._digest + _part(key, new) - _part(key, old)) % _MOD
                self._states[key] = new
                changed[key] = new
                olds[key] = old
        self.tenants_changed = set()
        if "tenants" in changed:
            old = olds["tenants"]
            before = old if isinstance(old, ORSet) else ORSet.empty()
            self.tenants_changed = changed_members(before, changed["tenants"])  # type: ignore[arg-type]
        if changed:
            self._hash = None
            self.changes += 1
            if self._views:
                self._forget_views(changed, olds)
        return changed

    def replace(self, states: Mapping[str, CRDT]) -> None:
        """Put ``states`` in place of those under their keys: not a merge, for pruning
        (core/pruning.py drops retired actors' entries; values stay). Keeps the caches."""
        for key, new in states.items():
            old = self._states.get(key)
            if old is None:
                self._sorted_keys = None
            if self._digest is not None:
                self._digest = (self._digest + _part(key, new) - _part(key, old)) % _MOD
            self._states[key] = new
        if states:
            self._hash = None
            self.changes += 1
            self._views.clear()

    def _forget_views(self, changed: Mapping[str, CRDT], olds: Mapping[str, CRDT | None]) -> None:
        """Drop the cached views a change can affect, and only those: an endpoint's own
        keys, the endpoints of a tenant set's changed members, and every id an endpoint
        set held before or holds now (a view is cached only while its id is in its
        tenant's endpoint set)."""
        views = self._views
        for key, new in changed.items():
            kind, _, rest = key.partition("/")
            if kind == "e":
                views.pop(rest.partition("/")[0], None)
                continue
            if key == "tenants":
                for tenant in self.tenants_changed:
                    for eid in self._get(f"t/{tenant}/endpoints", ORSet).entries:
                        views.pop(eid, None)
            elif kind == "t" and rest.endswith("/endpoints"):
                old = olds[key]
                before = old.entries if isinstance(old, ORSet) else {}
                for eid in {*before, *new.entries}:  # type: ignore[attr-defined]
                    views.pop(eid, None)

    def state_hash(self) -> str:
        """sha256 hex over the canonical encoding of every non-empty state, keys sorted.

        Equal in every region once they have converged (docs/api.md, GET /v1/cluster).
        """
        if self._hash is None:
            if self._sorted_keys is None:  # kept until a key is added
                self._sorted_keys = sorted(self._states)
            states = self._states
            self._hash = hash_items((key, states[key]) for key in self._sorted_keys)
        return self._hash

    def digest(self) -> str:
        """``registry_digest``: sha256 hex of the sum (mod 2**256) of one sha256 per
        non-empty state, over its key and canonical bytes. Equal in every region once they
        have converged, like ``state_hash``, but independent of order, so ``apply`` keeps
        it (one sha256 per changed key) and reading it is O(1) (issue 42); worked out
        once, O(registry), if the state was not loaded by ``from_bytes``."""
        if self._digest is None:
            self._digest = sum(_part(k, v) for k, v in self._states.items()) % _MOD
        return hashlib.sha256(self._digest.to_bytes(32, "big")).hexdigest()

    def sorted_items(self) -> list[tuple[str, CRDT]]:
        """Every ``(key, state)`` (empty ones too), sorted by key; the copy is one C call,
        so a thread may take it while the event loop applies changes (``state_hash``'s
        cached, off-loop form: runtime/cluster.py)."""
        items = list(self._states.items())
        items.sort(key=lambda kv: kv[0])
        return items

    def cached_hash(self) -> str | None:
        """``state_hash`` if no change came since it was last worked out, else None."""
        return self._hash

    def set_hash(self, value: str, changes: int) -> None:
        """Keep ``value``, the ``state_hash`` worked out (elsewhere) over the state as of
        ``changes``, if nothing changed since."""
        if changes == self.changes:
            self._hash = value

    def __len__(self) -> int:
        return len(self._states)

    def states(self) -> dict[str, CRDT]:
        """Every non-empty state, ``key -> CRDT`` (a shallow copy; states are immutable).
        O(registry): for a few keys use ``state``, to walk them ``non_empty``."""
        return dict(self.non_empty())

    def state(self, key: str) -> CRDT | None:
        """The non-empty state under ``key``, or None (absent or empty); O(1), no copy."""
        v = self._states.get(key)
        return None if v is None or v.to_bytes() == _empty_bytes(type(v)) else v

    def non_empty(self) -> Iterator[tuple[str, CRDT]]:
        """``(key, state)`` of every non-empty state, without copying the map; run it to
        its end without awaiting (an ``apply`` in between would change the map)."""
        for k, v in self._states.items():
            if v.to_bytes() != _empty_bytes(type(v)):
                yield k, v
