"""The registry's state: key -> CRDT, merged by ``apply``, hashed for convergence checks.

Every state is held as its canonical bytes (what the store holds) and decoded when first
read (issue 42: a restart over 1M keys decoded every state, 70 s and 1.8 GB). Decoded
states are kept for the hot keys (``HOT_KEYS``, ``HOT_KINDS``: tenant, source and token
sets, tokens, custody, jobs, removals) and, for the rest, for the ``decoded_keys`` most
recently used (an LRU: memory bounded by configuration, not by the registry). What needs
only the bytes (the digest, ``state_hash``, the anti-entropy tree, repair streams) never
decodes. Never does I/O; a row that does not decode is the store's fault: see
``from_bytes`` and ``corrupt``.

core.registry.Registry adds the reads and the mutators; the keys are core.registry_keys.
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Self

from crdt import CRDT, DecodeError, LWWRegister, ORSet, PNCounter, Timestamp, decode

from .generations import changed_members
from .registry_keys import key_type
from .registry_views import EndpointView

Deltas = dict[str, CRDT]

_MOD = 1 << 256
# decoded states of cold keys kept (config ``registry.decoded_cache_keys``): a decoded
# register takes about 1.1 KB, its bytes about 0.1 KB (bench/README.md, million.py)
DEFAULT_DECODED_KEYS = 100_000
# keys read on hot paths or scanned whole (tenant, source and token sets; custody, jobs,
# removals, tokens): always kept decoded
HOT_KEYS = frozenset({"tenants", "sources", "tokens"})
HOT_KINDS = ("c/", "j/", "x/", "p/", "k/")
_TYPES = (LWWRegister, ORSet, PNCounter)  # the types registry keys hold
# the canonical bytes of each type's bottom state (a state equal to one is empty; the tag
# differs per type) and the ``[TAG, VERSION`` header every state of the type starts with


@functools.cache
def _empty_bytes(cls: type[CRDT]) -> bytes:
    """The canonical bytes of ``cls``'s bottom state (a state equal to it is empty)."""
    return cls.empty().to_bytes()


_EMPTIES = frozenset(_empty_bytes(cls) for cls in _TYPES)
_HEADERS = tuple(_empty_bytes(cls)[: 3 + len(cls.TAG)] for cls in _TYPES)


def _key_digest(key: str, data: bytes) -> int:
    """One non-empty state's part of ``RegistryState.digest``: sha256 over the same
    framing as ``state_hash`` (key and canonical bytes, each length-prefixed)."""
    raw = key.encode()
    h = hashlib.sha256(len(raw).to_bytes(4, "big") + raw + len(data).to_bytes(4, "big") + data)
    return int.from_bytes(h.digest(), "big")


def _part(key: str, data: bytes | None) -> int:
    """A state's part of the digest, from its bytes: 0 when absent or empty."""
    return 0 if data is None or data in _EMPTIES else _key_digest(key, data)


def is_empty_bytes(data: bytes) -> bool:
    """Are ``data`` the canonical bytes of an empty registry state (any type)?"""
    return data in _EMPTIES


def hash_items(items: Iterable[tuple[str, bytes]]) -> str:
    """``state_hash`` over ``(key, canonical bytes)`` pairs in key order (empty states
    skipped); reads only bytes, decodes nothing."""
    h = hashlib.sha256()
    for key, data in items:
        hash_update(h, key, data)
    return h.hexdigest()


def hash_update(h: Any, key: str, data: bytes) -> None:
    """One ``(key, canonical bytes)`` of ``hash_items`` into sha256 object ``h`` (none
    if empty)."""
    if data in _EMPTIES:
        return
    h.update(len(key).to_bytes(4, "big") + key.encode())
    h.update(len(data).to_bytes(4, "big") + data)


