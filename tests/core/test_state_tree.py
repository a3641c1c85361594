"""The incrementally kept anti-entropy tree (core.hashtree.StateTree, issue 17) equals a
tree built from scratch over the same items after any sequence of puts and removals: every
bucket hash and count at every level, the idents of every bucket, and the root of the
replicated tree (local items counted as ``b""``)."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from regionsync.core.hashtree import StateTree, children

IDENTS = [f"{k}/{i}" for k in ("r", "e", "d") for i in range(4)]  # few: items are often replaced

op = st.one_of(
    st.tuples(
        st.just("put"),
        st.sampled_from(IDENTS),
        st.binary(max_size=6),
        st.booleans(),
    ),
    st.tuples(st.just("discard"), st.sampled_from(IDENTS), st.just(b""), st.just(False)),
)


def buckets(depth: int) -> list[str]:
    out, level = [""], [""]
    for _ in range(depth):
        level = [c for b in level for c in children(b)]
        out.extend(level)
    return out


class Oracle:
    """Bucket hashes and counts computed straight from the module docstring's rule over
    the whole item set (no incremental state): XOR of ``sha256(ident NUL bytes)`` of the
    items whose ``sha256(ident)`` hex digits start with the bucket."""

    def __init__(self, items: dict[str, bytes]):
        self.items = items

    def _in(self, prefix: str) -> list[str]:
        return [i for i in self.items if hashlib.sha256(i.encode()).hexdigest().startswith(prefix)]

    def hash(self, prefix: str) -> bytes:
        members = self._in(prefix)
        acc = 0
        for i in members:
            acc ^= int.from_bytes(hashlib.sha256(i.encode() + b"\0" + self.items[i]).digest())
        return acc.to_bytes(32, "big") if members else b""

    def count(self, prefix: str) -> int:
        return len(self._in(prefix))


def from_scratch(items: dict[str, tuple[bytes, bool]]) -> tuple[Oracle, Oracle]:
    full = Oracle({i: d for i, (d, _) in items.items()})
    replicated = Oracle({i: b"" if local else d for i, (d, local) in items.items()})
    return full, replicated


def one_by_one(tree: StateTree, items: dict[str, tuple[bytes, bool]], ops: list) -> None:
    """``ops`` as single ``put``/``discard`` calls on ``tree``; ``items`` follows them."""
    for kind, ident, data, local in ops:
        if kind == "put":
            tree.put(ident, data, local=local)
            items[ident] = (data, local)
        else:
            tree.discard(ident)
            items.pop(ident, None)


def assert_equals_a_rebuild(
    tree: StateTree, items: dict[str, tuple[bytes, bool]], counts_first: bool = False
) -> None:
    """Every bucket's hash and count, the idents and the replicated root of ``tree`` are
    those of the oracle over ``items`` (``counts_first``: every count read before any hash,
    as either read must bring the tree's pending changes in)."""
    full, replicated = from_scratch(items)
    assert len(tree) == len(items)
    if counts_first:
        assert [tree.count(b) for b in buckets(tree.depth)] == [
            full.count(b) for b in buckets(tree.depth)
        ]
    for b in buckets(tree.depth):
        assert (tree.hash(b), tree.count(b)) == (full.hash(b), full.count(b)), b
    assert tree.idents(children("")) == sorted(items)
    assert tree.replicated_root() == replicated.hash("")


@settings(max_examples=300, deadline=None, derandomize=True)
@given(ops=st.lists(op, max_size=120), depth=st.integers(1, 2))
def test_incremental_tree_equals_a_rebuild(ops, depth) -> None:
    tree = StateTree(depth)
    items: dict[str, tuple[bytes, bool]] = {}
    one_by_one(tree, items, ops)
    assert_equals_a_rebuild(tree, items)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    batches=st.lists(st.tuples(st.lists(op, max_size=30), st.booleans()), max_size=8),
    depth=st.integers(1, 2),
)
def test_changes_applied_in_batches_equal_one_by_one(batches, depth) -> None:
    """A commit's changes go in one ``apply`` (bucket deltas summed per bucket first, the
    buckets above the leaves updated only when read): the same tree as putting and
    discarding them one at a time, items repeated within a batch included (the last
    change wins), whether or not the tree was read between batches."""
    batched, single = StateTree(depth), StateTree(depth)
    items: dict[str, tuple[bytes, bool]] = {}
    for n, (batch, read) in enumerate(batches):
        batched.apply([(i, d if k == "put" else None, loc) for k, i, d, loc in batch])
        one_by_one(single, items, batch)
        if read:
            assert_equals_a_rebuild(batched, items, counts_first=n % 2 == 1)
    assert_equals_a_rebuild(batched, items)
    assert_equals_a_rebuild(single, items)
    assert batched._local == single._local


