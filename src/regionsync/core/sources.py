"""Inbound webhook sources: verify a sender's signature and derive the event it carries.

Decides whether a raw inbound request is authentic and what event type and sender delivery
id it has; never reads time (``now_s`` is passed in), never logs secrets. Rules: GitHub
"Validating webhook deliveries" (X-Hub-Signature-256 = sha256=hex HMAC of the raw body),
Stripe "Verify webhook signatures" (Stripe-Signature t=..,v1=.., signed "{t}.{body}",
300 s tolerance), Standard Webhooks spec (webhook-id/-timestamp/-signature, 5 min).
Signatures are checked over the body's bytes before any parsing, in constant time: the
bytes as sent, or, for a gzip or deflate body, as decoded (adapters/routes/common.py):
GitHub, Stripe and Standard Webhooks senders (Svix) send uncompressed bodies, and a sender
that compresses (Stream's gzip webhooks) signs the uncompressed JSON. Bodies
are JSON under the policy of core.jsontext; a GitHub body may also be the form
``payload=<json>`` (GitHub's default content type). The payload text is kept as the sender
wrote it. Once a request is verified, its body's shape never refuses it: a payload without
a usable event type gets the source's ``default_event_type``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from ..errors import BadRequest, Unauthorized, Unprocessable, UnsupportedMediaType
from .jsontext import decode_utf8, loads
from .numtext import parse_uint
from .signing import parse_secret
from .validate import ACK_POLICIES, EVENT_TYPE_RE, check_text

__all__ = [
    "ACK_POLICIES",
    "KINDS",
    "LOOKUPS",
    "KIND_FIELDS",
    "PRIORITIES",
    "Inbound",
    "SourceConfig",
    "check_source_fields",
    "event_id_for",
    "verify",
]

KINDS = ("github", "stripe", "standard-webhooks", "hmac")
PRIORITIES = ("critical", "high", "normal", "low")
_ALGORITHMS = {"sha1": hashlib.sha1, "sha256": hashlib.sha256, "sha512": hashlib.sha512}
LOOKUPS = ("header:", "payload:")  # what event_type_from and id_from start with
STRIPE_TOLERANCE_S = 300
STANDARD_TOLERANCE_S = 300
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
DEFAULT_EVENT_TYPE = "webhook"  # the default of a source's default_event_type
FORM = "application/x-www-form-urlencoded"


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """A registered source. ``event_type_from``/``id_from``: ``header:<name>`` or
    ``payload:<dotted.path>`` (hmac kind; the other kinds have fixed rules)."""

    id: str
    tenant: str
    kind: str
    secret: str
    priority: str = "normal"
    ack_policy: str = "local"
    header: str = "x-signature"  # hmac: header carrying the signature
    algorithm: str = "sha256"  # hmac: sha1 | sha256 | sha512
    encoding: str = "hex"  # hmac: hex | base64
    prefix: str = ""  # hmac: e.g. "sha256=" before the digest
    event_type_from: str = "payload:type"
    id_from: str = ""  # hmac: empty = sha256 of the body
    # standard-webhooks, hmac: the event type when event_type_from finds no usable one
    default_event_type: str = DEFAULT_EVENT_TYPE


@dataclass(frozen=True, slots=True)
class Inbound:
    """What a verified inbound request carries: the event to accept."""

    event_type: str
    delivery_id: str
    payload: Any  # parsed JSON (filters read it)
    text: str  # the payload's JSON text exactly as the sender wrote it (delivered)


def event_id_for(source_id: str, delivery_id: str) -> str:
    """``evt_`` + 26 Crockford chars of sha256(source, sender delivery id): the same in
    every region, so a redelivery to any region is the same event."""
    digest = hashlib.sha256(f"{source_id}\0{delivery_id}".encode()).digest()
    n = int.from_bytes(digest[:17], "big") >> 6  # 130 bits
    return "evt_" + "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


# The settings each kind reads (``verify``); every kind also has id, tenant, kind, secret,
# priority and ack_policy. A source is shown with its kind's settings only.
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "github": (),
    "stripe": (),
    "standard-webhooks": ("event_type_from", "default_event_type"),
    "hmac": ("header", "algorithm", "encoding", "prefix", "event_type_from", "id_from",
             "default_event_type"),
}  # fmt: skip
_KIND_SPECIFIC = frozenset(f for fields in KIND_FIELDS.values() for f in fields)
# a header name is an RFC 9110 token (section 5.1, 5.6.2)
_TOKEN_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,256}")
# what a header value may hold (RFC 9110 section 5.5: VCHAR, SP, HTAB, obs-text)
_FIELD_VALUE_RE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def check_source_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a ``POST /v1/sources`` body; returns the fields. Raises Unprocessable:
    an unknown member, a setting another kind reads (``KIND_FIELDS``: e.g. ``header`` on a
    github source, which would be ignored), an hmac ``header`` or a ``header:<name>``
    lookup that is not an RFC 9110 token (section 5.6.2: no request could carry it)."""
    allowed = {"id", "tenant", "kind", "secret", "priority", "ack_policy", *_KIND_SPECIFIC}
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise Unprocessable("unknown field", field=unknown[0])
    if body.get("kind") in KIND_FIELDS:
        foreign = sorted(set(body) & _KIND_SPECIFIC - set(KIND_FIELDS[body["kind"]]))
        if foreign:
            raise Unprocessable(
                f"does not apply to kind {body['kind']!r} (it reads "
                f"{list(KIND_FIELDS[body['kind']]) or 'none of the optional settings'})",
                field=foreign[0],
            )
    for name in ("tenant", "kind", "secret"):
        if name not in body:
            raise Unprocessable("is required", field=name)
        if not isinstance(body[name], str) or not body[name]:
            raise Unprocessable("must be a non-empty string", field=name)
    kind = body["kind"]
    if kind not in KINDS:
        raise Unprocessable(f"must be one of {list(KINDS)}", field="kind")
    secret = body["secret"]
    if len(secret) > 512:
        raise Unprocessable("must be at most 512 characters", field="secret")
    if kind == "standard-webhooks":
        try:
            parse_secret(secret)
        except ValueError as exc:
            raise Unprocessable(str(exc), field="secret") from None
    out = {"kind": kind, "secret": secret, "tenant": body["tenant"]}
    default_priority = "critical" if kind == "github" else "normal"  # GitHub never retries
    choices = {
        "priority": (PRIORITIES, default_priority),
        "ack_policy": (ACK_POLICIES, "local"),
        "algorithm": (tuple(_ALGORITHMS), "sha256"),
        "encoding": (("hex", "base64"), "hex"),
    }
    for name, (options, default) in choices.items():
        value = body.get(name, default)
        if value not in options:
            raise Unprocessable(f"must be one of {list(options)}", field=name)
        out[name] = value
    for name, default in (("header", "x-signature"), ("prefix", ""), ("id_from", ""),
                          ("event_type_from", "payload:type")):  # fmt: skip
        value = body.get(name, default)
        if not isinstance(value, str) or len(value) > 256:
            raise Unprocessable("must be a string of at most 256 characters", field=name)
        if name in ("event_type_from", "id_from") and value and not value.startswith(LOOKUPS):
            raise Unprocessable("must start with 'header:' or 'payload:'", field=name)
        if name == "prefix" and not _FIELD_VALUE_RE.fullmatch(value):  # it must arrive in one
            raise Unprocessable(
                "must be characters a header value can carry (RFC 9110 section 5.5: visible "
                "ASCII, space, tab, or Latin-1 above 0x7f)",
                field=name,
            )
        if name == "header" and not _TOKEN_RE.fullmatch(value):
            raise Unprocessable("must be a header name (an RFC 9110 token)", field=name)
        if value.startswith("header:") and not _TOKEN_RE.fullmatch(value[7:]):
            raise Unprocessable("'header:' must name a header (an RFC 9110 token)", field=name)
        out[name] = value.lower() if name == "header" else value
    default_type = body.get("default_event_type", DEFAULT_EVENT_TYPE)
    if not isinstance(default_type, str) or not EVENT_TYPE_RE.fullmatch(default_type):
        raise Unprocessable("must match [A-Za-z0-9_.-]{1,128}", field="default_event_type")
    out["default_event_type"] = default_type
    return out


