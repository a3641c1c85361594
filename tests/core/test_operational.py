"""Operational webhooks in the pure core: which transitions are events (one per
transition, none per attempt), and the payload shape."""

from __future__ import annotations

import itertools

import pytest

from regionsync.core.health import STATES, Health, HealthPolicy, step
from regionsync.core.operational import (
    HEALTH_TRANSITIONS,
    TYPES,
    HealthMark,
    health_report,
    health_transition,
    operational_event_id,
    operational_payload,
    pressure_transition,
    region_transitions,
    reporter,
)


def test_health_transition_table() -> None:
    assert health_transition("active", "failing") == "endpoint.failing"
    assert health_transition("active", "disabled") == "endpoint.disabled"
    assert health_transition("failing", "disabled") == "endpoint.disabled"
    assert health_transition("failing", "active") == "endpoint.recovered"
    for before, after in itertools.product(STATES, STATES):
        got = health_transition(before, after)
        if before == after:
            assert got is None  # no change, no event: never one per attempt
        if (before, after) in (("active", "paused"), ("paused", "active"),
                               ("disabled", "active")):  # fmt: skip
            assert got is None  # by hand, not a health change the owner is told of
        assert got is None or got in TYPES
    assert set(HEALTH_TRANSITIONS.values()) <= set(TYPES)
    with pytest.raises(ValueError):
        health_transition("active", "sleeping")


def test_a_failing_streak_is_one_event_per_state_change() -> None:
    """Drive core.health through a streak of failures, a recovery and a 410: events only
    where the state changes, whatever the number of attempts."""
    policy = HealthPolicy(failure_threshold=3, disable_after_s=100)
    h, now, events = Health(), 0, []
    inputs = ["failure"] * 10 + ["success"] * 3 + ["failure"] * 4 + ["gone"] + ["failure"] * 3
    for inp in inputs:
        now += 1000
        after = step(h, inp, now, policy)
        change = health_transition(h.state, after.state)
        if change is not None:
            events.append(change)
        h = after
    assert events == ["endpoint.failing", "endpoint.recovered", "endpoint.failing",
                      "endpoint.disabled"]  # fmt: skip


def test_failing_too_long_disables_once() -> None:
    policy = HealthPolicy(failure_threshold=1, disable_after_s=5)
    h, events = Health(), []
    for t in range(0, 20_000, 1000):
        after = step(h, "failure", t, policy)
        if (change := health_transition(h.state, after.state)) is not None:
            events.append((t, change))
        h = after
    assert events == [(0, "endpoint.failing"), (5000, "endpoint.disabled")]


def test_region_transitions() -> None:
    assert region_transitions(set(), set()) == []
    assert region_transitions(set(), {"eu", "ap"}) == [
        ("region.unreachable", "ap"), ("region.unreachable", "eu")]  # fmt: skip
    assert region_transitions({"eu"}, {"eu"}) == []  # still suspected: no new event
    assert region_transitions({"eu", "ap"}, {"ap", "us"}) == [
        ("region.reachable", "eu"), ("region.unreachable", "us")]  # fmt: skip


def test_pressure_transition() -> None:
    seq = [None, "accepting", "shedding", "critical_only", "overloaded", "shedding",
           "accepting", "accepting", "critical_only"]  # fmt: skip
    got = [pressure_transition(a, b) for a, b in itertools.pairwise(seq) if b is not None]
    assert got == [None, "backpressure.entered", None, None, None, "backpressure.left", None,
                   "backpressure.entered"]  # fmt: skip
    assert pressure_transition(None, "shedding") == "backpressure.entered"


def test_payload() -> None:
    p = operational_payload("endpoint.disabled", "us-east-1", 1_764_547_200_123,
                            {"tenant": "acme", "endpoint": "ep_1"})  # fmt: skip
    assert p == {
        "type": "endpoint.disabled",
        "region": "us-east-1",
        "at": "2025-12-01T00:00:00.123Z",
        "tenant": "acme",
        "endpoint": "ep_1",
    }
    with pytest.raises(ValueError):
        operational_payload("endpoint.exploded", "us-east-1", 0, {})


def test_health_report_ids_rest_on_the_previous_write() -> None:
    """Issue 43: a transition's id is the same for every region that saw it from the same
    state, whoever wrote it and when; the next episode gets another; recovered only when
    failing_since was cleared by a write of its own (a success), not by an API change."""
    w0, wa, wb, wr = (1, 0, "a:1"), (5, 0, "a:1"), (6, 0, "b:1"), (9, 0, "c:1")
    active = HealthMark("active", w0)
    by_a = health_report("ep_1", active, HealthMark("failing", wa))
    by_b = health_report("ep_1", active, HealthMark("failing", wb))
    assert by_a is not None and by_b is not None
    assert by_a.transition == by_b.transition and by_a.event_id == by_b.event_id
    assert by_a.event_id == operational_event_id(by_a.transition)
    assert (by_a.at_ms, by_a.actor) == (5, "a:1")
    other = health_report("ep_2", active, HealthMark("failing", wa))
    assert other is not None and other.transition != by_a.transition
    rec = health_report("ep_1", HealthMark("failing", wb), HealthMark("active", wr))
    assert rec is not None and rec.event_type == "endpoint.recovered"
    again = health_report("ep_1", HealthMark("active", wr), HealthMark("failing", (12, 0, "a:1")))
    assert again is not None and again.transition != by_a.transition
    reset = HealthMark("active", wr, manual=frozenset({wr}))  # a new url, with failing_since
    assert health_report("ep_1", HealthMark("failing", wb), reset) is None
    assert health_report("ep_1", active, HealthMark("paused", w0)) is None
    gone = health_report("ep_1", active, HealthMark("disabled", w0, (7, 0, "b:1")))
    assert gone is not None and gone.event_type == "endpoint.disabled"
    with pytest.raises(ValueError):
        health_report("ep_1", active, HealthMark("sleeping"))


def test_reporter_is_one_live_region_per_endpoint() -> None:
    regions = ["a", "b", "c"]
    chosen = {e: reporter(e, regions) for e in (f"ep_{i}" for i in range(60))}
    assert set(chosen.values()) == set(regions)  # spread over the regions
    for e, r in chosen.items():
        assert reporter(e, list(reversed(regions))) == r  # order-free
        rest = [x for x in regions if x != r]
        assert reporter(e, rest) in rest  # another region when it is suspected
