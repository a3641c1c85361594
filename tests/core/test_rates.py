"""core.rates.CounterRate: the cluster-wide publish rate from counter samples."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regionsync.core.rates import CounterRate


def test_rate_over_the_window() -> None:
    r = CounterRate(window_s=60)
    assert r.rate() is None
    r.observe(0.0, 100)
    assert r.rate() is None  # one sample
    r.observe(0.5, 110)
    assert r.rate() is None  # under min_span_s
    r.observe(10.0, 300)
    assert r.rate() == pytest.approx(20.0)
    for t in range(15, 121, 5):  # 20/s for two minutes
        r.observe(float(t), 300 + 20 * (t - 10))
    assert r.rate() == pytest.approx(20.0)
    r.observe(125.0, 2500)  # idle 5 s: the window (about a minute) still shows most of it
    assert 15.0 < r.rate() < 20.0
    for t in range(130, 200, 5):
        r.observe(float(t), 2500)
    assert r.rate() == 0.0


def test_a_counter_that_went_down_restarts_the_window() -> None:
    r = CounterRate()
    r.observe(0.0, 50)
    r.observe(5.0, 100)
    r.observe(10.0, 3)  # a re-created tenant: its counter starts over
    assert r.rate() is None
    r.observe(15.0, 13)
    assert r.rate() == pytest.approx(2.0)


def test_bad_parameters() -> None:
    with pytest.raises(ValueError):
        CounterRate(window_s=0)
    with pytest.raises(ValueError):
        CounterRate(max_samples=1)


@given(st.lists(st.tuples(st.floats(0.01, 30), st.integers(0, 1000)), min_size=2, max_size=80))
def test_rate_is_the_mean_increase_of_the_kept_span(steps: list[tuple[float, int]]) -> None:
    """Bounded memory, never negative, and equal to (last - first) / span of what it kept."""
    r, t, v = CounterRate(window_s=60, min_span_s=0, max_samples=16), 0.0, 0
    for dt, dv in steps:
        t, v = t + dt, v + dv
        r.observe(t, v)
    kept = list(r._samples)
    assert 1 <= len(kept) <= 16
    rate = r.rate()
    if len(kept) >= 2:
        assert rate == pytest.approx((kept[-1][1] - kept[0][1]) / (kept[-1][0] - kept[0][0]))
        assert rate >= 0