def _parse_json(body: bytes, headers: Mapping[str, str], form: bool = False) -> tuple[Any, str]:
    """``(parsed, text)`` of the payload; ``form``: the body may be ``payload=<json>``
    (application/x-www-form-urlencoded, WHATWG URL "urlencoded parsing")."""
    ctype = headers.get("content-type", "").split(";")[0].strip().lower()
    text = decode_utf8(body)
    if ctype == FORM:
        if not form:
            raise UnsupportedMediaType("content type must be application/json",
                                       field="content-type")  # fmt: skip
        try:
            fields = parse_qsl(text, keep_blank_values=True, errors="strict")
        except (ValueError, UnicodeError):
            raise BadRequest("form body is not valid", field="body") from None
        values = [v for k, v in fields if k == "payload"]
        if len(values) != 1:
            raise BadRequest("form body must carry one payload field", field="payload")
        text = values[0]
    return loads(text, field="body"), text


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name.lower())
    if not value:
        raise Unauthorized(f"missing {name} header", field=name, code="bad_signature")
    return value


def _lookup(spec: str, headers: Mapping[str, str], payload: Any) -> Any:
    where, _, name = spec.partition(":")
    if where == "header":
        return headers.get(name.lower())
    value = payload
    for part in name.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _check_event_type(value: Any, field: str) -> str:
    if not isinstance(value, str) or not EVENT_TYPE_RE.fullmatch(value):
        raise Unprocessable("event type must match [A-Za-z0-9_.-]{1,128}", field=field)
    return value


