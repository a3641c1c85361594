"""Validation of registry and publish input, field by field.

Decides whether client input is acceptable and names the offending field; never resolves
names or touches state. Raises ``regionsync.errors.Unprocessable`` (422) with ``field``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import Unprocessable
from .envelope import EVENT_TYPE_HEADER, PAYLOAD_FORMATS
from .event_types import NAME_RE
from .filters import validate_filter
from .matching import check_event_pattern
from .registry import ID_RE
from .signing import parse_secret
from .urlguard import validate_url

__all__ = [
    "ACK_POLICIES",
    "EVENT_ID_RE",
    "EVENT_TYPE_RE",
    "HEADER_NAME_RE",
    "HEADER_VALUE_RE",
    "RESERVED_HEADERS",
    "check_event_type",
    "check_id",
    "check_text",
    "check_endpoint_fields",
    "check_event_id",
    "check_new_tenant",
    "check_tenant_fields",
    "endpoint_defaults",
    "json_integer",
]

EVENT_TYPE_RE = NAME_RE  # an event type as published: a catalog type's name
# an event id a client may choose: the node's own form, evt_ + a ULID's 26 Crockford
# base32 digits (adapters/system.py UlidSource), 128 bits: the first at most 7
EVENT_ID_RE = re.compile(r"evt_[0-7][0-9A-HJKMNP-TV-Z]{25}")
HEADER_NAME_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}")  # an RFC 9110 token
HEADER_VALUE_RE = re.compile(r"[\x20-\x7e\t]*")
ACK_POLICIES = ("local", "one-remote")  # of a tenant and of a source
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


def check_event_id(value: Any, field: str = "id") -> str:
    """A client-chosen event id: ``evt_`` + 26 Crockford base32 digits (upper case)."""
    if not isinstance(value, str) or not EVENT_ID_RE.fullmatch(value):
        raise Unprocessable("must be evt_ followed by a ULID (26 Crockford base32 characters, "
                            "the first 0-7)", field=field)  # fmt: skip
    return value


# Ranges and sizes of registry fields: the rules below and the documented constraints of
# the request bodies (adapters/routes/bodies.py) read them from here.
TENANT_NAME_MAX = 256
TENANT_RATE_PER_S = (0.01, 1_000_000)  # events/s per region
TENANT_MAX_IN_FLIGHT = (1, 10_000)
DESCRIPTION_MAX = 1024
# at least one delivery per 100 s: a slower lane could not send within the retry horizon
# (core.retry.DEADLINE_S)
RATE_LIMIT_PER_S = (0.01, 10_000)
MAX_IN_FLIGHT = (1, 1000)
MAX_HEADERS = 32
HEADER_VALUE_MAX = 4096
MAX_EVENT_TYPES = 256


def endpoint_defaults() -> dict[str, Any]:
    """What a new endpoint has unless its body sets it (a fresh dict; a secret is
    generated)."""
    return {
        "filter": None,
        "description": "",
        "rate_limit_per_s": 50,
        "max_in_flight": 16,
        "headers": {},
        "paused": False,
        "disabled": False,
    }


def _number(value: Any, bounds: tuple[float, float]) -> bool:
    """Whether ``value`` is a JSON number (not a boolean) within ``bounds``."""
    lo, hi = bounds
    return not isinstance(value, bool) and isinstance(value, int | float) and lo <= value <= hi


def check_tenant_fields(fields: Mapping[str, Any]) -> None:
    """422 naming the first bad tenant field of ``fields`` (publish_rate_per_s, name,
    ack_policy, strict_event_types; each only if present); unknown names are the
    caller's check."""
    rate = fields.get("publish_rate_per_s")
    if rate is not None and not _number(rate, TENANT_RATE_PER_S):
        lo, hi = TENANT_RATE_PER_S
        raise Unprocessable(f"must be a number in [{lo}, {hi}]", field="publish_rate_per_s")
    name = fields.get("name")
    if "name" in fields and (not isinstance(name, str) or not 1 <= len(name) <= TENANT_NAME_MAX):
        raise Unprocessable(f"must be a string of 1..{TENANT_NAME_MAX} characters", field="name")
    if "ack_policy" in fields and fields["ack_policy"] not in ACK_POLICIES:
        raise Unprocessable(f"must be one of {list(ACK_POLICIES)}", field="ack_policy")
    if "strict_event_types" in fields and not isinstance(fields["strict_event_types"], bool):
        raise Unprocessable("must be a boolean", field="strict_event_types")


def check_new_tenant(
    tenant_id: Any,
    name: Any,
    ack_policy: Any,
    publish_rate_per_s: Any,
    strict_event_types: Any,
    delivery_max_in_flight: Any,
) -> int | None:
    """The fields of a new tenant (``tenant_id`` None: generated), in this order:
    ``delivery_max_in_flight`` (returned as an int or None), the ``check_tenant_fields``,
    the id (``check_id``), the name's characters (``check_text``); 422 naming the field."""
    cap = json_integer(delivery_max_in_flight)
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int)
                            or not _number(cap, TENANT_MAX_IN_FLIGHT)):  # fmt: skip
        lo, hi = TENANT_MAX_IN_FLIGHT
        raise Unprocessable(f"must be an integer in [{lo}, {hi}]", field="delivery_max_in_flight")
    check_tenant_fields(
        {"name": name, "ack_policy": ack_policy, "publish_rate_per_s": publish_rate_per_s,
         "strict_event_types": strict_event_types}
    )  # fmt: skip
    if tenant_id is not None:
        check_id(tenant_id, "id")
    check_text(name, "name", TENANT_NAME_MAX, min_len=1)
    return cap


