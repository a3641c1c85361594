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

__all__ = ["HEX", "HashTree", "children", "position"]

HEX = "0123456789abcdef"


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

    Memory: one int per item plus one ``[xor, count]`` per non-empty bucket per level.
    """

    def __init__(self, depth: int = 4):
        if not 1 <= depth <= 8:
            raise ValueError("depth must be 1..8")
        self.depth = depth
        self._levels: list[dict[str, list[int]]] = [{} for _ in range(depth + 1)]
        self._leaves: dict[str, dict[str, int]] = {}  # leaf bucket -> {ident: digest}

    def __len__(self) -> int:
        return self.count("")

    def put(self, ident: str, data: bytes) -> None:
        """Add item ``ident`` with bytes ``data``, or replace its bytes."""
        pos = position(ident)
        digest = _digest(ident, data)
        leaf = self._leaves.setdefault(pos[: self.depth], {})
        old = leaf.get(ident)
        if old == digest:
            return
        leaf[ident] = digest
        self._update(pos, digest ^ (old or 0), 0 if old is not None else 1)

    def discard(self, ident: str) -> None:
        """Remove item ``ident`` if present."""
        pos = position(ident)
        leaf = self._leaves.get(pos[: self.depth])
        if leaf is None or ident not in leaf:
            return
        self._update(pos, leaf.pop(ident), -1)

    def _update(self, pos: str, delta: int, count: int) -> None:
        for level, buckets in enumerate(self._levels):
            entry = buckets.setdefault(pos[:level], [0, 0])
            entry[0] ^= delta
            entry[1] += count
            if entry[1] == 0:
                del buckets[pos[:level]]

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
