"""Adaptive backpressure: admit, shed (429) or refuse (503) an ingest by its priority.

Decides from the saturation of this region (undelivered backlog and the write queue over
capacity), smoothed over time, which traffic to admit; never reads time or randomness
(``now_s`` and a ``jitter`` sample in [-1, 1] are passed in). Rules (issue 5): below 0.75
accept everything; 0.75..0.90 shed ``low`` with 429 and a Retry-After growing with S;
0.90..1.0 accept only ``critical``; at the hard limit (raw S >= 1) 503 for everyone.
Before those, a tenant's own share (issue 38): a tenant holding ``tenant_backlog_limit``
or more of the region's undelivered backlog gets 429 (``tenant_retry_after``), whatever
the region's saturation, so one tenant's backlog never takes the whole capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "PRIORITIES",
    "Admission",
    "Pressure",
    "admit",
    "observe",
    "priority_for",
    "tenant_backlog_limit",
    "tenant_retry_after",
]

PRIORITIES = ("critical", "high", "normal", "low")
SHED_LOW_AT = 0.75
CRITICAL_ONLY_AT = 0.90
HARD_LIMIT = 1.0
MAX_RETRY_AFTER_S = 30


@dataclass(frozen=True, slots=True)
class Pressure:
    """Saturation: ``raw`` = (backlog + queued) / capacity now, ``smoothed`` its
    exponentially weighted average with time constant tau, as of ``at_s`` (seconds)."""

    raw: float
    smoothed: float
    at_s: float

    @property
    def state(self) -> str:
        """``accepting``, ``shedding``, ``critical_only`` or ``overloaded``."""
        if self.raw >= HARD_LIMIT:
            return "overloaded"
        if self.smoothed >= CRITICAL_ONLY_AT:
            return "critical_only"
        if self.smoothed >= SHED_LOW_AT:
            return "shedding"
        return "accepting"


@dataclass(frozen=True, slots=True)
class Admission:
    """``status`` 202 (admit), 429 (shed) or 503 (hard limit); Retry-After in seconds."""

    status: int
    retry_after_s: int | None
    state: str

    @property
    def admitted(self) -> bool:
        return self.status == 202


def observe(
    prev: Pressure | None, backlog: int, queued: int, capacity: int, now_s: float, tau_s: float
) -> Pressure:
    """Fold a new reading into the smoothed saturation (EWMA, alpha = 1 - e^(-dt/tau)).

    Raises ValueError for a capacity below 1 or a negative tau.
    """
    if capacity < 1 or tau_s < 0:
        raise ValueError("capacity must be >= 1 and tau_s >= 0")
    raw = (max(backlog, 0) + max(queued, 0)) / capacity
    if prev is None or tau_s == 0:
        return Pressure(raw, raw, now_s)
    dt = max(now_s - prev.at_s, 0.0)
    alpha = 1.0 - math.exp(-dt / tau_s)
    return Pressure(raw, prev.smoothed + alpha * (raw - prev.smoothed), now_s)


def _retry_after(s: float, jitter: float) -> int:
    span = (min(max(s, SHED_LOW_AT), HARD_LIMIT) - SHED_LOW_AT) / (HARD_LIMIT - SHED_LOW_AT)
    base = 1.0 + span * (MAX_RETRY_AFTER_S - 1)
    return max(1, round(base * (1.0 + 0.2 * jitter)))


def admit(pressure: Pressure, priority: str, jitter: float) -> Admission:
    """Decide one ingest. Raises ValueError for an unknown priority or a jitter outside
    [-1, 1]."""
    if priority not in PRIORITIES:
        raise ValueError(f"unknown priority {priority!r}")
    if not -1.0 <= jitter <= 1.0:
        raise ValueError("jitter must be in [-1, 1]")
    state = pressure.state
    if state == "overloaded":
        return Admission(503, _retry_after(HARD_LIMIT, jitter), state)
    if state == "critical_only" and priority != "critical":
        return Admission(429, _retry_after(pressure.smoothed, jitter), state)
    if state == "shedding" and priority == "low":
        return Admission(429, _retry_after(pressure.smoothed, jitter), state)
    return Admission(202, None, state)


def tenant_backlog_limit(capacity: int, share: float) -> int | None:
    """The most undelivered deliveries one tenant may hold in a region before its
    ingests are refused: ``share`` (0 < share <= 1) of ``capacity``, at least 1; None
    for a share of 1 (a tenant may take the whole capacity: the region's rules only)."""
    return None if share >= 1 else max(1, math.floor(capacity * share))


def tenant_retry_after(jitter: float) -> int:
    """Retry-After (seconds) for a tenant at its backlog share: the longest the region
    gives (its backlog drains at its endpoints' pace), jittered. Raises ValueError for a
    jitter outside [-1, 1]."""
    if not -1.0 <= jitter <= 1.0:
        raise ValueError("jitter must be in [-1, 1]")
    return _retry_after(HARD_LIMIT, jitter)


def priority_for(event_type: str, rules: dict[str, str], default: str = "normal") -> str:
    """Priority of an event type from ``rules`` (pattern -> priority): an exact name wins,
    then the longest ``prefix.*`` pattern, then ``*``, then ``default``."""
    if event_type in rules:
        return rules[event_type]
    best: tuple[int, str] | None = None
    for pattern, prio in rules.items():
        if pattern.endswith(".*") and event_type.startswith(pattern[:-1]):
            if best is None or len(pattern) > best[0]:
                best = (len(pattern), prio)
    if best is not None:
        return best[1]
    return rules.get("*", default)