class _DecodedView(Mapping[str, CRDT]):
    """``RegistryState._states``: every state by key, decoded on access (through the
    cache); a key whose row does not decode reads as absent. For the few readers that
    want the old map's shape (removal records, tests); O(1) per key, O(registry) walks."""

    def __init__(self, reg: RegistryState) -> None:
        self._reg = reg

    def __getitem__(self, key: str) -> CRDT:
        state = self._reg._decoded(key)
        if state is None:
            raise KeyError(key)
        return state

    def __iter__(self) -> Iterator[str]:
        return iter(self._reg._raw)

    def __len__(self) -> int:
        return len(self._reg._raw)

    def __contains__(self, key: object) -> bool:
        return key in self._reg._raw


class RegistryState:
    """In-memory registry state: key -> canonical bytes, decoded on first read; and the
    caches ``apply`` keeps true.

    Counters: ``decodes`` (states decoded from bytes), ``decode_errors`` (rows found not
    to decode, at their first read; ``corrupt`` maps each such key to the reason, and
    ``on_decode_error(key, reason)`` is called once per finding).
    """

    def __init__(
        self,
        states: Mapping[str, CRDT] | None = None,
        digest: int | None = None,
        *,
        decoded_keys: int = DEFAULT_DECODED_KEYS,
    ):
        self._raw: dict[str, bytes] = {}  # every key: its canonical bytes
        self._hot: dict[str, CRDT] = {}  # decoded states of hot keys, never dropped
        self._cold: OrderedDict[str, CRDT] = OrderedDict()  # decoded others, LRU order
        self.decoded_keys = decoded_keys
        self.decodes = 0
        self.decode_errors = 0
        self.corrupt: dict[str, str] = {}  # key -> why its row does not decode
        self.on_decode_error: Callable[[str, str], None] | None = None
        # keys of the hot kinds, by kind (custody, jobs, removals and tokens are read whole)
        self._kind_keys: dict[str, set[str]] = {k: set() for k in HOT_KINDS}
        for key, state in (states or {}).items():
            self._raw[key] = state.to_bytes()
            self._keep(key, state)
            if (kind := key[:2]) in self._kind_keys:
                self._kind_keys[kind].add(key)
        self._hash: str | None = None
        # sum mod 2**256 of ``_key_digest`` over the non-empty states (``digest``), kept
        # by ``apply``; None: not worked out yet (``from_bytes`` passes it in)
        self._digest: int | None = digest
        self.changes = 0  # ``apply`` calls that changed something (a cached hash's stamp)
        self._sorted_keys: list[str] | None = None  # for state_hash; None: a key was added
        # tenants whose dots the last ``apply`` changed: created, deleted or re-created
        self.tenants_changed: set[str] = set()
        # live endpoint id -> its view, built on first read, at most ``views_max`` (the
        # oldest go first); ``apply`` drops the views a change can affect
        # (``_forget_views``; delivery reads the view per attempt, ingest per match)
        self._views: dict[str, EndpointView] = {}
        # this node's usage counter moves committed and not yet in a record, by (tenant,
        # counter) (runtime/writepath.py): ``usage`` and ``tenant`` count them
        self.pending_usage: Mapping[tuple[str, str], int] = {}

    @classmethod
    def from_bytes(cls, rows: Mapping[str, bytes], *, decoded_keys: int | None = None) -> Self:
        """Load from stored ``key -> canonical bytes``, decoding none of them: each row's
        framing is checked (the ``[TAG, VERSION`` of a registry CRDT type), its body when
        first read (``corrupt``). Raises crdt.DecodeError naming the first row framed
        otherwise (the load fails, as a store that cannot be read)."""
        raw: dict[str, bytes] = {}
        kinds: dict[str, set[str]] = {k: set() for k in HOT_KINDS}
        total = 0  # the digest from the stored bytes (canonical: what to_bytes gives)
        for k, v in rows.items():
            if type(v) is not bytes:
                v = bytes(v)
            if not v.startswith(_HEADERS):
                raise DecodeError(f"registry row {k!r} is not a registry CRDT state")
            if v not in _EMPTIES:
                total += _key_digest(k, v)
            raw[k] = v
            if (kind := k[:2]) in kinds:
                kinds[kind].add(k)
        reg = cls(None, total % _MOD)
        reg._raw, reg._kind_keys = raw, kinds
        if decoded_keys is not None:
            reg.set_decoded_keys(decoded_keys)
        return reg

    # -- the decoded part ---------------------------------------------------------------

    def set_decoded_keys(self, n: int) -> None:
        """Keep at most ``n`` >= 0 decoded states of cold keys (drops the oldest now)."""
        self.decoded_keys = n
        while len(self._cold) > n:
            self._cold.popitem(last=False)
        while len(self._views) > self.views_max:
            del self._views[next(iter(self._views))]

    @property
    def views_max(self) -> int:
        """Endpoint views kept: one per ten decoded keys (an endpoint has ten or more)."""
        return max(16, self.decoded_keys // 10)

    def decoded_count(self) -> int:
        """States held decoded now (hot ones and the LRU's)."""
        return len(self._hot) + len(self._cold)

    def _keep(self, key: str, state: CRDT) -> None:
        if key in HOT_KEYS or key[:2] in self._kind_keys:
            self._hot[key] = state
            return
        cold = self._cold
        cold[key] = state
        cold.move_to_end(key)
        if len(cold) > self.decoded_keys:
            cold.popitem(last=False)

    def _keep_view(self, endpoint_id: str, view: EndpointView) -> None:
        views = self._views
        views[endpoint_id] = view
        if len(views) > self.views_max:
            del views[next(iter(views))]

    def _decoded(self, key: str) -> CRDT | None:
        """The state under ``key`` decoded (kept: hot, or the LRU's newest), or None
        when absent or its row does not decode (``corrupt``)."""
        raw = self._raw.get(key)
        if raw is None:
            return None
        state = self._hot.get(key)
        if state is not None:
            return state
        state = self._cold.get(key)
        if state is not None:
            self._cold.move_to_end(key)
            return state
        state = self._decode(key, raw)
        if state is not None:
            self._raw[key] = state.to_bytes()  # equal: share the bytes the state caches
            self._keep(key, state)
        return state

    def _peek(self, key: str, raw: bytes) -> CRDT | None:
        """Like ``_decoded`` but keeping nothing (a walk over every key)."""
        state = self._hot.get(key)
        if state is None:
            state = self._cold.get(key)
        return state if state is not None else self._decode(key, raw)

    def _decode(self, key: str, raw: bytes) -> CRDT | None:
        if key in self.corrupt:
            return None
        self.decodes += 1
        try:
            state = decode(raw)
            cls = key_type(key)
            if cls is not None and type(state) is not cls:
                raise DecodeError(f"holds a {type(state).__name__}, the key a {cls.__name__}")
        except DecodeError as exc:
            # the key reads as absent until a merge writes it again (anti-entropy brings
            # the peers' state: the digest, over the stored bytes, differs from theirs)
            reason = str(exc)
            self.corrupt[key] = reason
            self.decode_errors += 1
            if self.on_decode_error is not None:
                self.on_decode_error(key, reason)
            return None
        return state

    @property
    def _states(self) -> Mapping[str, CRDT]:
        return _DecodedView(self)

    @property
    def _removal_keys(self) -> set[str]:
        """Removal records' keys (core.removal): read on every Hello and Ack, never a scan."""
        return self._kind_keys["x/"] | self._kind_keys["p/"]

    def kind_keys(self, kind: str) -> list[str]:
        """The keys of a hot kind (``c/``, ``j/``, ``x/``, ``p/``, ``k/``), sorted."""
        return sorted(self._kind_keys[kind])

    # -- reads and the merge ----------------------------------------------------------

    def _get(self, key: str, cls: type) -> Any:
        state = self._decoded(key)
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
            old = self._decoded(key)  # None for a corrupt row: the delta replaces it
            new = delta if old is None else old.merge(delta)
            if new != old:
                self._put(key, new)
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

    def _put(self, key: str, new: CRDT) -> None:
        """Hold ``new`` under ``key``: its bytes, the digest, the kind index, the cache."""
        raws = self._raw
        old_raw, new_raw = raws.get(key), new.to_bytes()
        if old_raw is None:
            self._sorted_keys = None
            if (kind := key[:2]) in self._kind_keys:
                self._kind_keys[kind].add(key)
        if self._digest is not None:
            self._digest = (self._digest + _part(key, new_raw) - _part(key, old_raw)) % _MOD
        raws[key] = new_raw
        self.corrupt.pop(key, None)
        self._keep(key, new)

    def replace(self, states: Mapping[str, CRDT]) -> None:
        """Put ``states`` in place of those under their keys: not a merge, for pruning
        (core/pruning.py drops retired actors' entries; values stay). Keeps the caches."""
        for key, new in states.items():
            self._put(key, new)
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

    # -- what needs only the bytes ------------------------------------------------------

    def state_hash(self) -> str:
        """sha256 hex over the canonical encoding of every non-empty state, keys sorted.

        Equal in every region once they have converged (docs/api.md, GET /v1/cluster).
        """
        if self._hash is None:
            if self._sorted_keys is None:  # kept until a key is added
                self._sorted_keys = sorted(self._raw)
            raws = self._raw
            self._hash = hash_items((key, raws[key]) for key in self._sorted_keys)
        return self._hash

    def digest(self) -> str:
        """``registry_digest``: sha256 hex of the sum (mod 2**256) of one sha256 per
        non-empty state, over its key and canonical bytes. Equal in every region once they
        have converged, like ``state_hash``, but independent of order, so ``apply`` keeps
        it (one sha256 per changed key) and reading it is O(1) (issue 42); worked out
        once, O(registry), if the state was not loaded by ``from_bytes``."""
        if self._digest is None:
            self._digest = sum(_part(k, v) for k, v in self._raw.items()) % _MOD
        return hashlib.sha256(self._digest.to_bytes(32, "big")).hexdigest()

    def cached_hash(self) -> str | None:
        """``state_hash`` if no change came since it was last worked out, else None."""
        return self._hash

    def set_hash(self, value: str, changes: int) -> None:
        """Keep ``value``, the ``state_hash`` worked out (elsewhere) over the state as of
        ``changes``, if nothing changed since."""
        if changes == self.changes:
            self._hash = value

    def __len__(self) -> int:
        return len(self._raw)

    def state_bytes(self, key: str) -> bytes | None:
        """The canonical bytes of the non-empty state under ``key``, or None (absent,
        empty, or found not to decode); O(1), decodes nothing (repair streams)."""
        raw = self._raw.get(key)
        if raw is None or raw in _EMPTIES or key in self.corrupt:
            return None
        return raw

    def non_empty_bytes(self) -> Iterator[tuple[str, bytes]]:
        """``(key, canonical bytes)`` of every non-empty state as stored, decoding none
        (the anti-entropy tree); run it to its end without awaiting."""
        for k, v in self._raw.items():
            if v not in _EMPTIES:
                yield k, v

    # -- decoded walks (O(registry) decodes: tests and tools) -------------------------

    def keys(self) -> list[str]:
        """Every key (empty states' too), unsorted: a copy in one C call, so a caller
        may walk it in slices while ``apply`` changes the map (issue 42)."""
        return list(self._raw)

    def snapshot(self) -> dict[str, bytes]:
        """Every ``key -> canonical bytes`` (empty ones too): a consistent shallow copy
        in one C call that makes no object per key (runtime/registry_hash.py hashes it
        in slices; ``list(items())`` made a tuple per key, which woke the garbage
        collector)."""
        return self._raw.copy()

    def states(self) -> dict[str, CRDT]:
        """Every non-empty state, ``key -> CRDT`` (decoded: O(registry)). For a few keys
        use ``state``, for the bytes ``non_empty_bytes``."""
        return dict(self.non_empty())

    def state(self, key: str) -> CRDT | None:
        """The non-empty state under ``key``, or None (absent, empty or not decoding);
        O(1), no copy."""
        raw = self._raw.get(key)
        return None if raw is None or raw in _EMPTIES else self._decoded(key)

    def non_empty(self) -> Iterator[tuple[str, CRDT]]:
        """``(key, state)`` of every non-empty state, decoded one by one and not kept
        (the cache stays as it was); run it to its end without awaiting."""
        for k, v in self._raw.items():
            if v not in _EMPTIES and (state := self._peek(k, v)) is not None:
                yield k, state
