"""The registry's read model: tenants and endpoints as the converged state shows them
(core.registry builds them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .brokers import BrokerDestination


@dataclass(frozen=True, slots=True)
class TenantView:
    """A tenant as the converged registry shows it; ``usage`` maps counter -> value."""

    id: str
    name: str
    created_at_ms: int
    usage: dict[str, int]
    ack_policy: str = "local"
    publish_rate_per_s: float | None = None  # None: the node's ingest.tenant_rate_per_s
    strict_event_types: bool = False  # only catalogued event types (core.event_types)
    delivery_max_in_flight: int | None = None  # None: the node's delivery.tenant_max_in_flight


@dataclass(frozen=True, slots=True)
class EndpointView:
    """An endpoint (subscription): ``event_types`` are patterns (core.matching; empty means
    every type of the tenant), ``filter`` a payload filter document (core.filters)."""

    id: str
    tenant: str
    url: str
    event_types: tuple[str, ...]
    filter: Any
    description: str
    rate_limit_per_s: float
    max_in_flight: int
    headers: dict[str, str]
    paused: bool
    disabled: bool
    secret: str
    created_at_ms: int
    updated_at_ms: int
    failing_since_ms: int | None = None
    secret_previous: str | None = None
    secret_rotated_at_ms: int | None = None
    payload_format: str = "raw"  # body shape: raw | standard-webhooks (core.envelope)
    # None: HTTP POST to ``url``; else a broker (core.brokers), and ``url`` is its URL
    # without the password
    destination: BrokerDestination | None = None

    @property
    def state(self) -> str:
        """Health state: ``disabled`` over ``paused`` over ``failing`` over ``active``."""
        if self.disabled:
            return "disabled"
        if self.paused:
            return "paused"
        if self.failing_since_ms is not None:
            return "failing"
        return "active"

    def signing_secrets(self, now_ms: int, overlap_s: float) -> list[str]:
        """Secrets that sign now: the current one, and the previous one for ``overlap_s``
        seconds after a rotation (so receivers can switch without losing deliveries)."""
        secrets = [self.secret]
        if (
            self.secret_previous
            and self.secret_rotated_at_ms is not None
            and now_ms - self.secret_rotated_at_ms < overlap_s * 1000
        ):
            secrets.append(self.secret_previous)
        return secrets
