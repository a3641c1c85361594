"""Production Clock, Rng, IdSource and Resolver: the system clock, OS-seeded randomness,
time-ordered ids (ULID layout) and the event loop's resolver."""

from __future__ import annotations

import asyncio
import base64
import random
import socket
import time

from ..runtime.ports import Clock

__all__ = ["SystemClock", "SystemResolver", "UlidSource", "system_rng"]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# RFC 4648 base32 digits -> Crockford's: base64.b32encode does the bit slicing in C
_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _CROCKFORD.encode())


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

    def new(self, prefix: str) -> str:
        ms = self._clock.wall_ms()
        last_ms, last_rand = self._last
        if ms <= last_ms:
            ms, rand = last_ms, (last_rand + 1) & ((1 << 80) - 1)
        else:
            rand = self._rng.getrandbits(80)
        self._last = (ms, rand)
        # 130 bits (the 128-bit value, two leading zero bits) are the last 26 of the 32
        # five-bit digits of 160 bits
        digits = base64.b32encode(((ms << 80) | rand).to_bytes(20, "big"))[6:]
        return f"{prefix}_{digits.translate(_TO_CROCKFORD).decode()}"


class SystemResolver:
    """Resolves with ``loop.getaddrinfo``; raises OSError (socket.gaierror) on failure."""

    async def resolve(self, host: str, port: int) -> list[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return sorted({info[4][0] for info in infos})
