"""A 16-ary hash tree over replicated state, for anti-entropy (docs/design.md#replication).

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
from collections.abc import Iterable, Iterator, Sequence

__all__ = ["HEX", "HashTree", "StateTree", "children"]

HEX = "0123456789abcdef"
_ABSENT = object()


def children(prefix: str) -> list[str]:
    """The 16 child buckets of bucket ``prefix``."""
    return [prefix + c for c in HEX]


def _raw_digest(raw_ident: bytes, data: bytes) -> int:
    """An item's digest from its UTF-8 ident: sha256(ident NUL data) as an int."""
    return int.from_bytes(hashlib.sha256(raw_ident + b"\0" + data).digest(), "big")


class HashTree:
    """Bucket hashes and counts at every level ``0..depth`` (``depth`` hex digits; 4 gives
    65,536 leaf buckets, about 15 items each at a million items).

    Memory: one int per item with bytes (none for an item of ``b""``, an event) plus one
    ``[xor, count]`` per non-empty bucket per level, and one more per leaf bucket with
    changes not yet read (at most a quarter of them).
    """

    def __init__(self, depth: int = 4):
        if not 1 <= depth <= 8:
            raise ValueError("depth must be 1..8")
        self.depth = depth
        self._levels: list[dict[str, list[int]]] = [{} for _ in range(depth + 1)]
        # leaf bucket -> {ident: digest, or None for the digest of b""}
        self._leaves: dict[str, dict[str, int | None]] = {}
        # first hex digit -> leaf bucket -> [XOR delta, count delta] not yet in ``_levels``:
        # the buckets above the leaves are brought up to date when read (``flush``), and
        # one sixteenth of the tree at a time once a quarter of the leaf buckets is pending
        # (so a read waits for at most that many), so many commits share those updates
        # instead of paying depth + 1 per item
        self._pending: dict[str, dict[str, list[int]]] = {c: {} for c in HEX}
        self._npending = 0  # leaf buckets in ``_pending``
        self._flush_at = 16**depth // 4
        self._size = 0
        self._local: set[str] = set()  # idents of local items (``StateTree``)
        self._root = 0  # XOR of the replicated digests of every item (``StateTree``)

    def __len__(self) -> int:
        return self._size

    def put(self, ident: str, data: bytes) -> None:
        """Add item ``ident`` with bytes ``data``, or replace its bytes."""
        self.apply([(ident, data, False)])

    def discard(self, ident: str) -> None:
        """Remove item ``ident`` if present."""
        self.apply([(ident, None, False)])

    def apply(self, changes: list[tuple[str, bytes | None, bool]], flush: bool = True) -> None:
        """Apply ``(ident, data, local)`` changes in order, as ``put`` (``data`` bytes)
        or ``discard`` (``data`` None) one by one would; ``local`` items count as ``b""``
        in the replicated root (``StateTree``). Each item's leaf and the root are updated
        at once, the buckets above the leaves later (``_pending``; ``flush`` False: not
        even a sixteenth now, for a builder that flushes a sixteenth at a time itself)."""
        depth, leaves, loc = self.depth, self._leaves, self._local
        sha256 = hashlib.sha256
        root, size, pending, npending = self._root, self._size, self._pending, self._npending
        for ident, data, local in changes:
            raw = ident.encode()
            lp = sha256(raw).hexdigest()[:depth]
            leaf = leaves.get(lp)
            kept = _ABSENT if leaf is None else leaf.get(ident, _ABSENT)
            empty = None  # the item's digest with bytes b""
            if kept is _ABSENT:
                old = None
            elif kept is None:
                old = empty = _raw_digest(raw, b"")
            else:
                old = kept
            if old is not None:  # its part of the replicated root goes
                if ident in loc:
                    if empty is None:
                        empty = _raw_digest(raw, b"")
                    root ^= empty
                else:
                    root ^= old
            if data is None:
                loc.discard(ident)
                if old is None:
                    continue
                del leaf[ident]  # type: ignore[index]
                if not leaf:
                    del leaves[lp]
                delta, count = old, -1
            else:
                if data:
                    new = _raw_digest(raw, data)
                else:
                    if empty is None:
                        empty = _raw_digest(raw, b"")
                    new = empty
                if local:
                    if empty is None:
                        empty = _raw_digest(raw, b"")
                    root ^= empty
                    loc.add(ident)
                else:
                    root ^= new
                    loc.discard(ident)
                if old == new:
                    continue
                if leaf is None:
                    leaf = leaves[lp] = {}
                leaf[ident] = None if not data else new
                delta, count = new ^ (old or 0), 0 if old is not None else 1
            size += count
            acc = pending[lp[0]]
            entry = acc.get(lp)
            if entry is None:
                acc[lp] = [delta, count]
                npending += 1
            else:
                entry[0] ^= delta
                entry[1] += count
        self._root, self._size, self._npending = root, size, npending
        if flush and npending > self._flush_at:  # the sixteenth with the most pending
            self.flush(max(HEX, key=lambda c: len(pending[c])))

    def flush(self, digit: str | None = None) -> None:
        """Bring the buckets above the leaves up to date now (a read does so itself; a
        builder calls it so that the first read does not wait): the pending per-leaf-bucket
        ``[XOR delta, count delta]`` under first hex digit ``digit`` (None: all) go to the
        bucket at every level on each leaf's path, summed per bucket first (each touched
        once). Deltas add up, so the sixteenths may go in any order."""
        for d in HEX if digit is None else digit:
            acc, self._pending[d] = self._pending[d], {}
            self._npending -= len(acc)
            self._propagate(acc)

    def _propagate(self, acc: dict[str, list[int]]) -> None:
        for buckets in reversed(self._levels):
            up: dict[str, list[int]] = {}
            for prefix, (delta, count) in acc.items():
                entry = buckets.get(prefix)
                if entry is None:
                    if count:  # a new bucket: only added items make one
                        buckets[prefix] = [delta, count]
                else:
                    entry[0] ^= delta
                    entry[1] += count
                    if entry[1] == 0:
                        del buckets[prefix]
                if prefix:
                    parent = up.get(prefix[:-1])
                    if parent is None:
                        up[prefix[:-1]] = [delta, count]
                    else:
                        parent[0] ^= delta
                        parent[1] += count
            acc = up

    def hash(self, prefix: str) -> bytes:
        """32-byte hash of bucket ``prefix`` (at most ``depth`` digits); b"" if empty."""
        if self._npending:
            self.flush()
        entry = self._levels[len(prefix)].get(prefix) if len(prefix) <= self.depth else None
        if entry is None:
            return b""
        return entry[0].to_bytes(32, "big")

    def count(self, prefix: str) -> int:
        """Items in bucket ``prefix``."""
        if self._npending:
            self.flush()
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

    def idents_in_tree_order(self, prefixes: Iterable[str]) -> list[str]:
        """``idents(prefixes)`` in tree order: leaf bucket by leaf bucket (sorted within
        one), so a stream cut after a prefix of them has completed whole buckets, which
        the next comparison finds equal (a resumed snapshot, issue 42)."""
        wanted = set(prefixes)
        if not wanted:
            return []
        lengths = sorted({len(p) for p in wanted})
        out: list[str] = []
        for leaf in sorted(self._leaves):
            if any(leaf[:n] in wanted for n in lengths):
                out.extend(sorted(self._leaves[leaf]))
        return out

    def walk_idents(
        self, prefixes: Iterable[str], kinds: Sequence[str], pause_every: int = 256
    ) -> Iterator[str | None]:
        """The idents of ``idents_in_tree_order(prefixes)`` grouped by kind: those
        starting with ``kinds[0]`` first, then ``kinds[1]``, ..., then any other, each
        group in tree order. Lazy, in one walk over the leaf buckets: a leaf is looked up
        and sorted only when the walk reaches it (no sort over every ident, issue 42);
        the first group is yielded as it is found, the others kept until it ends. Yields
        None after every ``pause_every`` leaves (a point where a caller may return to its
        loop, ``runtime/slicing.py``). The tree is live: an item added meanwhile to a
        leaf not yet reached is yielded too."""
        kept: list[str] = []  # the buckets, sorted, without those inside another
        for p in sorted(set(prefixes)):
            if len(p) <= self.depth and not (kept and p.startswith(kept[-1])):
                kept.append(p)
        first, later = (kinds[0], tuple(kinds[1:])) if kinds else ("\0", ())
        rest: list[list[str]] = [[] for _ in range(len(later) + 1)]
        for n, leaf in enumerate(self._leaves_under(kept)):
            if not n % pause_every:
                yield None
            items = self._leaves.get(leaf)
            if not items:
                continue
            for ident in sorted(items):
                if ident.startswith(first):
                    yield ident
                else:
                    k = next((j for j, p in enumerate(later) if ident.startswith(p)), -1)
                    rest[k].append(ident)
        for group in rest:
            for n, ident in enumerate(group):
                if not n % (pause_every * 16):
                    yield None
                yield ident

    def _leaves_under(self, buckets: list[str]) -> Iterator[str]:
        """Every leaf bucket under ``buckets`` (sorted, none inside another), in order."""
        for b in buckets:
            width = self.depth - len(b)
            if not width:
                yield b
                continue
            for i in range(16**width):
                yield b + format(i, f"0{width}x")


class StateTree(HashTree):
    """The anti-entropy tree of a node's state kept up to date item by item (issue 17):
    the full tree (``HashTree``: what a repair pass compares) plus the root of the
    *replicated* tree, in which a ``local`` item counts by presence only (its bytes taken
    as ``b""``; a delivery not yet final, whose attempts and next try only its origin
    knows). Both equal a tree built from scratch over the same items (the property test in
    tests/core/test_state_tree.py), so roots and bucket hashes are what a rebuild gave.

    Cost per changed item: two sha256 and its leaf; the buckets above it are shared with
    the items changed before the tree is next read or a quarter of its leaf buckets has
    changes (a repair pass reads it; a digest only reads the replicated root). Memory:
    ``HashTree``'s, plus one set entry per local item.
    """

    def put(self, ident: str, data: bytes, local: bool = False) -> None:
        """Add item ``ident`` with bytes ``data`` or replace them; ``local``: in the
        replicated tree it counts as ``b""``."""
        self.apply([(ident, data, local)])

    def replicated_root(self) -> bytes:
        """Root hash of the replicated tree (32 bytes; b"" when there are no items)."""
        return self._root.to_bytes(32, "big") if len(self) else b""
