"""core/clock_offset.py: samples, the kept sample, and the decision over every case."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regionsync.core.clock_offset import (
    ClockView,
    Sample,
    assess,
    keep_best,
    one_way_sample,
    round_trip_sample,
)
from regionsync.core.operational import clock_transition

W = 60_000  # window (failover_after_s)
S = 2_000  # suspect_ms
NOW = 1_000_000


def test_round_trip_sample_takes_the_midpoint() -> None:
    # we sent at 1000, the peer answered at its 5040, we got it at 1080: it is 4000 ahead
    assert round_trip_sample(5040, 1000, 1080) == Sample(4000, 40, 1080)
    assert round_trip_sample(0, 1000, 1080) is None  # an older release: no clock
    assert round_trip_sample(5040, 1000, 999) is None  # our clock went back


def test_a_round_trip_longer_than_the_bound_gives_no_sample() -> None:
    """A reply read 8.9 s after its Hello was sent (a busy loop on either side, issue
    42): its half round trip alone could pass the suspect threshold, so no sample."""
    assert round_trip_sample(5040, 1000, 1080, 2_000) == Sample(4000, 40, 1080)
    assert round_trip_sample(5040, 1000, 3000, 2_000) == Sample(3040, 1000, 3000)  # at it
    assert round_trip_sample(5040, 1000, 3001, 2_000) is None
    assert round_trip_sample(5040, 1000, 9900, 2_000) is None
    assert round_trip_sample(5040, 1000, 9900) == Sample(-410, 4450, 9900)  # no bound


def test_one_way_sample() -> None:
    assert one_way_sample(5000, 1000) == Sample(4000, None, 1000)
    assert one_way_sample(0, 1000) is None


@pytest.mark.parametrize(
    ("old", "new", "kept"),
    [
        (None, None, None),
        (None, Sample(1, None, 10), "new"),
        (Sample(1, 5, 10), None, "old"),
        (Sample(1, 5, 10), Sample(2, 4, 20), "new"),  # more certain
        (Sample(1, 5, 10), Sample(2, 5, 20), "new"),  # as certain, newer
        (Sample(1, 5, 10), Sample(2, 9, 20), "old"),  # less certain, old still recent
        (Sample(1, 5, 10), Sample(2, None, 20), "old"),  # one-way
        (Sample(1, 5, 10), Sample(2, None, 10 + W + 1), "new"),  # the old is stale
        # half a window old: replaced before it ages out (issue 41)
        (Sample(1, 5, 10), Sample(2, None, 10 + W // 2 + 1), "new"),
        (Sample(1, 5, 10), Sample(2, None, 10 + W // 2), "old"),
        (Sample(1, None, 10), Sample(2, None, 20), "new"),
    ],
)
def test_keep_best(old: Sample | None, new: Sample | None, kept: str | None) -> None:
    want = {"old": old, "new": new, None: None}[kept]
    assert keep_best(old, new, W) == want


def _view(offsets: dict[str, int], was: str = "ok", at: int = NOW, regions: int = 0) -> ClockView:
    samples = {p: Sample(o, 10, at) for p, o in offsets.items()}
    return assess(samples, NOW, W, S, "me", was, regions or len(offsets) + 1)


@pytest.mark.parametrize(
    ("offsets", "error", "status", "reference"),
    [
        ({}, 0, "ok", "me"),  # alone: nothing to compare
        ({"b": 100}, 0, "ok", "me"),  # two: the lower clock is the reference
        # two regions that disagree: no majority, each keeps its own clock
        ({"b": -600_000}, 0, "ok", None),
        ({"b": 600_000}, 0, "ok", None),
        ({"b": -600_000, "c": -600_010}, 600_000, "suspect", "b"),  # ahead of both
        ({"b": 600_000, "c": 599_990}, -599_990, "suspect", "c"),  # behind both
        ({"b": -600_000, "c": 10}, 0, "ok", "me"),  # b is wrong, not us
        ({"b": 1_500, "c": 1_900}, -1_500, "ok", "b"),  # within the threshold
        ({"b": 2_001, "c": 2_500}, -2_001, "suspect", "b"),  # just past it
        ({"b": 5, "c": 10, "d": -600_000}, 0, "ok", "me"),  # four: the lower middle
        ({"b": -5, "c": -10, "d": 600_000}, 5, "ok", "b"),
    ],
)
def test_assess(offsets: dict[str, int], error: int, status: str, reference: str | None) -> None:
    v = _view(offsets)
    assert (v.error_ms, v.status, v.reference) == (error, status, reference)
    assert v.correction_ms == (-error if status == "suspect" else 0)
    assert v.offsets == offsets


def test_stale_peers_are_not_counted() -> None:
    samples = {"b": Sample(-600_000, 10, NOW - W - 1), "c": Sample(0, 10, NOW)}
    v = assess(samples, NOW, W, S, "me", regions=3)
    assert v.offsets == {"c": 0} and v.status == "ok"


@pytest.mark.parametrize(
    ("offsets", "regions", "error", "status", "reference"),
    [
        # three regions, the correct peer c not (or no longer) sampled, b 10 min behind:
        # b alone is no majority, this clock stays (issue 41: correct regions said skewed)
        ({"b": -600_000}, 3, 0, "ok", None),
        ({"b": 600_000}, 3, 0, "ok", None),
        # the same with c heard: two of three agree on this clock
        ({"b": -600_000, "c": 3}, 3, 0, "ok", "me"),
        # this clock is the one wrong: b and c agree, a majority of three
        ({"b": -600_000, "c": -600_003}, 3, 600_000, "suspect", "b"),
        # two of five agree that this clock is wrong: a minority, kept
        ({"b": -600_000, "c": -600_000}, 5, 0, "ok", None),
        # three of five (this one not among them): corrected
        ({"b": -600_000, "c": -600_000, "d": -600_001}, 5, 600_000, "suspect", "b"),
        # four regions split two and two: no majority
        ({"b": 5, "c": -600_000, "d": -600_000}, 4, 0, "ok", None),
        # two regions that agree: this clock (the lower) is the reference
        ({"b": 100}, 2, 0, "ok", "me"),
        # alone (peers configured, none heard): this clock
        ({}, 3, 0, "ok", None),
    ],
)
def test_a_node_corrects_itself_only_on_a_majority(
    offsets: dict[str, int], regions: int, error: int, status: str, reference: str | None
) -> None:
    v = _view(offsets, regions=regions)
    assert (v.error_ms, v.status, v.reference) == (error, status, reference)
    assert v.correction_ms == (-error if status == "suspect" else 0)


def test_a_suspect_clock_without_a_majority_returns_to_its_own() -> None:
    # was suspect (b and c agreed); c's sample aged out: no majority any more
    samples = {"b": Sample(-600_000, 10, NOW), "c": Sample(-600_000, 10, NOW - W - 1)}
    v = assess(samples, NOW, W, S, "me", "suspect", 3)
    assert (v.status, v.correction_ms) == ("ok", 0)


@pytest.mark.parametrize(("was", "lead", "status"), [
    ("ok", 1_500, "ok"), ("suspect", 1_500, "suspect"),  # hysteresis: back at S / 2
    ("suspect", 900, "ok"), ("ok", 2_500, "suspect"),
])  # fmt: skip
def test_a_suspect_clock_is_ok_again_only_well_within_the_threshold(
    was: str, lead: int, status: str
) -> None:
    assert _view({"b": -lead, "c": -lead}, was).status == status


@given(st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=6))
def test_every_region_picks_the_same_reference_clock(clocks: list[int]) -> None:
    """Region i sees offsets clock_j - clock_i: all pick the same clock (the lower
    median), so all stamp from one time."""
    refs, kept = set(), set()
    for i, mine in enumerate(clocks):
        offsets = {f"r{j}": c - mine for j, c in enumerate(clocks) if j != i}
        samples = {p: Sample(o, 0, NOW) for p, o in offsets.items()}
        v = assess(samples, NOW, W, S, f"r{i}", regions=len(clocks))
        kept.add(v.reference is None)
        refs.add(mine - v.error_ms)
    assert len(kept) == 1  # all find the majority, or none does
    if kept == {False}:
        assert refs == {sorted(clocks)[(len(clocks) - 1) // 2]}


@pytest.mark.parametrize(("before", "after", "event"), [
    ("ok", "ok", None), ("suspect", "suspect", None),
    ("ok", "suspect", "region.clock_skewed"), ("suspect", "ok", "region.clock_ok"),
])  # fmt: skip
def test_clock_transition(before: str, after: str, event: str | None) -> None:
    assert clock_transition(before, after) == event


def test_clock_transition_rejects_an_unknown_status() -> None:
    with pytest.raises(ValueError, match="unknown clock status"):
        clock_transition("ok", "bad")


def test_a_peer_heard_every_heartbeat_is_never_unsampled() -> None:
    """c (correct) answered a Hello once (a round trip, certain), then acks every 5 s
    (one-way); b, 10 minutes behind, too. Deciding at each of b's samples, this correct
    clock is never found wrong (issue 41: with c's round trip kept until it aged out, b
    alone was the lower middle at the window's edge)."""
    kept: dict[str, Sample | None] = {"c": Sample(0, 1, NOW), "b": Sample(-600_000, 1, NOW)}
    for t in range(NOW + 5_000, NOW + 4 * W, 5_000):
        kept["c"] = keep_best(kept["c"], one_way_sample(t + 3, t), W)
        kept["b"] = keep_best(kept["b"], one_way_sample(t - 600_000, t + 1), W)
        samples = {p: s for p, s in kept.items() if s is not None}
        v = assess(samples, t + 1, W, S, "me", "ok", 3)
        assert (v.status, v.error_ms, set(v.offsets)) == ("ok", 0, {"b", "c"}), t
