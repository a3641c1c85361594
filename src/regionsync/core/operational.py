"""Operational webhooks: which changes of a region's view become events for the owner.

Decides, from a before and an after state, whether one operational event is due and
builds its payload; never reads time, never awaits, never sends (the runtime publishes
the events into the operations tenant, whose endpoints receive them through the normal
delivery engine). Rules: issue 18, after Svix's operational webhooks
(``endpoint.disabled``, ``message.attempt.exhausted``) and Convoy's endpoint status
events: one event per transition per region, never one per attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .envelope import rfc3339_ms

__all__ = [
    "HEALTH_TRANSITIONS",
    "TYPES",
    "clock_transition",
    "health_transition",
    "operational_payload",
    "pressure_transition",
    "region_transitions",
]

TYPES = (
    "endpoint.failing",
    "endpoint.disabled",
    "endpoint.recovered",
    "delivery.dead",
    "region.unreachable",
    "region.reachable",
    "backpressure.entered",
    "backpressure.left",
    "region.clock_skewed",
    "region.clock_ok",
    "cluster.upgrade_held_back",  # core.capabilities: regions holding the feature set back
)

# (endpoint state before, after) -> event, for the health changes the delivery worker
# writes to the registry (core.health); a pair not listed (pause, resume, re-enable by
# hand, failing -> failing) is no operational event
HEALTH_TRANSITIONS: dict[tuple[str, str], str] = {
    ("active", "failing"): "endpoint.failing",
    ("active", "disabled"): "endpoint.disabled",  # 410 Gone
    ("failing", "disabled"): "endpoint.disabled",  # failing for disable_after_s, or 410
    ("paused", "disabled"): "endpoint.disabled",  # 410 Gone to an attempt in flight
    ("failing", "active"): "endpoint.recovered",
}


def health_transition(before: str, after: str) -> str | None:
    """The event of an endpoint health change ``before`` -> ``after`` (core.health
    states), or None. Raises ValueError for a state that is not one."""
    states = ("active", "failing", "paused", "disabled")
    if before not in states or after not in states:
        raise ValueError(f"unknown health state in {before!r} -> {after!r}")
    return HEALTH_TRANSITIONS.get((before, after))


def region_transitions(before: Iterable[str], after: Iterable[str]) -> list[tuple[str, str]]:
    """``(event, region)`` for each region that became suspected (``region.unreachable``)
    or stopped being suspected (``region.reachable``) between two suspect sets
    (core.custody.suspected), in region order."""
    old, new = set(before), set(after)
    out = [("region.unreachable", r) for r in new - old]
    out += [("region.reachable", r) for r in old - new]
    return sorted(out, key=lambda e: (e[1], e[0]))


def clock_transition(before: str, after: str) -> str | None:
    """``region.clock_skewed`` when this region's clock status (core.clock_offset
    ``ClockView.status``) becomes ``suspect``, ``region.clock_ok`` when it returns to
    ``ok``. Only the region whose clock is off decides it (every region follows the same
    reference clock), so the cluster reports each skew once. ValueError for another
    status."""
    for status in (before, after):
        if status not in ("ok", "suspect"):
            raise ValueError(f"unknown clock status {status!r}")
    if before == after:
        return None
    return "region.clock_skewed" if after == "suspect" else "region.clock_ok"


def pressure_transition(before: str | None, after: str) -> str | None:
    """``backpressure.entered`` when the admission state (core.backpressure
    ``Pressure.state``) leaves ``accepting`` (``before`` None: no reading yet, counts as
    accepting), ``backpressure.left`` when it returns to it; moves between the shedding
    states are no new event."""
    was = before in (None, "accepting")
    now = after == "accepting"
    if was and not now:
        return "backpressure.entered"
    if not was and now:
        return "backpressure.left"
    return None


def operational_payload(
    event_type: str, region: str, now_ms: int, data: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON payload of an operational event: ``{"type", "region", "at"`` (RFC 3339
    UTC, ms), ``**data}``. Raises ValueError for a type not in TYPES."""
    if event_type not in TYPES:
        raise ValueError(f"unknown operational event type {event_type!r}")
    return {"type": event_type, "region": region, "at": rfc3339_ms(now_ms), **data}
