"""What follows a delivery attempt besides its status: the endpoint's health view
(core.health, with the replicated failing-since / disabled fields) and the operational
event of its change (core.operational)."""

from __future__ import annotations

import logging
from typing import Any

from crdt import CRDT

from ..core.health import Health, HealthPolicy
from ..core.health import step as health_step
from ..core.operational import health_transition
from .ports import LocalWriter
from .state import Catalog, DeliveryQueue

__all__ = ["health_deltas"]

log = logging.getLogger("regionsync.delivery")


def health_deltas(
    catalog: Catalog,
    queue: DeliveryQueue,
    health_url: dict[str, str],
    writer: LocalWriter,
    endpoint_id: str,
    event: str | None,
    now_ms: int,
    policy: HealthPolicy,
) -> tuple[dict[str, CRDT], str | None]:
    """Apply one attempt's health input (core.health.step) to ``queue.health``; registry
    deltas if the replicated state (failing since / disabled) changed, and the operational
    event of that change (core.operational) or None. ``health_url`` records the url each
    health view is of. Call with the write lock held."""
    view = catalog.registry.endpoint(endpoint_id)
    if event is None or view is None:
        return {}, None
    before = queue.health.get(endpoint_id)
    if before is None:
        state = "disabled" if view.disabled else "paused" if view.paused else (
            "failing" if view.failing_since_ms is not None else "active"
        )  # fmt: skip
        before = Health(state, failing_since_ms=view.failing_since_ms)
    after = health_step(before, event, now_ms, policy)
    queue.health[endpoint_id] = after
    health_url[endpoint_id] = view.url
    fields: dict[str, Any] = {}
    if after.state == "disabled" and not view.disabled:
        fields = {"disabled": True, "failing_since": None}
        log.warning(
            "endpoint %s disabled (%s)", endpoint_id, event, extra={"endpoint_id": endpoint_id}
        )
    elif after.state == "failing" and view.failing_since_ms is None:
        fields = {"failing_since": after.failing_since_ms}
    elif after.state == "active" and view.failing_since_ms is not None:
        fields = {"failing_since": None}
    if not fields:
        return {}, None
    stamp = writer.stamp()
    deltas = catalog.registry.patch_endpoint(
        endpoint_id, fields, (), (), stamp.wall_ms, writer.actor, stamp
    )
    return deltas, health_transition(view.state, after.state)
