"""What one delivery attempt sends: its body (per the endpoint's ``payload_format``) and
its headers (endpoint headers, content type, user agent, event type, signatures).

Pure: the caller passes the time and the secrets that sign now. Rules:

- ``raw`` (default): the body is the event's payload, the exact bytes stored.
- ``standard-webhooks``: the body is the Standard Webhooks payload shape (spec 1.0,
  "Payload structure") ``{"type": <event type>, "timestamp": <RFC 3339 UTC, ms>,
  "data": <payload>}`` where ``data`` is the stored payload text verbatim (numbers keep
  their digits), and ``timestamp`` is when the event was accepted.
- Every request names its event type in ``webhook-event-type``. Standard Webhooks 1.0
  defines no such header (standard-webhooks/standard-webhooks#100 is an open proposal) and
  Svix puts the type in the body only; we use the spec's ``webhook-`` header namespace so
  receivers can route before parsing the body.
- The signature covers the body actually sent (core.signing).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from .signing import signature_headers

__all__ = [
    "EVENT_TYPE_HEADER",
    "PAYLOAD_FORMATS",
    "delivery_body",
    "delivery_headers",
    "rfc3339_ms",
]

EVENT_TYPE_HEADER = "webhook-event-type"
PAYLOAD_FORMATS = ("raw", "standard-webhooks")
_JSON_WS = b" \t\n\r"


def rfc3339_ms(ms: int) -> str:
    """Milliseconds since the epoch -> ``2026-11-29T14:03:36.123Z``."""
    dt = datetime.fromtimestamp(ms / 1000, UTC)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def delivery_body(fmt: str, event_type: str, received_at_ms: int, payload: bytes) -> bytes:
    """The body to send: ``payload`` itself (``raw``) or the Standard Webhooks shape with
    ``payload`` (UTF-8 JSON text, as stored) embedded byte for byte as ``data``.

    Raises ValueError for a format not in PAYLOAD_FORMATS.
    """
    if fmt == "raw":
        return payload
    if fmt == "standard-webhooks":
        head = json.dumps(
            {"type": event_type, "timestamp": rfc3339_ms(received_at_ms)},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return head[:-1].encode() + b',"data":' + payload.strip(_JSON_WS) + b"}"
    raise ValueError(f"unknown payload format {fmt!r}")


def delivery_headers(
    endpoint_headers: Mapping[str, str],
    user_agent: str,
    event_id: str,
    event_type: str,
    secrets: Sequence[str],
    timestamp_s: int,
    body: bytes,
) -> dict[str, str]:
    """Headers of one attempt; the endpoint's own headers never override ours (the
    reserved names are refused at registration, core.validate)."""
    return {
        **endpoint_headers,
        "content-type": "application/json",
        "user-agent": user_agent,
        EVENT_TYPE_HEADER: event_type,
        **signature_headers(secrets, event_id, timestamp_s, body),
    }