def test_local_items_differ_only_in_the_replicated_root() -> None:
    a, b = StateTree(2), StateTree(2)
    a.put("d/1", b"pending, attempt 1", local=True)
    b.put("d/1", b"pending, attempt 2", local=True)
    assert a.hash("") != b.hash("")  # a repair compares the full bytes
    assert a.replicated_root() == b.replicated_root() != b""  # a digest does not
    b.put("d/1", b"delivered")  # final: now it counts in both
    assert a.replicated_root() != b.replicated_root()
    a.put("d/1", b"delivered")
    assert a.replicated_root() == b.replicated_root() and a.hash("") == b.hash("")
    a.discard("d/1")
    assert a.replicated_root() == b"" and a.hash("") == b"" and len(a) == 0


def test_idents_in_tree_order_come_leaf_by_leaf() -> None:
    """A snapshot sent in this order and cut midway has completed whole leaf buckets (the
    next pass finds them equal: issue 42): the same idents as ``idents``, grouped by leaf
    bucket in bucket order."""
    tree = StateTree(2)
    items = [f"r/k{i}" for i in range(500)]
    tree.apply([(i, b"x", False) for i in items])
    order = tree.idents_in_tree_order(children(""))
    assert sorted(order) == tree.idents(children("")) == sorted(items)
    leaves = [hashlib.sha256(i.encode()).hexdigest()[:2] for i in order]
    assert leaves == sorted(leaves)
    part = tree.idents_in_tree_order(["a"])
    assert part and all(hashlib.sha256(i.encode()).hexdigest()[0] == "a" for i in part)


def _walk(tree: StateTree, prefixes: list[str], pause_every: int = 256) -> list[str]:
    kinds = ("r/", "e/", "d/")
    return [i for i in tree.walk_idents(prefixes, kinds, pause_every) if i is not None]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.sampled_from(["r/", "e/", "d/", "x/"]), min_size=0, max_size=300),
    st.sets(st.text(alphabet="0123456789abcdef", min_size=1, max_size=3), max_size=6),
)
def test_walk_idents_is_the_send_order_of_a_pass(kinds: list[str], extra: set[str]) -> None:
    """``walk_idents`` gives what a pass sent before (issue 42): ``idents_in_tree_order``
    sorted by kind (registry, events, deliveries, any other), stably; buckets inside
    another one asked for count once."""
    tree = StateTree(2)
    tree.apply([(f"{k}{n}", b"x", False) for n, k in enumerate(kinds)])
    prefixes = ["1", "a", "a3", *extra]
    rank = {"r/": 0, "e/": 1, "d/": 2}
    want = sorted(tree.idents_in_tree_order(prefixes), key=lambda i: rank.get(i[:2], 3))
    assert _walk(tree, prefixes, 7) == want


def test_walk_idents_is_lazy_and_returns_pause_points() -> None:
    """The walk sorts no list of every ident up front (it was per pass, over every
    ident: 1 s at 300k keys): an item added to a leaf it has not reached yet is yielded,
    and it offers a pause point (None) every ``pause_every`` leaves, so the pass can
    return to its loop."""
    tree = StateTree(2)
    tree.apply([(f"r/k{i}", b"x", False) for i in range(200)])
    walk = tree.walk_idents(children(""), ("r/",), pause_every=4)
    first = [next(walk), next(walk)]
    assert first[0] is None and first[1] is not None  # a pause point before any leaf
    late = next(f"r/late{i}" for i in range(10_000) if _leaf(f"r/late{i}") == "ff")
    tree.put(late, b"y")  # into the last leaf, after the walk began
    rest = list(walk)
    assert late in rest
    leaves = len({_leaf(i) for i in [*first, *rest] if i is not None})
    assert rest.count(None) >= leaves // 4 - 1


def _leaf(ident: str) -> str:
    return hashlib.sha256(ident.encode()).hexdigest()[:2]
