"""A 16-ary hash tree over replicated state, for anti-entropy (DESIGN.md, "Replication").

Items are named by an ident string (``r/<registry key>``, ``e/<event id>``,
``d/<delivery id>``) and hold canonical bytes (a CRDT state, a delivery's canonical
encoding; an event is immutable, so its bytes are empty and only its presence counts).
An item sits at the position ``sha256(ident)`` (64 hex digits); a bucket is a hex prefix of
positions, so bucket ``"3a"`` is the parent of ``"3a0"`` .. ``"3af"``. A bucket's hash is
the XOR of ``sha256(ident NUL bytes)`` of its items (32 bytes; ``b""`` for an empty
bucket): order-free, so equal item sets hash equal in every region, and an item can be
added or replaced in O(depth). XOR is not collision resistant against a malicious peer;
peers are authenticated (mutual TLS) and trusted not to forge state.

Pure: no I/O, no time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["HEX", "HashTree", "StateTree", "children", "position"]

HEX = "0123456789abcdef"
_ABSENT = object()


def position(ident: str) -> str:
    """The item's place in the tree: sha256 of ``ident`` as 64 lower-case hex digits."""
    return hashlib.sha256(ident.encode()).hexdigest()


def children(prefix: str) -> list[str]:
    """The 16 child buckets of bucket ``prefix``."""
    return [prefix + c for c in HEX]


def _digest(ident: str, data: bytes) -> int:
    return int.from_bytes(hashlib.sha256(ident.encode() + b"\0" + data).digest(), "big")


class HashTree:
    """Bucket hashes and counts at every level ``0..depth`` (``depth`` hex digits; 4 gives
    65,536 leaf buckets, about 15 items each at a million items).

    Memory: one int per item with bytes (none for an item of ``b""``, an event) plus one
    ``[xor, count]`` per non-empty bucket per level.
    """

    def __init__(self, depth: int = 4):
        if not 1 <= depth <= 8:
            raise ValueError("depth must be 1..8")
        self.depth = depth
        self._levels: list[dict[str, list[int]]] = [{} for _ in range(depth + 1)]
        # leaf bucket -> {ident: digest, or None for the digest of b""}
        self._leaves: dict[str, dict[str, int | None]] = {}

    def __len__(self) -> int:
        return self.count("")

    def put(self, ident: str, data: bytes) -> None:
        """Add item ``ident`` with bytes ``data``, or replace its bytes."""
        self._put(ident, _digest(ident, data), not data)

    def discard(self, ident: str) -> None:
        """Remove item ``ident`` if present."""
        self._pop(ident)

    def _pop(self, ident: str) -> int | None:
        """Remove item ``ident``; its digest, or None if it was absent."""
        pos = position(ident)
        leaf = self._leaves.get(pos[: self.depth])
        if leaf is None or ident not in leaf:
            return None
        kept = leaf.pop(ident)
        if not leaf:
            del self._leaves[pos[: self.depth]]
        old = _digest(ident, b"") if kept is None else kept
        self._update(pos, old, -1)
        return old

    def _put(self, ident: str, digest: int, empty: bool = False) -> int | None:
        """Set item ``ident``'s digest (``empty``: of ``b""``, kept as None: an event's
        digest follows from its ident, which saves an int per event); its previous
        digest, or None if it was absent."""
        pos = position(ident)
        leaf = self._leaves.setdefault(pos[: self.depth], {})
        kept = leaf.get(ident, _ABSENT)
        old = None if kept is _ABSENT else _digest(ident, b"") if kept is None else kept
        if old != digest:
            leaf[ident] = None if empty else digest
            self._update(pos, digest ^ (old or 0), 0 if old is not None else 1)
        return old

    def _update(self, pos: str, delta: int, count: int) -> None:
        for level, buckets in enumerate(self._levels):
            prefix = pos[:level]
            entry = buckets.get(prefix)
            if entry is None:  # a new bucket: only an added item (count 1) makes one
                buckets[prefix] = [delta, count]
                continue
            entry[0] ^= delta
            entry[1] += count
            if entry[1] == 0:
                del buckets[prefix]

    def hash(self, prefix: str) -> bytes:
        """32-byte hash of bucket ``prefix`` (at most ``depth`` digits); b"" if empty."""
        entry = self._levels[len(prefix)].get(prefix) if len(prefix) <= self.depth else None
        if entry is None:
            return b""
        return entry[0].to_bytes(32, "big")

    def count(self, prefix: str) -> int:
        """Items in bucket ``prefix``."""
        entry = self._levels[len(prefix)].get(prefix) if len(prefix) <= self.depth else None
        return 0 if entry is None else entry[1]

    def idents(self, prefixes: Iterable[str]) -> list[str]:
        """Idents of every item in any of the buckets ``prefixes``, sorted."""
        wanted = set(prefixes)
        if not wanted:
            return []
        lengths = sorted({len(p) for p in wanted})
        out: list[str] = []
        for leaf, items in self._leaves.items():
            if any(leaf[:n] in wanted for n in lengths):
                out.extend(items)
        return sorted(out)


class StateTree(HashTree):
    """The anti-entropy tree of a node's state kept up to date item by item (issue 17):
    the full tree (``HashTree``: what a repair pass compares) plus the root of the
    *replicated* tree, in which a ``local`` item counts by presence only (its bytes taken
    as ``b""``; a delivery not yet final, whose attempts and next try only its origin
    knows). Both equal a tree built from scratch over the same items (the property test in
    tests/core/test_state_tree.py), so roots and bucket hashes are what a rebuild gave.

    Cost per ``put``/``discard``: one or two sha256 and ``depth + 1`` XORs (every level on
    the item's path is updated at once; an XOR update costs less than marking the path
    dirty). Memory: ``HashTree``'s, plus one set entry per local item.
    """

    def __init__(self, depth: int = 4):
        super().__init__(depth)
        self._local: set[str] = set()
        self._root = 0  # XOR of the replicated digests of every item

    def put(self, ident: str, data: bytes, local: bool = False) -> None:
        """Add item ``ident`` with bytes ``data`` or replace them; ``local``: in the
        replicated tree it counts as ``b""``."""
        digest = _digest(ident, data)
        old = self._put(ident, digest, not data)
        if old is not None:
            self._root ^= _digest(ident, b"") if ident in self._local else old
        if local:
            self._root ^= digest if not data else _digest(ident, b"")
            self._local.add(ident)
        else:
            self._root ^= digest
            self._local.discard(ident)

    def discard(self, ident: str) -> None:
        """Remove item ``ident`` if present."""
        old = self._pop(ident)
        if old is not None:
            self._root ^= _digest(ident, b"") if ident in self._local else old
            self._local.discard(ident)

    def replicated_root(self) -> bytes:
        """Root hash of the replicated tree (32 bytes; b"" when there are no items)."""
        return self._root.to_bytes(32, "big") if len(self) else b""
