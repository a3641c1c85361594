"""Production Clock, Rng, IdSource and Resolver: the system clock, OS-seeded randomness,
time-ordered ids (ULID layout) and the event loop's resolver."""

from __future__ import annotations

import asyncio
import random
import socket
import time

from ..runtime.ports import Clock

__all__ = ["SystemClock", "SystemResolver", "UlidSource", "system_rng"]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# every 10-bit value as its two Crockford digits: an id is 13 table lookups (the time
# part's 5 cached per millisecond), about 4x cheaper than base64.b32encode + translate
_PAIRS = tuple(a + b for a in _CROCKFORD for b in _CROCKFORD)
_MASK10 = (1 << 10) - 1


def _digits(n: int, pairs: int) -> str:
    """``n`` as ``2 * pairs`` Crockford base32 digits, most significant first."""
    return "".join(_PAIRS[(n >> (10 * i)) & _MASK10] for i in range(pairs - 1, -1, -1))


class SystemClock:
    """Wall time from ``time.time_ns`` (ms), monotonic from ``time.monotonic`` (s)."""

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def system_rng() -> random.Random:
    """A ``random.Random`` seeded from the OS (not the global instance)."""
    return random.Random(int.from_bytes(random.SystemRandom().randbytes(16), "big"))


class UlidSource:
    """Ids ``<prefix>_<26 chars>``: 48-bit ms timestamp + 80 random bits, Crockford base32
    (ULID spec), strictly increasing per source (random part incremented on ties). The
    simulator passes its virtual clock and a seeded Rng, so ids repeat with the seed."""

    def __init__(self, clock: Clock | None = None, rng: random.Random | None = None):
        self._clock = clock or SystemClock()
        self._rng = rng or system_rng()
        self._last = (0, 0)
        self._time_text = (-1, "")  # (ms, its 10 digits)

    def new(self, prefix: str) -> str:
        ms = self._clock.wall_ms()
        last_ms, last_rand = self._last
        if ms <= last_ms:
            ms, rand = last_ms, (last_rand + 1) & ((1 << 80) - 1)
        else:
            rand = self._rng.getrandbits(80)
        self._last = (ms, rand)
        # 26 digits = 130 bits: the 48-bit time in the first 10 (two leading zero bits),
        # the 80 random bits in the last 16
        if self._time_text[0] != ms:
            self._time_text = (ms, _digits(ms, 5))
        return f"{prefix}_{self._time_text[1]}{_digits(rand, 8)}"


class SystemResolver:
    """Resolves with ``loop.getaddrinfo``; raises OSError (socket.gaierror) on failure."""

    async def resolve(self, host: str, port: int) -> list[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return sorted({info[4][0] for info in infos})
