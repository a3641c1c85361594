"""Endpoint health as a state table: active, failing, paused, disabled.

Decides an endpoint's next health from its current health, one input and ``now``; never
reads time or does I/O. Rules (issue 4, after GitLab's self-healing webhooks and the
Standard Webhooks advice): active -> failing after N consecutive failures or an exhausted
delivery; failing -> active on any 2xx; failing -> disabled after a long failing streak,
probing with doubling backoff meanwhile; any -> disabled on 410 Gone; manual pause and
resume; resuming or re-enabling resets the failure counter. An unknown (state, input)
pair raises instead of falling through (docs/style.md#state-machines-as-tables).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["INPUTS", "STATES", "TABLE", "Health", "HealthPolicy", "behind", "step"]

STATES = ("active", "failing", "paused", "disabled")
INPUTS = ("success", "failure", "exhausted", "gone", "pause", "resume")

# (state, input) -> next state before thresholds: "?" = decided by the counters
TABLE: dict[tuple[str, str], str] = {
    ("active", "success"): "active",
    ("active", "failure"): "?",  # failing once the consecutive failures reach the threshold
    ("active", "exhausted"): "failing",
    ("active", "gone"): "disabled",
    ("active", "pause"): "paused",
    ("active", "resume"): "active",
    ("failing", "success"): "active",
    ("failing", "failure"): "?",  # disabled once failing for longer than disable_after
    ("failing", "exhausted"): "?",
    ("failing", "gone"): "disabled",
    ("failing", "pause"): "paused",
    ("failing", "resume"): "active",
    ("paused", "success"): "paused",  # attempts that were in flight when it was paused
    ("paused", "failure"): "paused",
    ("paused", "exhausted"): "paused",
    ("paused", "gone"): "disabled",
    ("paused", "pause"): "paused",
    ("paused", "resume"): "active",
    ("disabled", "success"): "disabled",
    ("disabled", "failure"): "disabled",
    ("disabled", "exhausted"): "disabled",
    ("disabled", "gone"): "disabled",
    ("disabled", "pause"): "disabled",
    ("disabled", "resume"): "active",
}


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """Thresholds: failures to turn failing, seconds failing before disabling, and the
    probe backoff while failing (initial, doubling up to max), all in seconds."""

    failure_threshold: int = 5
    disable_after_s: float = 5 * 24 * 3600
    probe_initial_s: float = 60.0
    probe_max_s: float = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Health:
    """``failures``: consecutive failures; ``failing_since_ms`` set while failing;
    ``next_probe_ms``/``probe_s``: when a failing endpoint may be tried next, and the
    current backoff."""

    state: str = "active"
    failures: int = 0
    failing_since_ms: int | None = None
    next_probe_ms: int | None = None
    probe_s: float = 0.0

    def probe_due(self, now_ms: int) -> bool:
        """May an attempt start now? Always, unless failing and the next probe is later;
        a probe set further ahead than its own backoff (``probe_s``: by a clock that ran
        ahead, issue 41) is due at once."""
        if self.state != "failing" or self.next_probe_ms is None or now_ms >= self.next_probe_ms:
            return True
        return self.next_probe_ms - now_ms > self.probe_s * 1000


def _failing(h: Health, now_ms: int, policy: HealthPolicy) -> Health:
    since = h.failing_since_ms if h.failing_since_ms is not None else now_ms
    if now_ms - since >= policy.disable_after_s * 1000:
        return Health("disabled", h.failures, since)
    if h.state == "failing" and h.next_probe_ms is not None and now_ms < h.next_probe_ms:
        # not a probe's outcome: an attempt that was in flight when the endpoint turned
        # failing (up to max_in_flight of them fail together). Only a probe's failure
        # doubles the backoff, else one burst of failures reaches probe_max_s at once.
        return replace(h, failing_since_ms=since)
    probe = (
        policy.probe_initial_s
        if h.state != "failing"
        else min(max(h.probe_s, policy.probe_initial_s) * 2, policy.probe_max_s)
    )
    return Health("failing", h.failures, since, now_ms + int(probe * 1000), probe)


def step(h: Health, event: str, now_ms: int, policy: HealthPolicy = HealthPolicy()) -> Health:
    """The health after ``event`` at ``now_ms``. Raises KeyError for an unknown pair.

    While failing, the probe backoff doubles only on a failure at or after the next probe
    was due (a probe's); a failure before it (an attempt started earlier) only counts."""
    nxt = TABLE[(h.state, event)]
    if event == "failure":
        h = replace(h, failures=h.failures + 1)
    if nxt == "?":
        if h.state == "active" and h.failures < policy.failure_threshold:
            return h
        return _failing(h, now_ms, policy)
    if nxt == "failing":
        return _failing(h, now_ms, policy)
    if nxt == "active":
        return Health("active")  # success, resume and re-enable reset the counters
    if nxt == h.state:
        return h
    return Health(nxt, h.failures, h.failing_since_ms)


def behind(h: Health, replicated: str) -> bool:
    """Is a region's health view ``h`` of an endpoint behind the endpoint's replicated
    state ``replicated`` (``EndpointView.state``)? Whenever they differ: the replicated
    state is the cluster's judgement (every region writes its own transitions to the
    registry as it makes them, so they agree). A view found behind is replaced by the
    replicated state: a region whose own failures are still below the threshold takes
    over a failing endpoint as failing, so only a success ends that (issue 43: an active
    view kept beside a failing registry answered a failure with ``endpoint.recovered``)."""
    return h.state != replicated
