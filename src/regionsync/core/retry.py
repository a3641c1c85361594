"""Outcome of one delivery attempt and the retry decision that follows it.

Decides the next status and attempt time of a delivery from the attempt's outcome, the
attempt number, ``now`` and a jitter sample; never reads time, randomness or the network.
Rules: Svix's schedule (docs/design.md#field-facts: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h,
±20 % jitter); Standard Webhooks advice (2xx success, 3xx failure, Retry-After honoured).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from .model import Attempt, Delivery, DeliveryStatus, storable_text

__all__ = [
    "DEADLINE_S",
    "DEFAULT_SCHEDULE_S",
    "AttemptOutcome",
    "due_now",
    "max_step_ms",
    "attempt_row",
    "Decision",
    "OutcomeKind",
    "next_step",
]

DEFAULT_SCHEDULE_S: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000, 36000)
_DEADLINE_S = 48 * 3600
# the total horizon of a delivery: no try is scheduled past it, and a pending delivery
# that stays due this long without an attempt (a starved lane) is dead
DEADLINE_S = _DEADLINE_S


class OutcomeKind(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    # The request may have reached the receiver (e.g. timeout after sending): retry, and
    # rely on the stable webhook-id for the receiver to deduplicate.
    INDETERMINATE = "indeterminate"


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """What one HTTP attempt produced.

    ``reason``: None on success, else e.g. ``http_500``, ``timeout``, ``connect``,
    ``redirect``, ``ssrf``, ``dns``, ``bad_response``, ``bad_request``; ``final`` marks
    failures that must not be retried (``ssrf``, ``bad_request``).
    ``latency_ms`` in milliseconds; ``retry_after_s`` from a ``Retry-After`` of a failed
    response. ``response_excerpt``: the first 4 KiB of the body (or the error text);
    ``response_headers``: the response's header lines, ``name: value`` joined by ``\n``,
    at most 8 KiB.
    """

    kind: OutcomeKind
    status_code: int | None = None
    reason: str | None = None
    latency_ms: float = 0.0
    response_excerpt: str = ""
    retry_after_s: float | None = None
    final: bool = False
    response_headers: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """Status after an attempt, and when to try next (ms since epoch) if still pending."""

    status: DeliveryStatus
    next_attempt_at_ms: int | None


def next_step(
    outcome: AttemptOutcome,
    attempts_made: int,
    now_ms: int,
    accepted_at_ms: int,
    jitter: float,
    schedule_s: Sequence[float] = DEFAULT_SCHEDULE_S,
    max_retry_after_s: float = 3600.0,
) -> Decision:
    """Decide what follows an attempt.

    ``attempts_made`` counts this attempt (1 after the first); ``jitter`` is a sample in
    [-1, 1] scaled to ±20 % of the scheduled delay. The delivery is dead when the schedule
    is exhausted, the failure is final, or the next try would fall past 48 h after
    acceptance.
    """
    if outcome.kind is OutcomeKind.SUCCEEDED:
        return Decision(DeliveryStatus.DELIVERED, None)
    if outcome.final or attempts_made > len(schedule_s):
        return Decision(DeliveryStatus.DEAD, None)
    if not -1.0 <= jitter <= 1.0:
        raise ValueError("jitter must be in [-1, 1]")
    delay_s = schedule_s[attempts_made - 1] * (1 + 0.2 * jitter)
    if outcome.retry_after_s is not None:
        delay_s = max(delay_s, min(outcome.retry_after_s, max_retry_after_s))
    at = now_ms + int(delay_s * 1000)
    if at > accepted_at_ms + _DEADLINE_S * 1000:
        return Decision(DeliveryStatus.DEAD, None)
    return Decision(DeliveryStatus.PENDING, at)


def attempt_row(
    d: Delivery,
    n: int,
    now_ms: int,
    region: str,
    outcome: AttemptOutcome,
    request_headers: str = "",
) -> Attempt:
    """The attempt log row of try ``n`` of ``d`` at ``now_ms`` in ``region``;
    ``request_headers``: what the request sent, as ``core.envelope.recorded_headers``
    renders it. Free text (the error, the response's excerpt and head) is made
    ``storable_text``."""
    error = None if outcome.kind is OutcomeKind.SUCCEEDED else outcome.reason
    if error is not None:
        error = storable_text(error)
    return Attempt(
        owner_gen=d.owner_gen,
        endpoint_id=d.endpoint_id,
        generation=d.generation,
        delivery_id=d.id,
        n=n,
        at_ms=now_ms,
        region=region,
        status_code=outcome.status_code,
        latency_ms=round(outcome.latency_ms, 3),
        error=error,
        response_excerpt=storable_text(outcome.response_excerpt),
        response_headers=storable_text(outcome.response_headers),
        request_headers=storable_text(request_headers),
    )


def max_step_ms(schedule_s: Sequence[float], max_retry_after_s: float = 3600.0) -> int:
    """The furthest ahead of its attempt ``next_step`` ever schedules the next one: the
    largest step with its jitter, or an honoured Retry-After."""
    return int(max(max(schedule_s) * 1.2, max_retry_after_s) * 1000)


def due_now(d: Delivery, now_ms: int, max_step: int, tolerance_ms: int) -> bool:
    """Is pending ``d`` due at ``now_ms``, its stored schedule read against this clock?
    At its time; or at once when that schedule cannot be this clock's: written (its
    ``updated_at_ms``) more than ``tolerance_ms`` ahead of now, by a clock that ran ahead
    (issue 41: a region restarted with a correct clock kept its schedules minutes out),
    or set further ahead of now than ``max_step`` (``max_step_ms``) allows. Early, such a
    retry costs one request; late, it stalls the delivery for the skew."""
    nxt = d.next_attempt_at_ms
    if nxt is None or d.status is not DeliveryStatus.PENDING:
        return False
    return nxt <= now_ms or d.updated_at_ms > now_ms + tolerance_ms or nxt > now_ms + max_step
