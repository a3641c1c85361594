"""Per-endpoint delivery lanes: a token bucket (rate limit) and an in-flight cap.

Decides whether one more attempt to an endpoint may start now, and when it could; never
reads time (``now_s`` is a monotonic reading passed in) and never awaits. Rules: the token
bucket of RFC 2697 (burst = max(1, rate)), Svix/Hook0-style per-endpoint concurrency caps,
so a slow or dead endpoint only ever occupies its own lane.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Lane", "TokenBucket"]


@dataclass(slots=True)
class TokenBucket:
    """``rate_per_s`` tokens per second up to ``burst``; starts full."""

    rate_per_s: float
    burst: float
    tokens: float
    updated_s: float

    @classmethod
    def new(cls, rate_per_s: float, now_s: float) -> TokenBucket:
        """Raises ValueError for a rate that is not positive."""
        if rate_per_s <= 0:
            raise ValueError("rate_per_s must be > 0")
        burst = max(1.0, float(rate_per_s))
        return cls(float(rate_per_s), burst, burst, now_s)

    def _refill(self, now_s: float) -> None:
        if now_s > self.updated_s:
            self.tokens = min(self.burst, self.tokens + (now_s - self.updated_s) * self.rate_per_s)
            self.updated_s = now_s

    def take(self, now_s: float) -> bool:
        """Spend one token if there is one."""
        self._refill(now_s)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def wait_s(self, now_s: float) -> float:
        """Seconds until a token is available (0 if one is)."""
        self._refill(now_s)
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate_per_s

    def retune(self, rate_per_s: float) -> None:
        """Apply a changed rate limit, keeping the tokens already earned."""
        if rate_per_s != self.rate_per_s:
            self.rate_per_s = float(rate_per_s)
            self.burst = max(1.0, float(rate_per_s))
            self.tokens = min(self.tokens, self.burst)


@dataclass(slots=True)
class Lane:
    """One endpoint's lane: its bucket and how many attempts are in flight."""

    bucket: TokenBucket
    inflight: int = 0

    def full(self, max_in_flight: int, now_s: float) -> bool:
        """True if no attempt may start now (cap reached or no token)."""
        return self.inflight >= max_in_flight or self.bucket.wait_s(now_s) > 0

    def admit(self, rate_per_s: float, max_in_flight: int, now_s: float) -> bool:
        """Start an attempt if the lane allows it now (takes a token, counts it in flight)."""
        self.bucket.retune(rate_per_s)
        if self.inflight >= max_in_flight or not self.bucket.take(now_s):
            return False
        self.inflight += 1
        return True

    def release(self) -> None:
        """An attempt of this lane finished."""
        self.inflight = max(0, self.inflight - 1)
