"""Per-endpoint delivery lanes (a token bucket and an in-flight cap) and per-tenant caps.

Decides whether one more attempt to an endpoint may start now, and when it could; never
reads time (``now_s`` is a monotonic reading passed in) and never awaits. Rules: the token
bucket of RFC 2697 (burst = max(1, rate)), spent in groups once it ran dry (``Lane``);
Svix/Hook0-style per-endpoint concurrency caps, so a slow or dead endpoint only ever
occupies its own lane; and a cap on the attempts in flight per tenant in a region
(``TenantSlots``), so one tenant's endpoints together never take more than their share
of the region's delivery concurrency (issue 14).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .invariants import check
from .model import Delivery

__all__ = ["GROUP_S", "Lane", "TenantSlots", "TokenBucket", "fair_order", "tenant_cap"]

# a lane whose bucket ran dry starts again once it holds this long's tokens (at least one),
# so a backlog drained at a high rate limit is sent in groups: one wake-up, claim round
# and outcome commit per group instead of per token (issue 44, bench/README.md)
GROUP_S = 0.01


def fair_order(due: Sequence[Delivery], inflight: Mapping[str, int]) -> list[Delivery]:
    """``due`` (deliveries, any order) round-robin across endpoints, counting what each
    endpoint already has in flight: a row's turn is its endpoint's attempts in flight
    (``inflight``: endpoint id -> count) plus its rank among that endpoint's rows in
    ``(next_attempt_at_ms, id)`` order; rows are ordered by (turn, next_attempt_at_ms,
    id). So a newly due endpoint's first delivery goes before a backlogged endpoint's
    next one, whatever their due times, and each endpoint keeps its own order (issue 17,
    fan-in; the weighted-fair idea of Svix/Hook0 per-endpoint queues)."""
    rank: dict[str, int] = {}
    keyed: list[tuple[tuple[int, int, str], Delivery]] = []
    for d in sorted(due, key=lambda d: (d.next_attempt_at_ms or 0, d.id)):
        turn = rank.get(d.endpoint_id, inflight.get(d.endpoint_id, 0))
        rank[d.endpoint_id] = turn + 1
        keyed.append(((turn, d.next_attempt_at_ms or 0, d.id), d))
    keyed.sort(key=lambda k: k[0])
    return [d for _, d in keyed]


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

    def wait_s(self, now_s: float, need: float = 1.0) -> float:
        """Seconds until ``need`` tokens are available (0 if they are)."""
        self._refill(now_s)
        return 0.0 if self.tokens >= need else (need - self.tokens) / self.rate_per_s

    def retune(self, rate_per_s: float, now_s: float) -> None:
        """Apply a changed rate limit from ``now_s`` on, keeping the tokens earned until
        then at the old rate."""
        if rate_per_s != self.rate_per_s:
            self._refill(now_s)
            self.rate_per_s = float(rate_per_s)
            self.burst = max(1.0, float(rate_per_s))
            self.tokens = min(self.tokens, self.burst)


@dataclass(slots=True)
class Lane:
    """One endpoint's lane: its bucket and how many attempts are in flight.

    ``spending``: the lane may take tokens down to its last. Once its bucket holds less
    than one it stops until the bucket holds a group again (``GROUP_S`` of its rate, at
    least one token, at most its burst), then spends the group. The rate over any second
    is the bucket's; at a rate limit below ``1 / GROUP_S`` per second a group is one token
    (the plain bucket)."""

    bucket: TokenBucket
    inflight: int = 0
    spending: bool = True

    def group(self) -> float:
        """Tokens a dry lane waits for before it starts again."""
        b = self.bucket
        return min(b.burst, max(1.0, float(math.floor(b.rate_per_s * GROUP_S))))

    def wait_s(self, now_s: float) -> float:
        """Seconds until the bucket lets an attempt start (0: now); moves ``spending``."""
        b = self.bucket
        wait = b.wait_s(now_s)  # for one token
        if wait > 0 or not self.spending:
            wait = b.wait_s(now_s, self.group())
        self.spending = wait == 0
        return wait

    def full(self, max_in_flight: int, now_s: float) -> bool:
        """True if no attempt may start now (cap reached or the bucket waits)."""
        return self.inflight >= max_in_flight or self.wait_s(now_s) > 0

    def admit(self, rate_per_s: float, max_in_flight: int, now_s: float) -> bool:
        """Start an attempt if the lane allows it now (takes a token, counts it in flight)."""
        self.bucket.retune(rate_per_s, now_s)
        if self.full(max_in_flight, now_s) or not self.bucket.take(now_s):
            return False
        self.inflight += 1
        return True

    def release(self) -> None:
        """An attempt of this lane finished (one it admitted: else the lane would take
        one attempt more than ``max_in_flight`` from then on)."""
        if check(self.inflight > 0, "lane released with no attempt in flight"):
            self.inflight -= 1


def tenant_cap(default: int, override: int | None) -> int:
    """A tenant's cap on attempts in flight per region: its own ``override`` (the tenant's
    ``delivery_max_in_flight``) or the node's ``default`` (``delivery.tenant_max_in_flight``);
    at least 1."""
    return max(1, override if override is not None else default)


@dataclass(slots=True)
class TenantSlots:
    """Attempts in flight per tenant (tenant id -> count; tenants at 0 are dropped)."""

    inflight: dict[str, int] = field(default_factory=dict)

    def full(self, tenant: str, cap: int) -> bool:
        """True if ``tenant`` may not start another attempt under ``cap``."""
        return self.inflight.get(tenant, 0) >= cap

    def admit(self, tenant: str, cap: int) -> bool:
        """Count one more attempt of ``tenant`` if it is under ``cap``."""
        if self.full(tenant, cap):
            return False
        self.inflight[tenant] = self.inflight.get(tenant, 0) + 1
        return True

    def release(self, tenant: str) -> None:
        """An attempt of ``tenant`` finished (one it admitted)."""
        n = self.inflight.get(tenant, 0) - 1
        check(n >= 0, "tenant %r released with no attempt in flight", tenant)
        if n > 0:
            self.inflight[tenant] = n
        else:
            self.inflight.pop(tenant, None)

    def saturated(self, cap_of: Callable[[str], int]) -> list[str]:
        """Tenants at their cap (``cap_of(tenant)``), sorted: their endpoints are left out
        of the next claim, so the due deliveries of other tenants are reached."""
        return sorted(t for t, n in self.inflight.items() if n >= cap_of(t))
