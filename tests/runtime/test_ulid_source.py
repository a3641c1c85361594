"""UlidSource: ULID text (Crockford base32 of 48-bit ms + 80 random bits), increasing."""

from __future__ import annotations

import random

from regionsync.adapters.system import UlidSource

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def wall_ms(self) -> int:
        return self.ms


def reference(ms: int, rand: int) -> str:
    """The ULID spec's encoding, digit by digit (most significant first)."""
    n = (ms << 80) | rand
    return "".join(CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


def test_ids_are_the_spec_encoding_of_time_and_randomness() -> None:
    seeds = random.Random(7)
    for ms in (1, 2, 1_700_000_000_123, (1 << 48) - 1):
        seed = seeds.getrandbits(32)
        rand = random.Random(seed).getrandbits(80)
        src = UlidSource(Clock(ms), random.Random(seed))  # type: ignore[arg-type]
        assert src.new("evt") == "evt_" + reference(ms, rand)
    assert reference(0, 0) == "0" * 26 and reference((1 << 48) - 1, (1 << 80) - 1)[0] == "7"


def test_ties_increment_and_ids_sort_in_creation_order() -> None:
    clock = Clock(1_700_000_000_000)
    src = UlidSource(clock, random.Random(1))  # type: ignore[arg-type]
    ids = [src.new("dlv") for _ in range(50)]
    clock.ms -= 5  # a clock step back keeps the last time
    ids += [src.new("dlv") for _ in range(5)]
    clock.ms += 100
    ids.append(src.new("dlv"))
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 4 + 26 for i in ids)
