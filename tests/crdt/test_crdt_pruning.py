"""Pruning laws for every CRDT type (crdt._prune), under hypothesis.

The removed actor (ACTORS[2]) writes in a first phase only; then every replica merges
every other (the actor is retired and settled, what the node waits for before it prunes);
then the live actors go on writing and syncing. Pools hold full replica states and their
join, the states a node prunes (stored states, and received states before merging).
"""

from __future__ import annotations

from functools import reduce
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from crdt import RETIRED, LWWRegister, ORSet, PNCounter, Timestamp, VectorClock, prune, prune_all

LAWS = settings(settings.get_profile("crdt"))
ACTORS = ("us-east-1:1", "eu-west-1:1", "ap-south-1:2")  # as in conftest.py
REMOVED, INTO = ACTORS[2], ACTORS[0]
TypeSpec = Any  # conftest.TypeSpec (the `spec` fixture)


def run(spec: TypeSpec, replicas: list[Any], steps: list[Any]) -> list[Any]:
    """("op", r, op): replica r applies op as its actor; ("state", s, d): d merges s."""
    replicas = list(replicas)
    for step in steps:
        if step[0] == "op":
            _, r, op = step
            replicas[r] = replicas[r].merge(spec.apply(replicas[r], op, ACTORS[r]))
        else:
            replicas[step[2]] = replicas[step[2]].merge(replicas[step[1]])
    return replicas


def settled_states(spec: TypeSpec, data: st.DataObject) -> list[Any]:
    """Replica states after a retired-and-settled history, plus their join."""
    replica = st.integers(0, len(ACTORS) - 1)
    live = st.integers(0, 1)
    before = data.draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("op"), replica, spec.ops),
                st.tuples(st.just("state"), replica, replica),
            ),
            max_size=10,
        ),
        label="before",
    )
    empty = spec.cls.empty()
    settled = reduce(lambda a, b: a.merge(b), run(spec, [empty] * len(ACTORS), before))
    after = data.draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("op"), live, spec.ops), st.tuples(st.just("state"), live, live)
            ),
            max_size=8,
        ),
        label="after",
    )
    replicas = run(spec, [settled] * len(ACTORS), after)
    pool = [*replicas, reduce(lambda a, b: a.merge(b), replicas)]
    # An OR-Set's precondition: the states agree on which of REMOVED's dots are present
    # (the node prunes once every region acknowledged a state holding none, or the same).
    assume(len({live_removed_dots(s) for s in pool}) == 1)
    return pool


def live_removed_dots(state: Any) -> frozenset[Any]:
    if not isinstance(state, ORSet):
        return frozenset()
    return frozenset(d for dots in state.entries.values() for d in dots if d[0] == REMOVED)


def actors_in(state: Any) -> set[str]:
    if isinstance(state, VectorClock):
        return set(state)
    if isinstance(state, PNCounter):
        return set(state.p) | set(state.n)
    if isinstance(state, ORSet):
        return {a for a, _ in state.context.dots()}
    return set(state.clock)


@LAWS
@given(data=st.data())
def test_prune_then_merge_equals_merge_then_prune(spec: TypeSpec, data: st.DataObject) -> None:
    pool = settled_states(spec, data)
    a = data.draw(st.sampled_from(pool))
    b = data.draw(st.sampled_from(pool))
    expected = prune(a.merge(b), REMOVED, INTO)
    assert prune(a, REMOVED, INTO).merge(prune(b, REMOVED, INTO)) == expected
    # A replica that pruned meets one that did not: it prunes what it receives first.
    assert prune(a, REMOVED, INTO).merge(prune(b, REMOVED, INTO)).to_bytes() == (
        expected.to_bytes()
    )


@LAWS
@given(data=st.data())
def test_prune_keeps_the_value_is_idempotent_and_deterministic(
    spec: TypeSpec, data: st.DataObject
) -> None:
    for state in settled_states(spec, data):
        pruned = prune(state, REMOVED, INTO)
        if not isinstance(state, VectorClock):  # a version vector's value is its entries
            assert pruned.value() == state.value()
        assert prune(pruned, REMOVED, INTO) == pruned
        assert prune(type(state).from_bytes(state.to_bytes()), REMOVED, INTO).to_bytes() == (
            pruned.to_bytes()
        )
        if not live_removed_dots(state):  # an OR-Set keeps them while one is present
            assert REMOVED not in actors_in(pruned)
        assert actors_in(pruned) <= actors_in(state) | {INTO}


