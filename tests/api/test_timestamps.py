"""Timestamps in API bodies, delivery envelopes and operational events
(``core.envelope.rfc3339_ms``, ``routes.common.rfc3339``): exact to the millisecond for
every value a record can hold, from integer arithmetic. The three earlier copies went
through ``ms / 1000`` as a float and printed e.g. 253402300799999 (the last ms of year
9999) as ``...59.998Z``; the one-second cache that replaced them must not change a digit
when consecutive values cross a second, a day or the epoch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from regionsync.adapters.routes.common import rfc3339
from regionsync.core.envelope import rfc3339_ms
from regionsync.core.operational import operational_payload

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FIRST_MS, LAST_MS = -62_135_596_800_000, 253_402_300_799_999  # year 1 .. year 9999


def reference(ms: int) -> str:
    text = (EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def test_edges_and_neighbours() -> None:
    assert rfc3339(None) is None
    for ms in (0, 1, 999, 1000, -1, -999, -1000, -1001, 1_764_615_663_123, FIRST_MS, LAST_MS):
        for near in (ms - 1, ms, ms + 1):
            if FIRST_MS <= near <= LAST_MS:
                assert rfc3339(near) == reference(near), near
    last = "9999-12-31T23:59:59.999Z"
    assert rfc3339(LAST_MS) == rfc3339_ms(LAST_MS) == last
    assert operational_payload("endpoint.disabled", "a", LAST_MS, {})["at"] == last


def test_consecutive_values_across_seconds_and_days() -> None:
    start = 1_764_633_599_000  # 2025-12-01T23:59:59.000Z: the next day follows
    for ms in range(start - 1500, start + 2500, 7):
        assert rfc3339(ms) == reference(ms)


@given(st.lists(st.integers(FIRST_MS, LAST_MS), min_size=1, max_size=20))
def test_any_sequence_of_values(values: list[int]) -> None:
    for ms in values:
        assert rfc3339(ms) == reference(ms)
