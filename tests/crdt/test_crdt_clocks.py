"""Unit tests for the HLC, Timestamp, VectorClock order and CausalContext exactness."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crdt import HLC, CausalContext, ClockDriftError, Timestamp, VectorClock

LAWS = settings(settings.get_profile("crdt"))

# -- Timestamp --------------------------------------------------------------------------------


def test_timestamp_orders_by_wall_then_logical() -> None:
    assert Timestamp(1, 9) < Timestamp(2, 0) < Timestamp(2, 1)
    assert Timestamp(5, 5) == Timestamp(5, 5)
    assert Timestamp.from_list(Timestamp(7, 3).to_list()) == Timestamp(7, 3)


@pytest.mark.parametrize("args", [(-1, 0), (0, -1), (1.5, 0), (True, 0), (2**64, 0)])
def test_timestamp_rejects_bad_fields(args: tuple[object, object]) -> None:
    with pytest.raises(ValueError):
        Timestamp(*args)  # type: ignore[arg-type]


def test_timestamp_is_frozen() -> None:
    with pytest.raises(AttributeError):
        Timestamp(1, 0).wall_ms = 2  # type: ignore[misc]


# -- HLC --------------------------------------------------------------------------------------


def test_now_follows_physical_time_and_resets_logical() -> None:
    clock = HLC()
    assert clock.now(1000) == Timestamp(1000, 0)
    assert clock.now(1000) == Timestamp(1000, 1)
    assert clock.now(1001) == Timestamp(1001, 0)
    assert clock.last == Timestamp(1001, 0)


def test_now_is_monotonic_when_physical_time_goes_backwards() -> None:
    clock = HLC()
    first = clock.now(5000)
    second = clock.now(4000)  # NTP step backwards
    third = clock.now(0)
    assert first < second < third
    assert second == Timestamp(5000, 1) and third == Timestamp(5000, 2)


@LAWS
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 50), st.integers(0, 3)), max_size=40))
def test_hlc_is_strictly_monotonic_and_dominates_what_it_saw(
    events: list[tuple[bool, int, int]],
) -> None:
    clock = HLC(max_drift_ms=10)
    previous = clock.last
    for is_receive, pt, remote_logical in events:
        if is_receive:
            remote = Timestamp(pt + 5, remote_logical)
            stamp = clock.observe(remote, pt)
            assert stamp > remote
        else:
            stamp = clock.now(pt)
        assert stamp > previous
        assert stamp.wall_ms >= pt
        previous = stamp


@pytest.mark.parametrize(
    ("last", "remote", "pt", "expected"),
    [
        # remote ahead: take its wall time and counter + 1
        (Timestamp(100, 3), Timestamp(200, 7), 150, Timestamp(200, 8)),
        # local ahead of both: keep wall, counter + 1
        (Timestamp(300, 3), Timestamp(200, 7), 150, Timestamp(300, 4)),
        # local and remote tie ahead of physical: max of counters + 1
        (Timestamp(200, 3), Timestamp(200, 7), 150, Timestamp(200, 8)),
        (Timestamp(200, 9), Timestamp(200, 7), 150, Timestamp(200, 10)),
        # physical ahead of both: counter resets
        (Timestamp(100, 3), Timestamp(120, 7), 150, Timestamp(150, 0)),
    ],
)
def test_observe_follows_the_receive_rule(
    last: Timestamp, remote: Timestamp, pt: int, expected: Timestamp
) -> None:
    clock = HLC(last=last)
    assert clock.observe(remote, pt) == expected
    assert clock.last == expected


def test_drift_is_rejected_and_leaves_the_clock_unchanged() -> None:
    clock = HLC(max_drift_ms=1000, last=Timestamp(500, 2))
    with pytest.raises(ClockDriftError) as info:
        clock.observe(Timestamp(10_001, 0), 9000)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.remote_ms, err.physical_ms, err.max_drift_ms) == (10_001, 9000, 1000)
    assert clock.last == Timestamp(500, 2)
    # exactly at the bound is accepted
    assert clock.observe(Timestamp(10_000, 0), 9000) == Timestamp(10_000, 1)


def test_clamp_takes_a_stamp_past_drift_without_passing_the_bound() -> None:
    clock = HLC(max_drift_ms=1000, last=Timestamp(500, 2))
    got = clock.observe_parts(600_000, 7, 9000, clamp=True)  # ten minutes ahead: no error
    assert got == Timestamp(10_000, 0) == clock.last  # physical + max_drift, as `now` would
    assert clock.observe_parts(600_000, 7, 9000, clamp=True) == Timestamp(10_000, 1)
    assert clock.now(9001) == Timestamp(10_000, 2)  # still monotonic
    # within the bound, clamp changes nothing
    a, b = HLC(1000, Timestamp(500, 2)), HLC(1000, Timestamp(500, 2))
    assert a.observe_parts(9500, 3, 9000, clamp=True) == b.observe_parts(9500, 3, 9000)


def test_clamp_carries_a_remote_logical_at_the_maximum() -> None:
    clock = HLC(max_drift_ms=1000, last=Timestamp(500, 2))
    got = clock.observe_parts(9500, 2**32 - 1, 9000, clamp=True)
    assert got == Timestamp(9501, 0) == clock.last
    with pytest.raises(ClockDriftError):
        HLC(1000, Timestamp(500, 2)).observe_parts(9500, 2**32 - 1, 9000)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 10**6), st.integers(0, 5), st.integers(0, 10**7),
    st.integers(0, 2**32 - 1), st.integers(0, 10**6), st.integers(0, 10_000),
)  # fmt: skip
def test_clamp_never_moves_the_clock_past_physical_plus_drift(
    last_wall: int, last_logical: int, wall: int, logical: int, pt: int, drift: int
) -> None:
    clock = HLC(drift, Timestamp(last_wall, last_logical))
    got = clock.observe_parts(wall, logical, pt, clamp=True)
    assert got == clock.last > Timestamp(last_wall, last_logical)
    assert got.wall_ms <= max(last_wall, pt + drift + 1)
    if wall - pt <= drift and logical < 2**32 - 1:  # within the bound: after the remote
        assert got > Timestamp(wall, logical)


def test_hlc_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        HLC(max_drift_ms=-1)
    with pytest.raises(ValueError):
        HLC().now(-5)
    with pytest.raises(TypeError):
        HLC().observe((1, 0), 5)  # type: ignore[arg-type]


_EDGE_WALL = st.sampled_from([0, 1, 149, 150, 151, 2**63 - 2, 2**63 - 1])
_EDGE_LOGICAL = st.sampled_from([0, 1, 6, 7, 2**32 - 2, 2**32 - 1])
_BAD = st.sampled_from([-1, True, 1.5, 2**32, 2**63, 2**64, "7", None])


def _reference(last: Timestamp, wall: object, logical: object, pt: object, drift: int):
    """The receive rule written out plainly (HLC paper, Algorithm 2, with the wire's ranges
    and carry): ``("stamp", Timestamp)`` or ``("drift" | "value", None)``."""
    try:
        remote = Timestamp(wall, logical)  # type: ignore[arg-type]
    except ValueError:
        return "value", None
    if type(pt) is not int or not 0 <= pt <= 2**63 - 1:
        return "value", None
    if remote.wall_ms - pt > drift:
        return "drift", None
    new_wall = max(last.wall_ms, remote.wall_ms, pt)
    if new_wall == remote.wall_ms and remote.logical >= 2**32 - 1:
        return "drift", None
    if new_wall == last.wall_ms == remote.wall_ms:
        new_logical = max(last.logical, remote.logical) + 1
    elif new_wall == last.wall_ms:
        new_logical = last.logical + 1
    elif new_wall == remote.wall_ms:
        new_logical = remote.logical + 1
    else:
        new_logical = 0
    if new_logical > 2**32 - 1:
        new_wall, new_logical = new_wall + 1, 0
    try:
        return "stamp", Timestamp(new_wall, new_logical)
    except ValueError:
        return "value", None


def _outcome(clock: HLC, call) -> tuple[str, Timestamp | None]:
    before = clock.last
    try:
        stamp = call()
    except ClockDriftError:
        assert clock.last == before
        return "drift", None
    except ValueError:
        assert clock.last == before
        return "value", None
    # a stamp built without Timestamp's checks is a valid, equal, hashable Timestamp
    assert type(stamp) is Timestamp and stamp == Timestamp(stamp.wall_ms, stamp.logical)
    assert hash(stamp) == hash(Timestamp(stamp.wall_ms, stamp.logical))
    assert clock.last == stamp
    return "stamp", stamp


@LAWS
@given(
    st.tuples(_EDGE_WALL | st.integers(0, 300), _EDGE_LOGICAL | st.integers(0, 9)),
    st.one_of(_EDGE_WALL, st.integers(0, 300), _BAD),
    st.one_of(_EDGE_LOGICAL, st.integers(0, 9), _BAD),
    st.one_of(_EDGE_WALL, st.integers(0, 300), _BAD),
    st.sampled_from([0, 10, 2**63 - 1]),
)
@example((100, 0), 150, 2**32 - 1, 150, 10)  # the remote's counter cannot be passed on
@example((150, 2**32 - 1), 150, 3, 140, 10)  # the local counter carries into the wall
@example((2**63 - 1, 2**32 - 1), 0, 0, 0, 10)  # ... past WALL_MS_MAX: ValueError
@example((200, 9), 200, 7, 150, 10)
@example((100, 3), 120, 7, 150, 10)
@example((100, 0), 120, 2**32, 150, 10)  # a counter the wire cannot carry
def test_observe_and_observe_parts_follow_the_receive_rule(
    last: tuple[int, int], wall: object, logical: object, pt: object, drift: int
) -> None:
    """``observe`` and ``observe_parts`` (the replica's path, which skips building the
    remote stamp and the result's checks) give the rule's stamp, or its error with the
    clock unchanged, at the edges of the wire's ranges too."""
    want = _reference(Timestamp(*last), wall, logical, pt, drift)
    parts = HLC(drift, Timestamp(*last))
    assert _outcome(parts, lambda: parts.observe_parts(wall, logical, pt)) == want  # type: ignore[arg-type]
    try:
        remote = Timestamp(wall, logical)  # type: ignore[arg-type]
    except ValueError:
        return  # ``observe`` takes a built stamp
    whole = HLC(drift, Timestamp(*last))
    assert _outcome(whole, lambda: whole.observe(remote, pt)) == want  # type: ignore[arg-type]


# -- VectorClock ------------------------------------------------------------------------------


def test_vector_clock_compare() -> None:
    a1 = VectorClock({"a": 1})
    a2b1 = VectorClock({"a": 2, "b": 1})
    b1 = VectorClock({"b": 1})
    assert a1.compare(a2b1) == "before"
    assert a2b1.compare(a1) == "after"
    assert a1.compare(b1) == "concurrent"
    assert a1.compare(VectorClock({"a": 1, "z": 0})) == "equal"
    assert a1 <= a2b1 and not a2b1 <= a1
    assert a2b1.dominates(a1) and a1.dominates(a1) and not a1.dominates(b1)
    assert VectorClock().compare(VectorClock()) == "equal"


def test_vector_clock_drops_zeros_and_increment_is_a_delta() -> None:
    assert VectorClock({"a": 0}) == VectorClock()
    clock = VectorClock({"a": 2, "b": 1})
    delta = clock.increment("a")
    assert delta == VectorClock({"a": 3})
    assert clock.merge(delta).value() == {"a": 3, "b": 1}
    assert clock.value() == {"a": 2, "b": 1}  # unchanged
    assert clock.get("zz") == 0
    assert list(clock.items()) == [("a", 2), ("b", 1)]


@pytest.mark.parametrize("entries", [{"a": -1}, {"a": 1.0}, {"": 1}, {"a": True}])
def test_vector_clock_rejects_bad_entries(entries: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        VectorClock(entries)  # type: ignore[arg-type]


def test_vector_clock_rejects_non_str_actor() -> None:
    with pytest.raises(TypeError):
        VectorClock({1: 1})  # type: ignore[dict-item]


# -- CausalContext ----------------------------------------------------------------------------


def test_causal_context_is_exact() -> None:
    ctx = CausalContext.from_dots([("a", 5)])
    assert ctx.contains(("a", 5))
    assert not any(ctx.contains(("a", c)) for c in range(1, 5))
    assert ctx.max("a") == 5 and ctx.max("b") == 0
    assert ctx.vector == {} and ctx.cloud == frozenset({("a", 5)})


def test_causal_context_compacts_contiguous_dots() -> None:
    ctx = CausalContext.from_dots([("a", 3), ("a", 1), ("b", 2)])
    assert ctx.vector == {"a": 1} and ctx.cloud == frozenset({("a", 3), ("b", 2)})
    ctx = ctx.add(("a", 2))
    assert ctx.vector == {"a": 3} and ctx.cloud == frozenset({("b", 2)})
    assert ctx.union(CausalContext({"b": 1})) == CausalContext({"a": 3, "b": 2})
    assert ctx.max("b") == 2


@LAWS
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 8)), max_size=20))
def test_causal_context_holds_exactly_the_dots_added(dots: list[tuple[str, int]]) -> None:
    half = len(dots) // 2
    built = CausalContext.from_dots(dots[:half]).union(CausalContext.from_dots(dots[half:]))
    one_by_one = CausalContext()
    for dot in reversed(dots):
        one_by_one = one_by_one.add(dot)
    assert built == one_by_one and hash(built) == hash(one_by_one)
    assert set(built.dots()) == set(dots)
    for actor in "abc":
        assert built.max(actor) == max([c for a, c in dots if a == actor], default=0)
