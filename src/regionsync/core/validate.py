"""Validation of registry and publish input, field by field.

Decides whether client input is acceptable and names the offending field; never resolves
names or touches state. Raises ``regionsync.errors.Unprocessable`` (422) with ``field``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from ..errors import Unprocessable
from .envelope import EVENT_TYPE_HEADER, PAYLOAD_FORMATS
from .filters import validate_filter
from .matching import check_event_pattern
from .registry import ID_RE
from .signing import parse_secret
from .urlguard import validate_url

__all__ = [
    "EVENT_TYPE_RE",
    "RESERVED_HEADERS",
    "check_event_type",
    "check_id",
    "check_text",
    "check_endpoint_fields",
    "json_integer",
]

EVENT_TYPE_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_HEADER_NAME_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}")
_HEADER_VALUE_RE = re.compile(r"[\x20-\x7e\t]*")
RESERVED_HEADERS = frozenset(
    {
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "content-type",
        "content-length",
        "host",
        "transfer-encoding",
        "connection",
        "user-agent",
        EVENT_TYPE_HEADER,
    }
)


def json_integer(value: Any) -> Any:
    """``value`` as an int if it is a JSON integer, else unchanged: JSON Schema counts a
    number with a zero fractional part (``16.0``) as an integer (2020-12 validation
    section 6.1.1), so the API takes it as one; booleans stay booleans."""
    if isinstance(value, float) and not isinstance(value, bool) and value.is_integer():
        return int(value)
    return value


def check_id(value: Any, field: str) -> str:
    """A user-supplied id: ``[A-Za-z0-9_.-]{1,64}``, not ``.`` or ``..`` (RFC 3986 dot
    segments: clients and proxies resolve them as path navigation, so such an id could
    not be addressed in a URL). Raises Unprocessable naming ``field``."""
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        raise Unprocessable("must match [A-Za-z0-9_.-]{1,64}", field=field)
    if value in (".", ".."):
        raise Unprocessable("must not be '.' or '..'", field=field)
    return value


# Characters refused in display text (names, descriptions): controls (Cc; a description
# may hold tab and newline), format characters (Cf) such as the bidi overrides U+202A-E
# and U+2066-9, which reorder a terminal or web line, except the joiners ZWNJ/ZWJ that
# some scripts and emoji need, line/paragraph separators (Zl, Zp) and surrogates (Cs).
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_JOINERS = frozenset("\u200c\u200d")


def check_text(value: Any, field: str, max_len: int, min_len: int = 0, lines: bool = False) -> str:
    """Display text of ``min_len..max_len`` characters without control, format (but the
    joiners U+200C/U+200D), separator or surrogate characters (Unicode general categories
    Cc, Cf, Zl, Zp, Cs; ``lines``: tab and newline allowed). Raises Unprocessable naming
    ``field`` and the first refused character."""
    if not isinstance(value, str) or not min_len <= len(value) <= max_len:
        raise Unprocessable(f"must be a string of {min_len}..{max_len} characters", field=field)
    if value.isascii() and value.isprintable():
        return value  # visible ASCII and space: none refused (the usual id, on hot paths)
    for i, c in enumerate(value):
        if lines and c in "\t\n":
            continue
        if c not in _JOINERS and unicodedata.category(c) in _REFUSED_CATEGORIES:
            raise Unprocessable(
                f"must not contain control or format characters (U+{ord(c):04X} at {i})",
                field=field,
            )
    return value


def check_event_type(value: Any, field: str = "event_type") -> str:
    """An event type: ``[A-Za-z0-9_.-]{1,128}``."""
    if not isinstance(value, str) or not EVENT_TYPE_RE.fullmatch(value):
        raise Unprocessable("must match [A-Za-z0-9_.-]{1,128}", field=field)
    return value


def check_endpoint_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the endpoint fields present in ``fields`` (create or patch); returns them.

    Checks url shape (http/https, host), description length, rate limit (0 < r <= 10000
    per second), in-flight cap (1..1000), headers (names, values, none reserved), secret
    (``whsec_`` + base64 of 24..64 bytes), ``payload_format`` (core.envelope), booleans,
    event type pattern lists (core.matching), the payload filter (core.filters, 422 naming
    ``filter.<path>``).
    """
    out = dict(fields)
    if "url" in out:
        try:
            validate_url(out["url"])
        except ValueError as exc:
            raise Unprocessable(str(exc), field="url", code="invalid_url") from None
    if "description" in out:
        d = out["description"]
        if d is None:
            out["description"] = ""
        else:
            check_text(d, "description", 1024, lines=True)
    if "rate_limit_per_s" in out:
        r = out["rate_limit_per_s"]
        # at least one delivery per 100 s: a slower lane could not send within the
        # retry horizon (core.retry.DEADLINE_S)
        if isinstance(r, bool) or not isinstance(r, int | float) or not 0.01 <= r <= 10_000:
            raise Unprocessable("must be a number in [0.01, 10000]", field="rate_limit_per_s")
    if "max_in_flight" in out:
        m = out["max_in_flight"] = json_integer(out["max_in_flight"])
        if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= 1000:
            raise Unprocessable("must be an integer in [1, 1000]", field="max_in_flight")
    if "headers" in out:
        h = out["headers"] if out["headers"] is not None else {}
        if not isinstance(h, dict) or len(h) > 32:
            raise Unprocessable("must be an object of at most 32 headers", field="headers")
        for name, value in h.items():
            if not isinstance(name, str) or not _HEADER_NAME_RE.fullmatch(name):
                raise Unprocessable("bad header name", field=f"headers.{name}")
            if name.lower() in RESERVED_HEADERS:
                raise Unprocessable(
                    "header is reserved", field=f"headers.{name}", code="reserved_header"
                )
            if (
                not isinstance(value, str)
                or len(value) > 4096
                or not _HEADER_VALUE_RE.fullmatch(value)
            ):
                raise Unprocessable(
                    "header values must be visible ASCII, spaces or tabs (RFC 9110 5.5)",
                    field=f"headers.{name}",
                )
        lowered = [name.lower() for name in h]
        if len(set(lowered)) != len(lowered):
            raise Unprocessable("header names must differ ignoring case", field="headers")
        out["headers"] = {k: h[k] for k in sorted(h)}
    if "secret" in out:
        try:
            parse_secret(out["secret"])
        except ValueError as exc:
            raise Unprocessable(str(exc), field="secret") from None
    if "payload_format" in out and out["payload_format"] not in PAYLOAD_FORMATS:
        raise Unprocessable(f"must be one of {', '.join(PAYLOAD_FORMATS)}", field="payload_format")
    for name in ("paused", "disabled"):
        if name in out and not isinstance(out[name], bool):
            raise Unprocessable("must be a boolean", field=name)
    if out.get("filter") is not None:
        validate_filter(out["filter"])
    for name in ("event_types", "event_types_add", "event_types_remove"):
        if name in out:
            types = out[name]
            if not isinstance(types, list) or len(types) > 256:
                raise Unprocessable("must be a list of at most 256 event types", field=name)
            for i, t in enumerate(types):
                check_event_pattern(t, f"{name}[{i}]")
    both = set(out.get("event_types_add", [])) & set(out.get("event_types_remove", []))
    both |= set(out.get("event_types") or []) & set(out.get("event_types_remove", []))
    if both:
        raise Unprocessable(
            f"event types both added and removed: {sorted(both)}", field="event_types_remove"
        )
    return out
