"""Type-specific API checks the generic law suite does not cover (argument validation etc.)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crdt import CausalContext, LWWRegister, ORSet, PNCounter, Timestamp, VectorClock
from crdt._orset import element_key

EAST, WEST = "us-east-1:1", "eu-west-1:1"


@pytest.mark.parametrize("value", [(1, 2), {1, 2}, object(), {1: "x"}, [(1,)], bytearray(b"x")])
def test_lww_rejects_unsupported_value_types(value: object) -> None:
    with pytest.raises(TypeError):
        LWWRegister.empty().set(value, actor=EAST, stamp=Timestamp(1, 0))


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, _nested(40)])
def test_lww_rejects_out_of_range_ints_and_deep_nesting(value: object) -> None:
    with pytest.raises(ValueError):
        LWWRegister.empty().set(value, actor=EAST, stamp=Timestamp(1, 0))


def test_lww_read_is_a_copy_and_reports_the_winner() -> None:
    reg = LWWRegister.empty()
    assert reg.is_empty and reg.value() is None and reg.stamp is None
    reg = reg.merge(reg.set({"urls": ["a"]}, actor=EAST, stamp=Timestamp(10, 0)))
    reg.value()["urls"].append("mutated")
    assert reg.value() == {"urls": ["a"]}
    assert reg.stamp == Timestamp(10, 0) and reg.actor == EAST
    assert reg.clock == VectorClock({EAST: 1})
    # a write delta dominates everything its replica has seen
    later = reg.merge(reg.set(None, actor=WEST, stamp=Timestamp(1, 0)))
    assert later.value() is None and not later.is_empty and later.conflicts == 1
    assert later.clock == VectorClock({EAST: 1, WEST: 1})


def test_lww_concurrent_writes_are_kept_until_superseded() -> None:
    a = LWWRegister.empty().set("a", actor=EAST, stamp=Timestamp(5, 0))
    b = LWWRegister.empty().set("b", actor=WEST, stamp=Timestamp(5, 0))
    both = a.merge(b)
    assert both.conflicts == 2 and both.value() == "a"  # "us-east-1:1" > "eu-west-1:1"
    assert both.values() == ["b", "a"]  # the siblings, winner last
    settled = both.merge(both.set("c", actor=WEST, stamp=Timestamp(1, 0)))
    assert settled.conflicts == 1 and settled.value() == "c" and settled.values() == ["c"]
    assert LWWRegister.empty().values() == []


def test_lww_bool_int_and_float_are_distinct_values() -> None:
    reg = LWWRegister.empty()
    ones = [reg.set(v, actor=EAST, stamp=Timestamp(1, 0)) for v in (True, 1, 1.0)]
    assert len({x.to_bytes() for x in ones}) == 3


@pytest.mark.parametrize("element", [True, 1.5, None, ("a",), ["a"], bytearray(b"a")])
def test_orset_rejects_unsupported_elements(element: object) -> None:
    with pytest.raises(TypeError):
        ORSet.empty().add(element, actor=EAST)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ORSet.empty().remove(element)  # type: ignore[arg-type]


def test_orset_deltas_and_queries() -> None:
    s = ORSet.empty()
    d1 = s.add("x", actor=EAST)
    assert d1.entries == {"x": frozenset({(EAST, 1)})}
    assert d1.context == CausalContext.from_dots([(EAST, 1)])
    s = s.merge(d1)
    d2 = s.add("x", actor=EAST)  # re-add supersedes the old dot
    assert d2.context == CausalContext({EAST: 2})
    s = s.merge(d2).merge(s.add(3, actor=WEST))
    assert s.entries["x"] == frozenset({(EAST, 2)})
    assert "x" in s and 3 in s and True not in s and len(s) == 2
    assert s.elements() == [3, "x"] and list(s) == [3, "x"]
    assert s.remove("absent") == ORSet.empty()
    gone = s.merge(s.remove("x"))
    assert gone.value() == frozenset({3}) and gone.context == s.context


def test_orset_constructor_checks_dots_against_the_context() -> None:
    with pytest.raises(ValueError):
        ORSet({"x": frozenset({(EAST, 1)})}, CausalContext())
    with pytest.raises(ValueError):
        ORSet({"x": frozenset({(EAST, 1)}), "y": frozenset({(EAST, 1)})}, CausalContext({EAST: 1}))


@pytest.mark.parametrize("n", [0, -1, 1.0, True, "1"])
def test_pncounter_rejects_non_positive_amounts(n: object) -> None:
    with pytest.raises(ValueError):
        PNCounter.empty().increment(EAST, n)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PNCounter.empty().decrement(EAST, n)  # type: ignore[arg-type]


def test_pncounter_deltas_carry_totals() -> None:
    c = PNCounter.empty()
    c = c.merge(c.increment(EAST, 2))
    d = c.increment(EAST, 3)
    assert d.p == {EAST: 5} and d.n == {} and d.value() == 5
    c = c.merge(d).merge(c.decrement(WEST))
    assert c.value() == 4 and c.p == {EAST: 5} and c.n == {WEST: 1}


def test_actors_must_be_non_empty_strings() -> None:
    with pytest.raises(ValueError):
        VectorClock().increment("")
    with pytest.raises(TypeError):
        ORSet.empty().add("x", actor=b"a")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        LWWRegister.empty().set(1, actor=EAST, stamp=(1, 0))  # type: ignore[arg-type]


_ELEMENT = st.one_of(st.integers(-(2**63), 2**64 - 1), st.text(max_size=4), st.binary(max_size=4))


@given(st.lists(_ELEMENT, max_size=12, unique=True))
def test_orset_elements_order_is_element_key_for_one_type_or_many(items: list) -> None:
    s = ORSet.empty()
    for i, element in enumerate(items):
        s = s.merge(s.add(element, actor=f"r{i}:1"))
    assert s.elements() == sorted(items, key=element_key)


def _reference_merge(x: ORSet, y: ORSet) -> ORSet:
    """The dot-store join over every element (what ORSet.merge computes in one pass when
    ``y`` is not small)."""
    out = {}
    for element in x.entries.keys() | y.entries.keys():
        a, b = x.entries.get(element, frozenset()), y.entries.get(element, frozenset())
        kept = (
            (a & b)
            | {d for d in a - b if d not in y.context}
            | {d for d in b - a if d not in x.context}
        )
        if kept:
            out[element] = frozenset(kept)
    return ORSet(out, x.context.union(y.context))


_OPS = st.lists(
    st.tuples(st.booleans(), st.sampled_from("abcdefgh"), st.sampled_from([EAST, WEST])),
    max_size=25,
)


def _replay(ops: list) -> tuple[ORSet, list[ORSet]]:
    s, deltas = ORSet.empty(), []
    for add, element, actor in ops:
        d = s.add(element, actor=actor) if add else s.remove(element)
        deltas.append(d)
        s = s.merge(d)
    return s, deltas


@given(_OPS, _OPS)
def test_orset_merge_of_a_small_delta_equals_the_join_over_every_element(
    mine_ops: list, their_ops: list
) -> None:
    mine, _ = _replay(mine_ops)
    theirs, deltas = _replay(their_ops)
    for other in [theirs, *deltas, *_replay(mine_ops)[1]]:  # concurrent and own deltas
        assert mine.merge(other) == _reference_merge(mine, other)
        assert other.merge(mine) == _reference_merge(other, mine)
        merged = mine.merge(other)
        assert merged.entries == _reference_merge(mine, other).entries
