"""Which region a request goes to next, and when: pure decisions over the time the caller
passes (the clients in ``client.py`` do the I/O and the sleeping).

A client holds its regions' base URLs nearest first (``Regions``). A request goes to the
nearest region not marked down; a failure that allows a retry (``classify``) marks the
region down (``down_for_s``, doubling per consecutive failure up to ``down_max_s``, or the
answer's Retry-After) and the request goes on at once to the next region with the same
body, event id and Idempotency-Key. Once every region was tried, each further round waits
a backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter",
2015). A call gives up after ``max_attempts`` attempts or ``deadline_s`` seconds. A region
answering is remembered as up (its marks cleared).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Literal

import httpx

__all__ = ["FailoverPolicy", "Plan", "Regions", "classify", "retry_after_s"]

Failure = Literal["unsent", "maybe"]  # certainly not processed / perhaps processed


@dataclass(frozen=True, slots=True)
class FailoverPolicy:
    """Bounds of one call and of a region's down mark (seconds)."""

    max_attempts: int = 8
    deadline_s: float = 30.0
    timeout_s: float = 10.0  # one attempt's read/write bound (never past the deadline)
    connect_timeout_s: float = 1.0
    backoff_base_s: float = 0.05
    backoff_max_s: float = 2.0
    down_for_s: float = 5.0
    down_max_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.deadline_s <= 0 or self.timeout_s <= 0:
            raise ValueError("max_attempts >= 1, deadline_s > 0 and timeout_s > 0")


@dataclass(slots=True)
class Regions:
    """The regional base URLs, nearest first, and which are marked down until when."""

    urls: list[str]
    policy: FailoverPolicy = field(default_factory=FailoverPolicy)
    down_until: dict[str, float] = field(default_factory=dict)
    strikes: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.urls = list(dict.fromkeys(u.rstrip("/") for u in self.urls))
        if not self.urls:
            raise ValueError("at least one region URL")

    def add(self, url: str) -> None:
        """A region found later (the cluster view): after the known ones."""
        url = url.rstrip("/")
        if url not in self.urls:
            self.urls.append(url)

    def order(self, now: float) -> list[str]:
        """Regions up, nearest first, then the ones down, soonest back first."""
        up = [u for u in self.urls if self.down_until.get(u, 0.0) <= now]
        down = sorted((u for u in self.urls if u not in up), key=lambda u: self.down_until[u])
        return up + down

    def failed(self, url: str, now: float, hold_s: float | None = None) -> None:
        """``url`` failed at ``now``: down for the next mark (the answer's Retry-After,
        ``hold_s``, if given); failures while it is marked down already (concurrent
        requests of one outage) do not lengthen the mark."""
        if self.down_until.get(url, 0.0) > now and hold_s is None:
            return
        n = self.strikes[url] = self.strikes.get(url, 0) + 1
        mark = min(self.policy.down_max_s, self.policy.down_for_s * 2 ** (n - 1))
        self.down_until[url] = now + (mark if hold_s is None else max(hold_s, 0.0))

    def succeeded(self, url: str) -> None:
        self.strikes.pop(url, None)
        self.down_until.pop(url, None)


class Plan:
    """The attempts of one call: ``next(now)`` gives (region, seconds to wait first, the
    attempt's timeout) or None when the call must give up."""

    def __init__(self, regions: Regions, now: float, jitter: Callable[[], float]):
        self.regions, self.policy, self.jitter = regions, regions.policy, jitter
        self.deadline = now + self.policy.deadline_s
        self.attempts, self.round = 0, 0
        self.tried: set[str] = set()
        self.holds: dict[str, float] = {}  # region -> not before (Retry-After)

    def next(self, now: float) -> tuple[str, float, float] | None:
        if self.attempts >= self.policy.max_attempts or now >= self.deadline:
            return None
        order = self.regions.order(now)
        fresh = [u for u in order if u not in self.tried]
        if not fresh:
            self.round, self.tried = self.round + 1, set()
            fresh = order
        url, wait = fresh[0], 0.0
        if self.round:
            cap = min(self.policy.backoff_max_s, self.policy.backoff_base_s * 2**self.round)
            wait = self.jitter() * cap
        wait = max(wait, self.holds.get(url, 0.0) - now)
        if now + wait >= self.deadline:
            return None
        self.attempts += 1
        self.tried.add(url)
        timeout = min(self.policy.timeout_s, self.deadline - now - wait)
        return url, wait, timeout

    def failed(self, url: str, now: float, hold_s: float | None) -> None:
        self.regions.failed(url, now, hold_s)
        if hold_s is not None:
            self.holds[url] = now + hold_s


def retry_after_s(value: str | None, now_epoch_s: float) -> float | None:
    """A Retry-After header (RFC 9110 section 10.2.3: seconds or an HTTP date) in
    seconds from now; None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - now_epoch_s)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def classify(
    outcome: httpx.Response | Exception, now_epoch_s: float
) -> tuple[Failure, float | None] | None:
    """None if ``outcome`` is an answer to return (a success or a refusal), else whether
    the request was certainly not processed and how long the region asked to be left
    alone: a refused or timed-out connection and a 429 with Retry-After or a 503 are
    ``unsent``; a connection lost or a read timed out after sending, and a 502 or 504
    from a proxy, ``maybe``."""
    if isinstance(outcome, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return "unsent", None
    if isinstance(outcome, httpx.TransportError):
        return "maybe", None
    if isinstance(outcome, Exception):
        return None
    after = retry_after_s(outcome.headers.get("retry-after"), now_epoch_s)
    if outcome.status_code == 429:
        return ("unsent", after) if after is not None else None
    if outcome.status_code == 503:
        return "unsent", after
    if outcome.status_code in (502, 504):
        return "maybe", None
    return None
