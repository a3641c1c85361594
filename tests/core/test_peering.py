"""core.peering.refusal_pause: a refused record pauses the link briefly at first, then
longer while the refusals go on (never more than reconnect_max_s)."""

from __future__ import annotations

from regionsync.core.peering import refusal_pause, stream_pace


def test_first_refusal_pauses_the_minimum() -> None:
    assert refusal_pause(1, 0.1, 10.0) == 0.1


def test_refusals_in_a_row_double_up_to_the_maximum() -> None:
    pauses = [refusal_pause(n, 0.1, 10.0) for n in range(1, 12)]
    assert pauses[:4] == [0.1, 0.2, 0.4, 0.8]
    assert pauses == sorted(pauses)
    assert pauses[-1] == 10.0
    assert refusal_pause(10_000, 0.1, 10.0) == 10.0  # no overflow


def test_no_refusal_no_pause() -> None:
    assert refusal_pause(0, 0.1, 10.0) == 0.0


def test_stream_pace_keeps_a_state_stream_within_its_rate() -> None:
    assert stream_pace(1_000_000, 0.0, 0) == 0.0  # 0: unbounded
    assert stream_pace(1_000_000, 0.25, 1_000_000) == 0.75  # 1 MB sent at 1 MB/s
    assert stream_pace(1_000_000, 2.0, 1_000_000) == 0.0  # behind its rate: no wait
    assert stream_pace(0, 0.0, 1) == 0.0