@LAWS
@given(data=st.data())
def test_pruned_states_keep_converging_with_new_writes(spec: TypeSpec, data: st.DataObject) -> None:
    """After pruning, the live actors' writes apply as before (a pruned state is a state)."""
    pool = settled_states(spec, data)
    a = prune(data.draw(st.sampled_from(pool)), REMOVED, INTO)
    op = data.draw(spec.ops)
    delta = spec.apply(a, op, ACTORS[1])
    assert a.merge(delta).value() == spec.model(a.value(), op, ACTORS[1])


def test_orset_drops_removed_dots_once_their_elements_are_gone() -> None:
    s = ORSet.empty()
    s = s.merge(s.add("x", actor=REMOVED))
    s = s.merge(s.add("y", actor=REMOVED))
    s = s.merge(s.add("z", actor=INTO))
    assert prune(s, REMOVED, INTO) == s
    s = s.merge(s.remove("x"))
    assert prune(s, REMOVED, INTO) == s  # "y" still holds a dot of REMOVED
    s = s.merge(s.remove("y"))
    gone = prune(s, REMOVED, INTO)
    assert gone.value() == {"z"} and {a for a, _ in gone.context.dots()} == {INTO}


def test_counter_collapses_into_the_live_actor() -> None:
    c = PNCounter({REMOVED: 5, INTO: 2}, {REMOVED: 1})
    assert prune(c, REMOVED, INTO) == PNCounter({INTO: 7}, {INTO: 1})


def test_register_collapses_to_its_winner_when_only_the_removed_entry_split_it() -> None:
    base = LWWRegister.empty()
    w1 = base.set("r", actor=REMOVED, stamp=Timestamp(9, 0))
    w2 = base.set("x", actor=INTO, stamp=Timestamp(1, 0))
    both = w1.merge(w2)
    assert both.conflicts == 2
    pruned = prune(both, REMOVED, INTO)
    assert pruned.value() == "r" and pruned.conflicts == 1
    assert REMOVED not in pruned.clock


def test_prune_all_applies_each_retirement_and_rejects_other_types() -> None:
    vc = VectorClock({"a": 1, "b": 2, "c": 3})
    assert prune_all(vc, {"a": "c", "b": "c"}) == VectorClock({"c": 3})
    with pytest.raises(TypeError):
        prune(object(), "a", "b")  # type: ignore[type-var]
    with pytest.raises(ValueError):
        prune(vc, "", "b")


def test_a_retired_entry_absorbs_the_plain_one_so_a_stale_replica_counts_it_once() -> None:
    """Issue 40's race: one process retires REMOVED (its total kept under RETIRED +
    REMOVED); another, which has not read the retirement, merges its own stale state with
    the retired one. A collapse into a shared sink (prune into ``~retired:0``) counts
    the total twice there; the retired entry counts it once, whichever merges first."""
    stale = PNCounter({REMOVED: 3, INTO: 1}, {REMOVED: 1})
    shared = prune(stale, REMOVED, "~retired:0")
    assert shared.merge(stale).value() == 2 * stale.value() - 1  # the old collapse: +2
    retired = stale.retire(REMOVED)
    assert retired.p == {INTO: 1, RETIRED + REMOVED: 3} and retired.value() == stale.value()
    for a, b in ((retired, stale), (stale, retired)):
        assert a.merge(b) == retired and a.merge(b).value() == stale.value()
    assert retired.retire(REMOVED) == retired
    # the retired actor's plain entry growing later (a record in flight) still counts once
    later = stale.merge(stale.increment(REMOVED, 2))
    assert retired.merge(later).value() == later.value()
    both = retired.merge(later)
    assert both.merge(both.increment(REMOVED)).p[RETIRED + REMOVED] == 6  # counts on
    with pytest.raises(ValueError):
        retired.retire(RETIRED + REMOVED)


@LAWS
@given(data=st.data())
def test_counters_retired_anywhere_count_every_total_once(data: st.DataObject) -> None:
    """Replicas increment, retire any actor at any time (each on its own schedule) and
    sync in any order: the join of all counts every actor's increments exactly once."""
    replica = st.integers(0, len(ACTORS) - 1)
    steps = data.draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("inc"), replica, st.integers(1, 5)),
                st.tuples(st.just("retire"), replica, replica),
                st.tuples(st.just("state"), replica, replica),
            ),
            max_size=20,
        )
    )
    replicas, total = [PNCounter()] * len(ACTORS), 0
    for kind, r, x in steps:
        if kind == "inc":
            replicas[r] = replicas[r].merge(replicas[r].increment(ACTORS[r], x))
            total += x
        elif kind == "retire":
            replicas[r] = replicas[r].retire(ACTORS[x])
        else:
            replicas[x] = replicas[x].merge(replicas[r])
    joined = reduce(lambda a, b: a.merge(b), replicas)
    assert joined.value() == total
    assert reduce(lambda a, b: a.merge(b), reversed(replicas)) == joined
