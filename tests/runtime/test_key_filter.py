"""The Idempotency-Key filter (runtime/idempotency.py, issue 17): no false negatives for a
live key, generations dropped only once every key in them expired, memory bounded by its
configured entries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regionsync.runtime.idempotency import KeyFilter

TTL = 1000


def ready(entries: int = 1000) -> KeyFilter:
    f = KeyFilter(entries, TTL)
    f.ready = True
    return f


def test_unready_filter_holds_everything_and_entries_are_checked() -> None:
    f = KeyFilter(100, TTL)
    assert f.may_hold("t", "never-added", 0)  # not yet filled: the store is asked
    with pytest.raises(ValueError):
        KeyFilter(0, TTL)


# steps: (advance the clock by ms, add a key accepted this long before now, or look up)
_steps = st.lists(
    st.tuples(st.integers(0, 700), st.one_of(st.none(), st.integers(-300, 1500))),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(_steps)
def test_a_live_key_is_never_reported_absent(steps: list[tuple[int, int | None]]) -> None:
    """Keys added with acceptance times around now (a peer's clock may run ahead, or a
    row may be replicated late) are found while ``accepted + TTL >= now``, whatever the
    generations did meanwhile."""
    f, now, added = ready(), 0, []
    for i, (advance, ago) in enumerate(steps):
        now += advance
        if ago is not None:
            f.add("t", f"k{i}", now - ago)
            added.append((f"k{i}", now - ago))
        for key, accepted in added:
            if accepted + TTL >= now:
                assert f.may_hold("t", key, now), (key, accepted, now)


def test_generations_are_dropped_once_their_keys_expired() -> None:
    f = ready()
    f.may_hold("t", "x", 0)  # the first generation starts at 0
    f.add("t", "old", 0)
    f.may_hold("t", "x", TTL)  # the first generation is TTL old: now the previous one
    f.add("t", "mid", TTL)
    assert f.may_hold("t", "old", TTL) and f.may_hold("t", "mid", TTL)
    f.may_hold("t", "x", 2 * TTL + 1)  # "old" expired: its generation is dropped
    assert f.may_hold("t", "mid", 2 * TTL + 1)
    # "old" is gone unless it collides with a kept key (1 % at most for a few keys)
    absent = sum(not f.may_hold("t", f"other{i}", 2 * TTL + 1) for i in range(200))
    assert absent >= 180


def test_a_key_accepted_ahead_of_this_clock_keeps_its_generation() -> None:
    """A row accepted by a region whose clock runs 5 TTLs ahead stays live here for 6
    TTLs: its generation is kept that long, however often the clock passes a TTL."""
    f = ready()
    f.may_hold("t", "x", 0)
    f.add("t", "ahead", 5 * TTL)
    for now in range(TTL, 6 * TTL + 1, TTL // 2):
        assert f.may_hold("t", "ahead", now)


def test_false_positives_stay_near_the_configured_rate() -> None:
    f = ready(10_000)
    for i in range(10_000):
        f.add("acme", f"key-{i}", 0)
    assert all(f.may_hold("acme", f"key-{i}", 1) for i in range(10_000))
    false = sum(f.may_hold("acme", f"new-{i}", 1) for i in range(10_000))
    assert false < 300  # 1 % configured: about 100
    assert 9_000 <= f.approx_keys <= 11_000
