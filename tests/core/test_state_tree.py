"""The incrementally kept anti-entropy tree (core.hashtree.StateTree, issue 17) equals a
tree built from scratch over the same items after any sequence of puts and removals: every
bucket hash and count at every level, the idents of every bucket, and the root of the
replicated tree (local items counted as ``b""``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from regionsync.core.hashtree import HashTree, StateTree, children

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


def from_scratch(items: dict[str, tuple[bytes, bool]], depth: int) -> tuple[HashTree, HashTree]:
    full, replicated = HashTree(depth), HashTree(depth)
    for ident, (data, local) in items.items():
        full.put(ident, data)
        replicated.put(ident, b"" if local else data)
    return full, replicated


@settings(max_examples=300, deadline=None, derandomize=True)
@given(ops=st.lists(op, max_size=120), depth=st.integers(1, 2))
def test_incremental_tree_equals_a_rebuild(ops, depth) -> None:
    tree = StateTree(depth)
    items: dict[str, tuple[bytes, bool]] = {}
    for kind, ident, data, local in ops:
        if kind == "put":
            tree.put(ident, data, local=local)
            items[ident] = (data, local)
        else:
            tree.discard(ident)
            items.pop(ident, None)
    full, replicated = from_scratch(items, depth)
    assert len(tree) == len(items)
    for b in buckets(depth):
        assert tree.hash(b) == full.hash(b), b
        assert tree.count(b) == full.count(b), b
    assert tree.idents(children("")) == sorted(items)
    assert tree.replicated_root() == replicated.hash("")


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
