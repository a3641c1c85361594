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
- What an attempt sent is recorded with it (``recorded_headers``, issue 15): its headers
  as ``name: value`` lines, ours first (``webhook-*``, content type, user agent) then the
  endpoint's own, at most ``REQUEST_HEADERS_MAX_BYTES``. The signature is recorded (a
  per-message HMAC: it proves nothing about other messages and reveals no key); the value
  of an endpoint header whose name looks like a credential (``SENSITIVE_HEADER_RE``:
  authorization, cookie, token, secret, key, password, auth) is replaced by
  ``REDACTED``: the attempt log is readable by tenant tokens and replicated to every
  region, the endpoint's credentials must not be.
- A reader who may not see the endpoint's secrets (a ``read`` token) sees every endpoint
  header's value as ``MASK``, whatever its name (``masked_request_headers``), and the
  endpoint's header values masked wherever else an attempt shows them (a receiver that
  echoes its request: ``masked_text``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from .signing import signature_headers

__all__ = [
    "EVENT_TYPE_HEADER",
    "MASK",
    "MASK_MIN_CHARS",
    "PAYLOAD_FORMATS",
    "REDACTED",
    "REQUEST_HEADERS_MAX_BYTES",
    "RFC3339_MS_RANGE",
    "SENSITIVE_HEADER_RE",
    "delivery_body",
    "delivery_headers",
    "masked_request_headers",
    "masked_text",
    "recorded_headers",
    "rfc3339_ms",
]

EVENT_TYPE_HEADER = "webhook-event-type"
PAYLOAD_FORMATS = ("raw", "standard-webhooks")
_JSON_WS = b" \t\n\r"
# the recorded request headers of one attempt, in bytes (UTF-8; header values are ASCII)
REQUEST_HEADERS_MAX_BYTES = 4096
SENSITIVE_HEADER_RE = re.compile(r"auth|cookie|token|secret|key|passw", re.IGNORECASE)
REDACTED = "[redacted]"
MASK = "\u2026"  # what a reader without the endpoint's secrets sees instead of a value
MASK_MIN_CHARS = 4  # shorter header values are not searched for in free text (masked_text)
_OURS = ("webhook-id", "webhook-timestamp", "webhook-signature", EVENT_TYPE_HEADER,
         "content-type", "user-agent")  # fmt: skip


_last_second: tuple[int, str] = (0, "1970-01-01T00:00:00")  # rfc3339_ms's one-entry cache
# ms since the epoch RFC 3339 can write: 0001-01-01T00:00:00.000Z .. 9999-12-31T23:59:59.999Z
RFC3339_MS_RANGE = (-62_135_596_800_000, 253_402_300_799_999)


def rfc3339_ms(ms: int) -> str:
    """Milliseconds since the epoch -> ``2026-11-29T14:03:36.123Z`` (RFC 3339, UTC),
    exact: integer seconds and milliseconds (through ``ms / 1000`` as a float, values
    past year 2200 or so lost their last digit). The last second formatted is kept: a
    burst formats its timestamps from it (issue 17: 3 % of a publish's CPU before).
    A value outside ``RFC3339_MS_RANGE`` (none is accepted now; a store or a peer may
    hold one written before) is shown as the nearest bound, never an error."""
    global _last_second
    second, milli = divmod(min(max(ms, RFC3339_MS_RANGE[0]), RFC3339_MS_RANGE[1]), 1000)
    cached = _last_second  # one read: another thread may replace it meanwhile
    if cached[0] != second:
        text = datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds")
        cached = _last_second = (second, text.removesuffix("+00:00"))
    return f"{cached[1]}.{milli:03d}Z"


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


def recorded_headers(headers: Mapping[str, str], max_bytes: int = REQUEST_HEADERS_MAX_BYTES) -> str:
    """The request headers of one attempt as recorded with it: ``name: value`` lines
    joined by newlines, the headers ``delivery_headers`` sets first (in ``_OURS`` order),
    then the endpoint's own in their order, each of those whose name matches
    ``SENSITIVE_HEADER_RE`` with its value replaced by ``REDACTED``.

    At most ``max_bytes`` bytes (UTF-8): whole lines are kept in that order while they
    fit; when some are left out the last line says how many (``... 3 more headers not
    recorded``) if it fits (an endpoint header may make room for it, never one of ours).
    Ours come first, so the Standard Webhooks headers are kept unless ``max_bytes`` is
    tiny.
    """
    ours = [k for k in _OURS if k in headers]
    names = ours + [k for k in headers if k not in _OURS]
    lines = []
    for k in names:
        v = headers[k]
        if k not in _OURS and SENSITIVE_HEADER_RE.search(k):
            v = REDACTED
        lines.append(f"{k}: {v}")
    out: list[str] = []
    size = -1  # bytes of "\n".join(out), kept as lines are added (no re-join per line)
    for line in lines:  # whole lines, in order, while they fit
        grown = size + 1 + len(line.encode())
        if grown > max_bytes:
            break
        out.append(line)
        size = grown
    while len(out) < len(lines):  # some left out: say so, dropping endpoint lines for it
        note = f"... {len(lines) - len(out)} more headers not recorded"
        if len("\n".join([*out, note]).encode()) <= max_bytes:
            out.append(note)
            break
        if len(out) <= len(ours):  # never drop one of ours for the note
            break
        out.pop()
    return "\n".join(out)


def masked_request_headers(recorded: str) -> str:
    """``recorded`` (``recorded_headers``) with the value of every endpoint header (a
    line whose name is not one of ours) replaced by ``MASK``; ours and the note on
    headers left out stay as they are."""
    lines = recorded.split("\n")
    for i, line in enumerate(lines):
        name, sep, _ = line.partition(": ")
        if sep and name not in _OURS:
            lines[i] = f"{name}: {MASK}"
    return "\n".join(lines)


def masked_text(text: str, values: Iterable[str]) -> str:
    """``text`` with every occurrence of each of ``values`` (header values of at least
    ``MASK_MIN_CHARS`` characters, longest first) replaced by ``MASK``."""
    for v in sorted({v for v in values if len(v) >= MASK_MIN_CHARS}, key=len, reverse=True):
        text = text.replace(v, MASK)
    return text
