"""Retry decisions: schedule with jitter, Retry-After, final failures, 48 h deadline."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regionsync.core.model import Delivery, DeliveryStatus
from regionsync.core.retry import (
    DEFAULT_SCHEDULE_S,
    AttemptOutcome,
    OutcomeKind,
    due_now,
    max_step_ms,
    next_step,
)

OK = AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)
FAIL = AttemptOutcome(OutcomeKind.FAILED, status_code=500, reason="http_500")
T0 = 1_800_000_000_000


def test_success_is_delivered() -> None:
    d = next_step(OK, 1, T0, T0, 0.0)
    assert d.status is DeliveryStatus.DELIVERED and d.next_attempt_at_ms is None


def test_schedule_without_jitter() -> None:
    for n, delay in enumerate(DEFAULT_SCHEDULE_S, start=1):
        d = next_step(FAIL, n, T0, T0, 0.0)
        assert d.status is DeliveryStatus.PENDING
        assert d.next_attempt_at_ms == T0 + int(delay * 1000)
    assert next_step(FAIL, len(DEFAULT_SCHEDULE_S) + 1, T0, T0, 0.0).status is (DeliveryStatus.DEAD)


@settings(max_examples=200, derandomize=True)
@given(n=st.integers(1, len(DEFAULT_SCHEDULE_S)), jitter=st.floats(-1, 1))
def test_jitter_stays_within_20_percent(n: int, jitter: float) -> None:
    d = next_step(FAIL, n, T0, T0, jitter)
    base = DEFAULT_SCHEDULE_S[n - 1] * 1000
    assert d.next_attempt_at_ms is not None
    assert 0.8 * base - 1 <= d.next_attempt_at_ms - T0 <= 1.2 * base + 1


def test_retry_after_is_honoured_and_capped() -> None:
    slow = AttemptOutcome(OutcomeKind.FAILED, status_code=429, retry_after_s=120)
    assert next_step(slow, 1, T0, T0, 0.0).next_attempt_at_ms == T0 + 120_000
    huge = AttemptOutcome(OutcomeKind.FAILED, status_code=503, retry_after_s=10**9)
    assert next_step(huge, 1, T0, T0, 0.0, max_retry_after_s=600).next_attempt_at_ms == (
        T0 + 600_000
    )


def test_final_failure_is_dead() -> None:
    ssrf = AttemptOutcome(OutcomeKind.FAILED, reason="ssrf", final=True)
    assert next_step(ssrf, 1, T0, T0, 0.0).status is DeliveryStatus.DEAD


def test_never_past_48h_after_acceptance() -> None:
    late = T0 + 47 * 3600 * 1000
    assert next_step(FAIL, 6, late, T0, 0.0).status is DeliveryStatus.DEAD


def test_indeterminate_is_retried() -> None:
    timeout = AttemptOutcome(OutcomeKind.INDETERMINATE, reason="timeout")
    assert next_step(timeout, 1, T0, T0, 0.0).status is DeliveryStatus.PENDING


def test_jitter_out_of_range() -> None:
    with pytest.raises(ValueError):
        next_step(FAIL, 1, T0, T0, 2.0)


def test_max_step_is_the_largest_jittered_step_or_retry_after() -> None:
    assert max_step_ms([5, 300, 36000]) == 43_200_000  # 10 h + 20 %
    assert max_step_ms([1, 2]) == 3_600_000  # a Retry-After may ask for up to 1 h


@pytest.mark.parametrize(
    ("status", "nxt", "updated", "due"),
    [
        (DeliveryStatus.PENDING, 10_000, 9_000, True),  # its time has come
        (DeliveryStatus.PENDING, 10_001, 9_000, False),  # not yet, written in the past
        # written 10 minutes ahead of this clock (a region restarted with a corrected
        # clock, issue 41): that schedule is not this clock's, due at once
        (DeliveryStatus.PENDING, 610_005, 610_000, True),
        (DeliveryStatus.PENDING, 12_005, 12_000, False),  # ahead by the tolerance only
        (DeliveryStatus.PENDING, 12_005, 12_001, True),  # just past it
        (DeliveryStatus.PENDING, 10_000 + 5_000, 9_000, False),  # one step ahead
        (DeliveryStatus.PENDING, 10_000 + 5_001, 9_000, True),  # past the largest step
        (DeliveryStatus.DELIVERED, 0, 9_000, False),
        (DeliveryStatus.PENDING, None, 9_000, False),
    ],
)
def test_due_now_clamps_a_schedule_no_clock_here_could_have_set(
    status: DeliveryStatus, nxt: int | None, updated: int, due: bool
) -> None:
    d = Delivery("dlv_1", "evt_1", "ep_1", "acme", status, 1, nxt, "a", 1, updated)
    assert due_now(d, 10_000, 5_000, 2_000) is due
