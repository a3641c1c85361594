"""Issue 12: every value the kernel accepts fits the wire and the store, and every str it
accepts has a UTF-8 form; bad inputs are refused on entry with the kernel's own errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crdt import (
    COUNTER_MAX,
    HLC,
    LOGICAL_MAX,
    WALL_MS_MAX,
    CausalContext,
    ClockDriftError,
    InvalidTextError,
    LWWRegister,
    ORSet,
    PNCounter,
    Timestamp,
    VectorClock,
    decode,
)

LAWS = settings(settings.get_profile("crdt"))
NOW = 1_700_000_000_000
A = "us-east-1:1"

# -- ranges agree with the wire (proto) and the store (SQLite INTEGER) ----------------------


def test_ranges_match_the_proto_and_sqlite() -> None:
    assert LOGICAL_MAX == 2**32 - 1  # DeltaRecord.hlc_logical is uint32
    assert WALL_MS_MAX == COUNTER_MAX == 2**63 - 1  # SQLite INTEGER is signed 64-bit


@pytest.mark.parametrize(
    "args", [(0, LOGICAL_MAX + 1), (0, 2**32 + 1), (WALL_MS_MAX + 1, 0), (2**64 - 1, 0)]
)
def test_timestamp_outside_the_wire_ranges_is_refused(args: tuple[int, int]) -> None:
    with pytest.raises(ValueError):
        Timestamp(*args)


def test_timestamp_at_the_range_edges_is_accepted() -> None:
    assert Timestamp(WALL_MS_MAX, LOGICAL_MAX).to_list() == [WALL_MS_MAX, LOGICAL_MAX]


@pytest.mark.parametrize("delta_ms", [0, 1, 1000, 60_000])
@pytest.mark.parametrize("logical", [LOGICAL_MAX, LOGICAL_MAX - 1])
def test_remote_stamp_that_would_overflow_logical_is_refused_as_drift(
    delta_ms: int, logical: int
) -> None:
    """The issue's input: a peer's stamp (now + 1 s, 2**32 - 1), and its neighbours."""
    clock = HLC(max_drift_ms=60_000)
    clock.now(NOW)
    before = clock.last
    remote = Timestamp(NOW + delta_ms, logical)
    if logical < LOGICAL_MAX:
        assert clock.observe(remote, NOW) == Timestamp(NOW + delta_ms, LOGICAL_MAX)
        # the clock is now at the edge: the next local stamp carries into the wall
        assert clock.now(NOW) == Timestamp(NOW + delta_ms + 1, 0)
        return
    with pytest.raises(ClockDriftError) as info:
        clock.observe(remote, NOW)
    assert info.value.remote_logical == LOGICAL_MAX
    assert clock.last == before  # unchanged
    nxt = clock.now(NOW)
    assert nxt.logical <= LOGICAL_MAX


def test_max_logical_remote_is_accepted_once_physical_time_passes_it() -> None:
    clock = HLC()
    remote = Timestamp(NOW + 1000, LOGICAL_MAX)
    assert clock.observe(remote, NOW + 1001) == Timestamp(NOW + 1001, 0)


def test_local_logical_overflow_carries_into_the_wall() -> None:
    clock = HLC(last=Timestamp(NOW, LOGICAL_MAX))
    assert clock.now(NOW - 5) == Timestamp(NOW + 1, 0)
    clock = HLC(last=Timestamp(NOW, LOGICAL_MAX))
    assert clock.observe(Timestamp(NOW - 10, LOGICAL_MAX), NOW) == Timestamp(NOW + 1, 0)


def test_wall_past_its_range_raises_value_error() -> None:
    clock = HLC()
    with pytest.raises(ValueError):
        clock.now(WALL_MS_MAX + 1)
    clock = HLC(last=Timestamp(WALL_MS_MAX, LOGICAL_MAX))
    with pytest.raises(ValueError):
        clock.now(0)


@LAWS
@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.integers(0, 5),
            st.integers(0, 5),
            st.sampled_from([0, 1, LOGICAL_MAX - 1, LOGICAL_MAX]),
        ),
        max_size=30,
    )
)
def test_every_stamp_issued_fits_the_wire(events: list[tuple[bool, int, int, int]]) -> None:
    clock = HLC(max_drift_ms=3)
    previous = clock.last
    for is_receive, pt, remote_wall, remote_logical in events:
        if is_receive:
            try:
                stamp = clock.observe(Timestamp(remote_wall, remote_logical), pt)
            except ClockDriftError:
                assert clock.last == previous
                continue
        else:
            stamp = clock.now(pt)
        assert stamp > previous
        assert 0 <= stamp.logical <= LOGICAL_MAX and 0 <= stamp.wall_ms <= WALL_MS_MAX
        previous = stamp


@pytest.mark.parametrize(
    "make",
    [
        lambda: VectorClock({A: COUNTER_MAX + 1}),
        lambda: VectorClock({A: COUNTER_MAX}).increment(A),
        lambda: PNCounter({A: COUNTER_MAX + 1}),
        lambda: PNCounter({A: COUNTER_MAX}).increment(A),
        lambda: PNCounter(None, {A: COUNTER_MAX}).decrement(A),
        lambda: CausalContext({A: COUNTER_MAX + 1}),
        lambda: CausalContext(None, [(A, COUNTER_MAX + 1)]),
    ],
)
def test_counters_past_counter_max_are_refused(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


def test_counters_at_counter_max_encode_and_decode() -> None:
    for state in (VectorClock({A: COUNTER_MAX}), PNCounter({A: COUNTER_MAX}, {A: COUNTER_MAX})):
        assert decode(state.to_bytes()) == state


# -- strings without a UTF-8 form (lone surrogates) ------------------------------------------

LONE = ["\ud83d", "\udc00", "a\ud83db", "ok\udfff"]


def _entry_points(bad: str) -> list[Any]:
    stamp = Timestamp(1, 0)
    return [
        lambda: ORSet.empty().add(bad, actor=A),
        lambda: ORSet.empty().add("x", actor=bad),
        lambda: ORSet.empty().remove(bad),
        lambda: ORSet({bad: frozenset({(A, 1)})}, CausalContext({A: 1})),
        lambda: VectorClock({bad: 1}),
        lambda: VectorClock().increment(bad),
        lambda: PNCounter({bad: 1}),
        lambda: PNCounter(None, {bad: 1}),
        lambda: PNCounter().increment(bad),
        lambda: PNCounter().decrement(bad),
        lambda: CausalContext({bad: 1}),
        lambda: CausalContext(None, [(bad, 1)]),
        lambda: LWWRegister.empty().set(bad, actor=A, stamp=stamp),
        lambda: LWWRegister.empty().set("v", actor=bad, stamp=stamp),
        lambda: LWWRegister.empty().set({bad: 1}, actor=A, stamp=stamp),
        lambda: LWWRegister.empty().set([{"k": [bad]}], actor=A, stamp=stamp),
    ]


@pytest.mark.parametrize("bad", LONE)
def test_lone_surrogates_are_refused_on_entry(bad: str) -> None:
    for make in _entry_points(bad):
        with pytest.raises(InvalidTextError):
            make()


def test_invalid_text_error_is_a_value_error() -> None:
    assert issubclass(InvalidTextError, ValueError)
    assert not issubclass(InvalidTextError, UnicodeError)


# every code point, surrogates (category Cs) included
_ANY_CHAR = st.characters(exclude_categories=()) | st.sampled_from("\ud83d\udc00\ude00")


@LAWS
@given(st.text(_ANY_CHAR, max_size=8))
def test_any_str_the_kernel_accepts_encodes(text: str) -> None:
    """Accepted means encodable; a str with a lone surrogate is refused on entry."""
    try:
        states = [
            ORSet.empty().add(text, actor=A),
            LWWRegister.empty().set({text: text}, actor=A, stamp=Timestamp(1, 0)),
        ]
        if text:
            states += [VectorClock({text: 1}), PNCounter({text: 1})]
    except InvalidTextError:
        with pytest.raises(UnicodeEncodeError):
            text.encode("utf-8")
        return
    for state in states:
        assert decode(state.to_bytes()) == state
