"""Pure delivery policy: the endpoint health table, lanes, generations."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from regionsync.core.health import INPUTS, STATES, TABLE, Health, HealthPolicy, step
from regionsync.core.lanes import Lane, TokenBucket
from regionsync.core.model import Delivery, DeliveryStatus, delivery_join

P = HealthPolicy(failure_threshold=5, disable_after_s=100, probe_initial_s=1, probe_max_s=8)


def test_table_covers_every_pair() -> None:
    assert set(TABLE) == set(itertools.product(STATES, INPUTS))


def test_unknown_pair_raises() -> None:
    with pytest.raises(KeyError):
        step(Health("active"), "explode", 0, P)


def test_active_turns_failing_after_threshold_and_back_on_success() -> None:
    h = Health()
    for i in range(4):
        h = step(h, "failure", i, P)
        assert h.state == "active" and h.failures == i + 1
    h = step(h, "failure", 10, P)
    assert h.state == "failing" and h.failing_since_ms == 10 and h.next_probe_ms == 1010
    h = step(h, "success", 20, P)
    assert h == Health("active")


def test_exhausted_delivery_makes_failing_at_once() -> None:
    assert step(Health(), "exhausted", 5, P).state == "failing"


def test_probe_backoff_doubles_up_to_max() -> None:
    h = step(Health(), "exhausted", 0, P)
    probes = []
    for _ in range(5):
        h = step(h, "failure", h.next_probe_ms, P)  # each probe fails
        probes.append(h.probe_s)
    assert probes == [2, 4, 8, 8, 8]
    assert not h.probe_due(h.next_probe_ms - 1) and h.probe_due(h.next_probe_ms)


def test_a_probe_set_by_a_clock_ahead_is_due_at_once() -> None:
    """A probe never lies further ahead than its backoff; one that does was set by a
    clock that ran ahead (issue 41: restarted with a correct clock, or corrected to the
    cluster's), and waiting for it would stall the endpoint for the skew."""
    h = step(Health(), "exhausted", 600_000, P)  # set 10 minutes ahead of the clock below
    assert (h.next_probe_ms, h.probe_s) == (601_000, 1)
    assert not h.probe_due(600_500)  # within its backoff of this clock: waits
    assert h.probe_due(1_000)  # 600 s ahead with a 1 s backoff: due now


def test_only_a_probes_failure_doubles_the_backoff() -> None:
    """The attempts in flight when an endpoint turns failing (up to max_in_flight) fail
    together; each doubled the backoff, so 16 of them took it to probe_max_s at once
    (QA of 2026-12-02: 24 h after one burst)."""
    h = Health()
    for _ in range(16):  # one burst, all at t=10
        h = step(h, "failure", 10, P)
    assert (h.state, h.failures, h.probe_s, h.next_probe_ms) == ("failing", 16, 1, 1010)
    h = step(h, "failure", 500, P)  # one more attempt that started before it turned
    assert (h.probe_s, h.next_probe_ms) == (1, 1010)
    h = step(h, "failure", 1010, P)  # the probe
    assert (h.probe_s, h.next_probe_ms) == (2, 3010)
    # a failing view taken from the replicated state (no probe scheduled): its first
    # failure schedules one, the others of its burst do not move it
    h = Health("failing", failing_since_ms=0)
    h = step(step(h, "failure", 50, P), "failure", 50, P)
    assert (h.probe_s, h.next_probe_ms) == (2, 2050)


def test_long_failing_streak_disables() -> None:
    h = step(Health(), "exhausted", 0, P)
    h = step(h, "failure", 99_999, P)
    assert h.state == "failing"
    h = step(h, "failure", 100_000, P)
    assert h.state == "disabled"


@pytest.mark.parametrize("state", STATES)
def test_gone_disables_from_any_state(state: str) -> None:
    assert step(Health(state), "gone", 0, P).state == "disabled"


def test_pause_resume_and_reenable_reset_counters() -> None:
    h = Health("failing", failures=7, failing_since_ms=1)
    paused = step(h, "pause", 2, P)
    assert paused.state == "paused"
    assert step(paused, "failure", 3, P).state == "paused"
    assert step(paused, "resume", 4, P) == Health("active")
    assert step(Health("disabled", failures=9), "resume", 5, P) == Health("active")
    assert step(Health("disabled"), "success", 5, P).state == "disabled"


def test_token_bucket_rate_and_burst() -> None:
    b = TokenBucket.new(2.0, now_s=0.0)
    assert b.take(0.0) and b.take(0.0) and not b.take(0.0)
    assert b.wait_s(0.0) == pytest.approx(0.5)
    assert b.take(0.5) and not b.take(0.5)
    slow = TokenBucket.new(0.5, now_s=0.0)
    assert slow.take(0.0) and not slow.take(1.0) and slow.take(2.0)
    with pytest.raises(ValueError):
        TokenBucket.new(0, 0.0)


def test_lane_in_flight_cap() -> None:
    lane = Lane(TokenBucket.new(100.0, 0.0))
    assert lane.admit(100.0, 2, 0.0) and lane.admit(100.0, 2, 0.0)
    assert not lane.admit(100.0, 2, 0.0) and lane.full(2, 0.0)
    lane.release()
    assert lane.admit(100.0, 2, 0.0)


@pytest.mark.parametrize("spending", [True, False])
@pytest.mark.parametrize("tokens", [0.0, 0.5, 1.0, 4.5, 5.0, 500.0])
def test_lane_waits_for_a_group_once_dry(spending: bool, tokens: float) -> None:
    # every state (spending or not) by every kind of token level, at 500/s: a group is
    # 5 tokens (GROUP_S of the rate); a spending lane goes down to its last token
    lane = Lane(TokenBucket(500.0, 500.0, tokens, 0.0), spending=spending)
    assert lane.group() == 5.0
    wait, now_spending = lane.wait_s(0.0), lane.spending
    if tokens >= 5.0 or (spending and tokens >= 1.0):
        assert (wait, now_spending) == (0.0, True)
    else:
        assert wait == pytest.approx((5.0 - tokens) / 500.0) and not now_spending
        assert lane.full(64, 0.0) and not lane.admit(500.0, 64, 0.0)
        assert lane.wait_s(wait) == 0.0 and lane.spending  # the group is there


def test_lane_group_is_one_token_below_200_per_s() -> None:
    for rate, group in ((0.5, 1.0), (10.0, 1.0), (199.0, 1.0), (200.0, 2.0), (5000.0, 50.0)):
        lane = Lane(TokenBucket.new(rate, 0.0))
        assert lane.group() == group
    lane = Lane(TokenBucket(10.0, 10.0, 0.0, 0.0), spending=False)
    assert lane.wait_s(0.0) == pytest.approx(0.1)  # the plain bucket: one token


def test_lane_spends_groups_at_the_rate() -> None:
    # a backlog drained at 500/s: after the burst, starts come 5 at a time every 10 ms,
    # and no second after the burst holds more than the rate
    lane, now, starts = Lane(TokenBucket.new(500.0, 0.0)), 0.0, []
    while now < 3.0:
        while lane.admit(500.0, 10**6, now):
            starts.append(now)
            lane.release()
        now += max(lane.wait_s(now), 0.0005)
    after = [t for t in starts if t > 0.0]
    assert len(starts) - len(after) == 500  # the burst at once
    assert len(after) == pytest.approx(1500, abs=5)
    groups = sorted({round(t, 6) for t in after})
    assert len(groups) == pytest.approx(300, abs=2)  # not 1,500 wake-ups
    for t0 in (0.0, 1.0, 1.5, 2.0):
        assert len([t for t in after if t0 < t <= t0 + 1.0]) <= 500


def _d(gen: int, status: DeliveryStatus, attempts: int = 0) -> Delivery:
    return Delivery("dlv", "evt", "ep", "t", status, attempts, None, "r", 1, 1, gen)


def test_generations_supersede_and_join_is_a_semilattice() -> None:
    old = _d(0, DeliveryStatus.DEAD, 8)
    new = _d(1, DeliveryStatus.PENDING, 0)
    assert delivery_join(old, new) == new and delivery_join(new, old) == new
    states = [_d(g, s, a) for g in (0, 1) for s in DeliveryStatus for a in (0, 2)]
    states += [replace(_d(0, DeliveryStatus.PENDING, 2), region="x", next_attempt_at_ms=9)]
    states += [replace(_d(0, DeliveryStatus.PENDING, 2), updated_at_ms=5)]
    for a, b, c in itertools.product(states, repeat=3):
        assert delivery_join(a, b) == delivery_join(b, a)
        assert delivery_join(a, delivery_join(b, c)) == delivery_join(delivery_join(a, b), c)
        assert delivery_join(a, a) == a


def test_join_continues_from_the_state_with_more_attempts() -> None:
    # a custodian's pending state with more attempts carries its schedule and region
    origin = replace(_d(0, DeliveryStatus.PENDING, 1), next_attempt_at_ms=100)
    successor = replace(_d(0, DeliveryStatus.PENDING, 3), next_attempt_at_ms=900, region="s")
    assert delivery_join(origin, successor) == successor == delivery_join(successor, origin)
    done = _d(0, DeliveryStatus.DELIVERED, 2)
    assert delivery_join(successor, done) == done
