"""Operational webhooks in the pure core: which transitions are events (one per
transition, none per attempt), and the payload shape."""

from __future__ import annotations

import itertools

import pytest

from regionsync.core.health import STATES, Health, HealthPolicy, step
from regionsync.core.operational import (
    HEALTH_TRANSITIONS,
    TYPES,
    health_transition,
    operational_payload,
    pressure_transition,
    region_transitions,
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