# -- endpoint fields: one rule per member, applied in this order --------------------------


def _url(url: Any, field: str) -> Any:
    try:
        validate_url(url)
    except ValueError as exc:
        raise Unprocessable(str(exc), field=field, code="invalid_url") from None
    return url


def _description(d: Any, field: str) -> str:
    return "" if d is None else check_text(d, field, DESCRIPTION_MAX, lines=True)


def _rate_limit(r: Any, field: str) -> Any:
    if not _number(r, RATE_LIMIT_PER_S):
        lo, hi = RATE_LIMIT_PER_S
        raise Unprocessable(f"must be a number in [{lo}, {hi}]", field=field)
    return r


def _max_in_flight(m: Any, field: str) -> int:
    m = json_integer(m)
    if not isinstance(m, int) or not _number(m, MAX_IN_FLIGHT):
        lo, hi = MAX_IN_FLIGHT
        raise Unprocessable(f"must be an integer in [{lo}, {hi}]", field=field)
    return m


def _headers(h: Any, field: str) -> dict[str, str]:
    """Names RFC 9110 tokens, none reserved, unique ignoring case; values visible ASCII,
    spaces or tabs; returned sorted by name (None: no headers)."""
    h = {} if h is None else h
    if not isinstance(h, dict) or len(h) > MAX_HEADERS:
        raise Unprocessable(f"must be an object of at most {MAX_HEADERS} headers", field=field)
    for name, value in h.items():
        if not isinstance(name, str) or not HEADER_NAME_RE.fullmatch(name):
            raise Unprocessable("bad header name", field=f"{field}.{name}")
        if name.lower() in RESERVED_HEADERS:
            raise Unprocessable("header is reserved", field=f"{field}.{name}",
                                code="reserved_header")  # fmt: skip
        if (not isinstance(value, str) or len(value) > HEADER_VALUE_MAX
                or not HEADER_VALUE_RE.fullmatch(value)):  # fmt: skip
            raise Unprocessable(
                "header values must be visible ASCII, spaces or tabs (RFC 9110 5.5)",
                field=f"{field}.{name}",
            )
    lowered = [name.lower() for name in h]
    if len(set(lowered)) != len(lowered):
        raise Unprocessable("header names must differ ignoring case", field=field)
    return {k: h[k] for k in sorted(h)}


def _secret(secret: Any, field: str) -> Any:
    try:
        parse_secret(secret)
    except ValueError as exc:
        raise Unprocessable(str(exc), field=field) from None
    return secret


def _payload_format(value: Any, field: str) -> Any:
    if value not in PAYLOAD_FORMATS:
        raise Unprocessable(f"must be one of {', '.join(PAYLOAD_FORMATS)}", field=field)
    return value


def _boolean(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise Unprocessable("must be a boolean", field=field)
    return value


def _filter(doc: Any, field: str) -> Any:
    validate_filter(doc)  # None: no filter; 422 naming filter.<path>
    return doc


def _event_types(types: Any, field: str) -> Any:
    if not isinstance(types, list) or len(types) > MAX_EVENT_TYPES:
        raise Unprocessable(f"must be a list of at most {MAX_EVENT_TYPES} event types", field=field)
    for i, t in enumerate(types):
        check_event_pattern(t, f"{field}[{i}]")
    return types


_ENDPOINT_RULES: tuple[tuple[str, Callable[[Any, str], Any]], ...] = (
    ("url", _url),
    ("description", _description),
    ("rate_limit_per_s", _rate_limit),
    ("max_in_flight", _max_in_flight),
    ("headers", _headers),
    ("secret", _secret),
    ("payload_format", _payload_format),
    ("paused", _boolean),
    ("disabled", _boolean),
    ("filter", _filter),
    ("event_types", _event_types),
    ("event_types_add", _event_types),
    ("event_types_remove", _event_types),
)


def check_endpoint_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the endpoint fields present in ``fields`` (create or patch); returns them
    normalized (description None -> "", max_in_flight an int, headers sorted by name).

    Each present member is judged by its rule in ``_ENDPOINT_RULES`` order, then no event
    type may be both added (or set) and removed; 422 naming the field (``filter.<path>``
    for the payload filter, core.filters; ``headers.<name>`` for one header).
    """
    out = dict(fields)
    for name, rule in _ENDPOINT_RULES:
        if name in out:
            out[name] = rule(out[name], name)
    both = set(out.get("event_types_add", [])) & set(out.get("event_types_remove", []))
    both |= set(out.get("event_types") or []) & set(out.get("event_types_remove", []))
    if both:
        raise Unprocessable(
            f"event types both added and removed: {sorted(both)}", field="event_types_remove"
        )
    return out
