"""Per-node simulated Clock, IdSource and Rng derivation, all from virtual time and a seed.

Nothing here reads the system clock or the global ``random`` instance.
"""

from __future__ import annotations

import asyncio
import hashlib
import random

__all__ = ["EPOCH_MS", "SimClock", "derive_rng", "derive_seed"]

EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: virtual t=0 on a correct clock
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def derive_seed(seed: int, *parts: object) -> int:
    """A 64-bit seed for one purpose (``parts``), stable across processes and versions."""
    text = "/".join([str(seed), *map(str, parts)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def derive_rng(seed: int, *parts: object) -> random.Random:
    return random.Random(derive_seed(seed, *parts))


class SimClock:
    """A node's clock over the loop's virtual time.

    ``wall_ms = EPOCH_MS + t * 1000 * (1 + drift_ppm / 1e6) + skew_ms`` where ``t`` is
    virtual seconds; ``skew_ms`` and ``drift_ppm`` are changed by the nemesis (steps, NTP
    fixes). ``monotonic()`` is the virtual time itself; ``sleep`` is ``asyncio.sleep``.
    """

    def __init__(self, skew_ms: int = 0, drift_ppm: float = 0.0):
        self.skew_ms = skew_ms
        self.drift_ppm = drift_ppm

    @staticmethod
    def now() -> float:
        return asyncio.get_running_loop().time()

    def wall_ms(self) -> int:
        t = self.now()
        return max(int(EPOCH_MS + t * 1000.0 * (1 + self.drift_ppm / 1e6) + self.skew_ms), 0)

    def monotonic(self) -> float:
        return self.now()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
