"""One delivery attempt's send half: body, signed headers, the request, and what follows.

``send_attempt`` builds the body (``core.envelope``, the endpoint's ``payload_format``),
signs it for this attempt (``core.signing``: a fresh timestamp and signature per attempt,
with every secret that signs now), sends it through the ``Sender`` port (which pins the
checked address, follows no redirects and bounds the time and the captured response) and
returns the ``Outcome`` to record: the retry decision of ``core.retry.next_step`` and the
health input of ``core.health.step``. Recording it is the caller's (runtime/outcomes.py).
"""

from __future__ import annotations

from ..config import DeliverySettings
from ..core.envelope import delivery_body, delivery_headers, recorded_headers
from ..core.model import Delivery, DeliveryStatus, Event
from ..core.registry import EndpointView
from ..core.retry import OutcomeKind, attempt_row, next_step
from .outcomes import Outcome
from .ports import Clock, LocalWriter, OutboundRequest, Rng, Sender

__all__ = ["USER_AGENT", "send_attempt"]

USER_AGENT = "regionsync/0.1 (+https://github.com/regionsync)"


async def send_attempt(
    d: Delivery,
    event: Event,
    ep: EndpointView,
    *,
    region: str,
    opts: DeliverySettings,
    sender: Sender,
    writer: LocalWriter,
    clock: Clock,
    rng: Rng,
) -> Outcome:
    """Send attempt ``d.attempts + 1`` of ``d`` (``event`` to the live, sending endpoint
    ``ep``) and return its outcome: status and next attempt time (ms) per the retry
    schedule ``opts.retry_schedule_s``, the attempt row (with the recorded request
    headers) and the health event (``success``, ``gone``, ``exhausted`` or ``failure``).
    Network failures are outcomes, not exceptions; raises only on a programming error."""
    now = clock.wall_ms()
    body = delivery_body(ep.payload_format, event.event_type, event.received_at_ms,
                         event.payload)  # fmt: skip
    secrets = ep.signing_secrets(now, opts.secret_overlap_s)
    headers = delivery_headers(
        ep.headers, USER_AGENT, event.id, event.event_type, secrets, now // 1000, body
    )
    tel = writer.telemetry
    with tel.span(
        "regionsync.attempt", tel.context_of(event.id), **{"regionsync.event_id": event.id,
        "regionsync.delivery_id": d.id, "regionsync.attempt": d.attempts + 1},
    ) as span:  # fmt: skip
        request = OutboundRequest(ep.url, headers, body, opts.timeout_s, ep.destination)
        outcome = await sender.send(request)
        span.set_attribute("http.response.status_code", outcome.status_code or 0)
    tel.observe_attempt(outcome.kind.value, outcome.latency_ms / 1000)
    attempts = d.attempts + 1
    now = clock.wall_ms()
    decision = next_step(
        outcome, attempts, now, event.received_at_ms, rng.uniform(-1.0, 1.0),
        opts.retry_schedule_s,
    )  # fmt: skip
    status = decision.status
    attempt = attempt_row(d, attempts, now, region, outcome, recorded_headers(headers))
    if outcome.kind is OutcomeKind.SUCCEEDED:
        health_event = "success"
    elif outcome.status_code == 410:
        health_event = "gone"
    elif status is DeliveryStatus.DEAD:
        health_event = "exhausted"
    else:
        health_event = "failure"
    return Outcome(d, status, decision.next_attempt_at_ms, attempts, attempt, health_event)