def _event_type(src: SourceConfig, headers: Mapping[str, str], payload: Any) -> str:
    """The type where ``event_type_from`` points, else the source's default."""
    value = _lookup(src.event_type_from, headers, payload)
    if isinstance(value, str) and EVENT_TYPE_RE.fullmatch(value):
        return value
    return _check_event_type(src.default_event_type or DEFAULT_EVENT_TYPE, "default_event_type")


def _delivery_id(value: Any, field: str) -> str:
    """A sender's delivery id: 1..256 characters, none of them a control, format or
    surrogate character (``check_text``: a NUL, which no store keeps, or a lone surrogate
    from a JSON escape, which UTF-8 cannot encode)."""
    return check_text(value, field, 256, 1)


def _header_id(value: str, field: str) -> str:
    """A sender's delivery id from header ``field``: as ``_delivery_id`` (a header decodes
    as Latin-1, so a byte 0x80-0x9F is a C1 control character), but BadRequest, like every
    malformed sender header."""
    try:
        return _delivery_id(value, field)
    except Unprocessable as exc:
        raise BadRequest(f"{field} {exc.detail}", field=field) from None


def _within(ts: str, now_s: int, tolerance_s: int, field: str) -> int:
    t = parse_uint(ts, field, what="a Unix time in seconds")
    if abs(now_s - t) > tolerance_s:
        raise Unauthorized(
            f"timestamp outside the {tolerance_s} s tolerance", field=field, code="stale"
        )
    return t


def _verify_github(src: SourceConfig, headers: Mapping[str, str], body: bytes) -> Inbound:
    sig = _header(headers, "X-Hub-Signature-256")
    want = "sha256=" + hmac.new(src.secret.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want.encode(), sig.strip().encode()):
        raise Unauthorized("signature mismatch", field="X-Hub-Signature-256", code="bad_signature")
    payload, text = _parse_json(body, headers, form=True)
    event = headers.get("x-github-event")
    if not event:
        raise BadRequest("missing X-GitHub-Event header", field="X-GitHub-Event")
    action = payload.get("action") if isinstance(payload, dict) else None
    etype = f"{event}.{action}" if isinstance(action, str) and action else event
    if not EVENT_TYPE_RE.fullmatch(etype):
        etype = event  # an action that cannot be part of a type: the body is not refused
    delivery = headers.get("x-github-delivery")
    if not delivery:
        raise BadRequest("missing X-GitHub-Delivery header", field="X-GitHub-Delivery")
    if len(delivery) > 256:
        raise BadRequest("X-GitHub-Delivery is too long (over 256 characters)",
                         field="X-GitHub-Delivery")  # fmt: skip
    delivery = _header_id(delivery, "X-GitHub-Delivery")
    return Inbound(_check_event_type(etype, "X-GitHub-Event"), delivery, payload, text)


