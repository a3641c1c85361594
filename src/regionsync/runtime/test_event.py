"""A test event to one endpoint (issue 43, the portal's "send example"): one signed POST,
built and signed exactly as a delivery attempt is (``core.envelope``: the endpoint's
payload format, headers and every secret that signs now), sent through the ``Sender``
port now, and answered with its outcome. Never stored, replicated, retried or counted in
the endpoint's health: it is a probe of the receiver, not an event of the tenant.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import DeliverySettings
from ..core.envelope import delivery_body, delivery_headers, recorded_headers
from ..core.registry import EndpointView
from ..core.retry import AttemptOutcome
from .attempts import USER_AGENT
from .ports import Clock, IdSource, OutboundRequest, Sender

__all__ = ["TestResult", "send_test_event"]

DEFAULT_TYPE = "regionsync.test"


@dataclass(frozen=True, slots=True)
class TestResult:
    """What a test event sent (``request_headers`` as an attempt records them) and what
    came back."""

    __test__ = False  # not a pytest class

    id: str
    event_type: str
    at_ms: int
    request_headers: str
    outcome: AttemptOutcome


async def send_test_event(
    ep: EndpointView,
    event_type: str | None,
    payload: bytes | None,
    *,
    opts: DeliverySettings,
    sender: Sender,
    clock: Clock,
    ids: IdSource,
) -> TestResult:
    """Send one test event to ``ep`` now (paused or disabled, it is sent all the same:
    the caller asked for it). ``payload``: JSON text (default: a small object naming the
    test); network and HTTP failures are in the outcome, never raised."""
    now = clock.wall_ms()
    event_id = ids.new("evt_test")
    etype = event_type or DEFAULT_TYPE
    if payload is None:
        payload = b'{"test":true,"endpoint":"' + ep.id.encode() + b'"}'
    body = delivery_body(ep.payload_format, etype, now, payload)
    secrets = ep.signing_secrets(now, opts.secret_overlap_s)
    headers = delivery_headers(ep.headers, USER_AGENT, event_id, etype, secrets, now // 1000, body)
    outcome = await sender.send(OutboundRequest(ep.url, headers, body, opts.timeout_s))
    return TestResult(event_id, etype, now, recorded_headers(headers), outcome)
