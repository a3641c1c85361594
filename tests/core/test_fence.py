"""The lease fence (core.fence): every state and input of the table, the classifier of the
moment, and when an adopter releases an owner it hears again."""

from __future__ import annotations

import pytest

from regionsync.core.fence import INPUTS, STATES, TABLE, Fence, adopts, fence_input, step

# every pair, written out: (state, input) -> (next state, action, fenced after)
EXPECTED = {
    ("open", "quiet"): ("fenced", "fence", True),
    ("open", "expired"): None,  # cannot happen: an open region has no fence to expire
    ("open", "heard"): ("open", "", False),
    ("open", "caught_up"): ("open", "", False),
    ("fenced", "quiet"): ("fenced", "", True),
    ("fenced", "expired"): ("lapsed", "lapse", False),
    ("fenced", "heard"): ("rejoining", "", True),
    ("fenced", "caught_up"): ("open", "unfence", False),
    ("rejoining", "quiet"): ("fenced", "", True),
    ("rejoining", "expired"): ("lapsed", "lapse", False),
    ("rejoining", "heard"): ("rejoining", "", True),
    ("rejoining", "caught_up"): ("open", "unfence", False),
    ("lapsed", "quiet"): ("lapsed", "", False),
    ("lapsed", "expired"): ("lapsed", "", False),
    ("lapsed", "heard"): ("rejoining", "fence", True),
    ("lapsed", "caught_up"): ("open", "", False),
}

SINCE = {"open": None, "fenced": 1_000, "rejoining": 1_000, "lapsed": None}


@pytest.mark.parametrize("pair", sorted(EXPECTED))
def test_every_state_and_input(pair: tuple[str, str]) -> None:
    state, event = pair
    fence = Fence(state, SINCE[state])
    want = EXPECTED[pair]
    if want is None:
        assert pair not in TABLE
        with pytest.raises(KeyError):
            step(fence, event, 5_000)
        return
    nxt, action, fenced = want
    got, did = step(fence, event, 5_000)
    assert (got.state, did, got.fenced) == (nxt, action, fenced)
    if action == "fence":
        assert got.since_ms == 5_000  # fenced from now
    elif fenced:
        assert got.since_ms == 1_000  # still the same fence
    else:
        assert got.since_ms is None


def test_the_table_covers_states_times_inputs() -> None:
    assert set(EXPECTED) == {(s, i) for s in STATES for i in INPUTS}
    assert set(TABLE) == {k for k, v in EXPECTED.items() if v is not None}


def test_the_moment_is_classified_by_direct_contact_and_the_fence_age() -> None:
    lease, hold, started = 40_000, 60_000, 0
    open_, fenced = Fence(), Fence("fenced", 150_000)
    assert fence_input(open_, 140_000, 100_000, started, lease, hold, False) == "heard"
    assert fence_input(open_, 140_000, 100_000, started, lease, hold, True) == "caught_up"
    assert fence_input(open_, 140_001, 100_000, started, lease, hold, True) == "quiet"
    # a peer never heard counts from the start, as suspicion does
    assert fence_input(open_, 40_000, 0, 10_000, lease, hold, False) == "heard"
    assert fence_input(open_, 50_001, 0, 10_000, lease, hold, False) == "quiet"
    # the fence lapses hold_ms after it began, not after the silence began
    assert fence_input(fenced, 210_000, 100_000, started, lease, hold, False) == "quiet"
    assert fence_input(fenced, 210_001, 100_000, started, lease, hold, False) == "expired"
    assert fence_input(fenced, 220_000, 200_000, started, lease, hold, True) == "caught_up"


def test_a_cut_and_a_heal_in_sequence() -> None:
    """Silence -> fenced; a peer heard -> still fenced until caught up -> open."""
    f, t = Fence(), 0
    seen = []
    for event in ("heard", "quiet", "quiet", "heard", "heard", "quiet", "heard", "caught_up"):
        t += 1_000
        f, action = step(f, event, t)
        seen.append((f.state, action))
    assert seen == [
        ("open", ""), ("fenced", "fence"), ("fenced", ""), ("rejoining", ""),
        ("rejoining", ""), ("fenced", ""), ("rejoining", ""), ("open", "unfence"),
    ]  # fmt: skip


def test_an_adopter_releases_an_owner_it_hears_until_hand_back_or_the_bound() -> None:
    release = 60_000
    assert adopts(True, None, 1_000, release)
    assert adopts(True, 500, 1_000, release)  # suspected again: adopts again
    assert not adopts(False, None, 1_000, release)  # heard again just now
    assert not adopts(False, 1_000, 61_000, release)
    assert adopts(False, 1_000, 61_001, release)  # no hand-back within the bound