def _verify_stripe(
    src: SourceConfig, headers: Mapping[str, str], body: bytes, now_s: int
) -> Inbound:
    header = _header(headers, "Stripe-Signature")
    parts: dict[str, list[str]] = {}
    for item in header.split(","):
        k, _, v = item.strip().partition("=")
        parts.setdefault(k, []).append(v)
    if len(parts.get("t", [])) != 1 or not parts.get("v1"):
        raise Unauthorized("need one t= and at least one v1=", field="Stripe-Signature",
                           code="bad_signature")  # fmt: skip
    t = parts["t"][0]
    want = hmac.new(src.secret.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(want.encode(), v.encode()) for v in parts["v1"]):
        raise Unauthorized("signature mismatch", field="Stripe-Signature", code="bad_signature")
    _within(t, now_s, STRIPE_TOLERANCE_S, "Stripe-Signature")
    payload, text = _parse_json(body, headers)
    if not isinstance(payload, dict):
        raise Unprocessable("Stripe event must be a JSON object", field="body")
    event_id = _delivery_id(payload.get("id"), "id")
    return Inbound(_check_event_type(payload.get("type"), "type"), event_id, payload, text)


def _verify_standard(
    src: SourceConfig, headers: Mapping[str, str], body: bytes, now_s: int
) -> Inbound:
    msg_id = _header(headers, "webhook-id")
    ts = _header(headers, "webhook-timestamp")
    sigs = _header(headers, "webhook-signature")
    key = parse_secret(src.secret)
    mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    want = base64.b64encode(mac)
    ok = False
    for entry in sigs.split():
        version, _, sig = entry.partition(",")
        if version == "v1" and hmac.compare_digest(want, sig.encode()):
            ok = True
    if not ok:
        raise Unauthorized("signature mismatch", field="webhook-signature", code="bad_signature")
    _within(ts, now_s, STANDARD_TOLERANCE_S, "webhook-timestamp")
    payload, text = _parse_json(body, headers)
    if len(msg_id) > 256:
        raise BadRequest("webhook-id is too long", field="webhook-id")
    msg_id = _header_id(msg_id, "webhook-id")
    return Inbound(_event_type(src, headers, payload), msg_id, payload, text)


def _verify_hmac(src: SourceConfig, headers: Mapping[str, str], body: bytes) -> Inbound:
    sig = _header(headers, src.header).strip()
    mac = hmac.new(src.secret.encode(), body, _ALGORITHMS[src.algorithm]).digest()
    # the prefix is a label (``sha256=``, ``V1=``): any case; hex digits: any case;
    # base64: exact
    label, sig = sig[: len(src.prefix)], sig[len(src.prefix) :]
    if src.encoding == "hex":
        want = mac.hex()
        sig = sig.lower()
    else:
        want = base64.b64encode(mac).decode()
    if label.lower() != src.prefix.lower() or not hmac.compare_digest(want.encode(), sig.encode()):
        raise Unauthorized("signature mismatch", field=src.header, code="bad_signature")
    payload, text = _parse_json(body, headers)
    if src.id_from:
        delivery = _lookup(src.id_from, headers, payload)
        if not isinstance(delivery, str | int) or isinstance(delivery, bool) or not str(delivery):
            raise BadRequest("no delivery id where id_from points", field=src.id_from)
        delivery = _delivery_id(str(delivery), src.id_from)
    else:
        delivery = hashlib.sha256(body).hexdigest()
    return Inbound(_event_type(src, headers, payload), delivery, payload, text)


def verify(src: SourceConfig, headers: Mapping[str, str], body: bytes, now_s: int) -> Inbound:
    """Verify an inbound request (``headers`` with lower-case names) and derive its event.

    Raises Unauthorized (401: missing or bad signature, stale or future timestamp),
    BadRequest (400: body not UTF-8 JSON, a timestamp that is not ASCII digits within
    int64, missing sender headers, a GitHub or Standard Webhooks delivery id with a
    control or format character), Unprocessable (422: see core.jsontext; a GitHub or
    Stripe event type not ``[A-Za-z0-9_.-]{1,128}``, a Stripe event without an id),
    UnsupportedMediaType (415: a form body to a kind other than github).
    """
    try:
        if src.kind == "github":
            return _verify_github(src, headers, body)
        if src.kind == "stripe":
            return _verify_stripe(src, headers, body, now_s)
        if src.kind == "standard-webhooks":
            return _verify_standard(src, headers, body, now_s)
        return _verify_hmac(src, headers, body)
    except (binascii.Error, UnicodeEncodeError):
        raise Unauthorized("malformed signature header", code="bad_signature") from None
