"""Operational webhooks: which changes of a region's view become events for the owner.

Decides, from a before and an after state, whether one operational event is due and
builds its payload; never reads time, never awaits, never sends (the runtime publishes
the events into the operations tenant, whose endpoints receive them through the normal
delivery engine). Rules: issue 18, after Svix's operational webhooks
(``endpoint.disabled``, ``message.attempt.exhausted``) and Convoy's endpoint status
events: one event per transition, never one per attempt. Endpoint health is the
cluster's (issue 43): a transition of the replicated health state is reported by one
region (``reporter``) under an id every region derives alike (``health_report``), and
its event id derives from that id, so two regions reporting it send one ``webhook-id``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .custody import rendezvous
from .envelope import rfc3339_ms

__all__ = [
    "HEALTH_TRANSITIONS",
    "TYPES",
    "HealthMark",
    "HealthReport",
    "clock_transition",
    "health_report",
    "health_transition",
    "operational_event_id",
    "operational_payload",
    "pressure_transition",
    "region_transitions",
    "reporter",
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


Write = tuple[int, int, str]  # a register's winning write: (HLC wall ms, logical, actor)

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _ident(prefix: str, text: str) -> str:
    """``prefix`` + 26 Crockford chars (130 bits) of sha256(``text``)."""
    n = int.from_bytes(hashlib.sha256(text.encode()).digest()[:17], "big") >> 6
    return prefix + "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


@dataclass(frozen=True, slots=True)
class HealthMark:
    """An endpoint's replicated health (``EndpointView.state``) and the winning writes of
    the registers it is read from (None: never written): ``failing`` of ``failing_since``,
    ``disabled``, and ``manual`` those of ``url``, ``paused`` and ``disabled`` (an API
    change writes one of them with ``failing_since``, in one write). Every region holding
    the same registry holds the same mark."""

    state: str
    failing: Write | None = None
    disabled: Write | None = None
    manual: frozenset[Write] = frozenset()


@dataclass(frozen=True, slots=True)
class HealthReport:
    """One transition of an endpoint's replicated health: its event type, ``transition``
    id, the operational event's id, and the write that made it (``at_ms``, ``actor``)."""

    event_type: str
    transition: str
    event_id: str
    at_ms: int
    actor: str


def health_report(endpoint_id: str, before: HealthMark, after: HealthMark) -> HealthReport | None:
    """The report of ``before`` -> ``after`` (two marks of one endpoint), or None.

    The transition id hashes the endpoint, the event type and the write the previous
    state rested on (the register the transition changes): regions that each wrote the
    same transition concurrently, from the same state, get the same id; a later episode
    rests on a later write, so it gets another. ``endpoint.recovered`` only when a
    success cleared ``failing_since``: a reset by a new url, resume or re-enable is the
    write of an API change (``manual``), no recovery. ValueError for an unknown state."""
    event = health_transition(before.state, after.state)
    if event is None:
        return None
    disabled = event == "endpoint.disabled"
    write = after.disabled if disabled else after.failing
    if write is None or (event == "endpoint.recovered" and write in after.manual):
        return None
    basis = before.disabled if disabled else before.failing
    transition = _ident("tr_", f"{endpoint_id}\0{event}\0{basis!r}")
    return HealthReport(event, transition, operational_event_id(transition), write[0], write[2])


def operational_event_id(subject: str) -> str:
    """The id of the operational event about ``subject`` (a transition id, or
    ``<delivery id>/<generation>`` of a dead delivery): the same in every region."""
    return _ident("evt_", f"operational\0{subject}")


def reporter(endpoint_id: str, live: Iterable[str]) -> str:
    """The region that reports ``endpoint_id``'s health transitions: the rendezvous winner
    among the ``live`` regions (core.custody.rendezvous, as custody spreads an owner's
    endpoints). ValueError for no region."""
    return rendezvous(live, endpoint_id)


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
