"""Encoding and validation of delta record bodies (the ``body`` of a DeltaRecord).

Decides whether a record from another region is well formed and what it carries; never
merges anything itself, never reads time. A body is canonical msgpack of a map with any of
the sections ``registry`` ({key: CRDT bytes}), ``event``, ``delivery``, ``deliveries`` (an
event's fan-out snapshot: the deliveries decided at accept time, so every region can take
them over), ``attempt`` (the attempt row an outcome came from, so every region can show a
delivery's attempts; absent from records written before it existed; its
``request_headers``, at most ``REQUEST_HEADERS_MAX_BYTES``, only when not empty, so
attempts recorded before it decode with ``""``) and ``idempotency``
(an Idempotency-Key, replicated so a retry to any region finds it) and ``audit`` (who
made a registry change and what it was: ``AUDIT_FIELDS``, each a string of at most
``AUDIT_MAX_CHARS``; the record's origin and HLC stamp say where and when); the record ``kind``
names its main section
(proto/regionsync/v1/replication.proto).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

from crdt import CRDT, DecodeError, decode

from .envelope import REQUEST_HEADERS_MAX_BYTES
from .model import Attempt, Delivery, DeliveryStatus, Event
from .registry import key_type

__all__ = ["AUDIT_FIELDS", "AUDIT_MAX_CHARS", "KINDS", "Decoded", "decode_body", "encode_body"]

KINDS = ("registry", "event", "delivery")
_SECTIONS = (*KINDS, "deliveries", "idempotency", "attempt", "audit")
_SECTION_SET = frozenset(_SECTIONS)
AUDIT_FIELDS = ("who", "op", "object", "tenant", "detail")
AUDIT_MAX_CHARS = 512
_MAX_FANOUT = 100_000  # deliveries one event record may carry
_IDEMPOTENCY_FIELDS = {
    "tenant": str,
    "key": str,
    "event_id": str,
    "body_sha256": str,
    "created_at_ms": int,
    "region": str,
}
_EVENT_FIELDS = {
    "id": str,
    "tenant": str,
    "event_type": str,
    "payload": bytes,
    "region": str,
    "received_at_ms": int,
}
_DELIVERY_FIELDS = {
    "id": str,
    "event_id": str,
    "endpoint_id": str,
    "tenant": str,
    "status": str,
    "attempts": int,
    "next_attempt_at_ms": (int, type(None)),
    "region": str,
    "created_at_ms": int,
    "updated_at_ms": int,
    "generation": int,
}
_ATTEMPT_FIELDS = {
    "delivery_id": str,
    "n": int,
    "at_ms": int,
    "region": str,
    "status_code": (int, type(None)),
    "latency_ms": (float, int),
    "error": (str, type(None)),
    "response_excerpt": str,
    "endpoint_id": str,
    "generation": int,
    "response_headers": str,
    "owner_gen": str,
}
# fields a record may leave out (written before they existed): name -> (type, default)
_OPTIONAL = {"owner_gen": (str, "")}
# attempt fields written only when not empty (records from before them decode as "")
_ATTEMPT_OPTIONAL = {"request_headers": str}
_ATTEMPT_WITH_OPTIONAL = {**_ATTEMPT_FIELDS, **_ATTEMPT_OPTIONAL}
_AUDIT_SPEC = dict.fromkeys(AUDIT_FIELDS, str)


@dataclass(slots=True)
class Decoded:
    """What one record carries, validated: registry deltas, an event, a delivery."""

    registry: dict[str, CRDT] = field(default_factory=dict)
    event: Event | None = None
    delivery: Delivery | None = None
    deliveries: list[Delivery] = field(default_factory=list)
    # (tenant, key, event_id, body_sha256, created_at_ms, region): an Idempotency-Key
    idempotency: tuple[str, str, str, str, int, str] | None = None
    attempt: Attempt | None = None
    audit: dict[str, str] | None = None  # AUDIT_FIELDS -> value

    def delivery_ids(self) -> list[str]:
        """Ids of the deliveries it carries (``deliveries``, then ``delivery``)."""
        ids = [d.id for d in self.deliveries]
        if self.delivery is not None:
            ids.append(self.delivery.id)
        return ids


def encode_body(
    registry: dict[str, CRDT] | None = None,
    event: Event | None = None,
    delivery: Delivery | None = None,
    idempotency: tuple[str, str, str, str, int, str] | None = None,
    deliveries: list[Delivery] | None = None,
    attempt: Attempt | None = None,
    audit: dict[str, str] | None = None,
) -> bytes:
    """Canonical msgpack body (sorted keys) for a record; see module docstring."""
    body: dict[str, Any] = {}
    if audit is not None:
        body["audit"] = {k: audit[k] for k in sorted(AUDIT_FIELDS)}
    if attempt is not None:
        body["attempt"] = {k: getattr(attempt, k) for k in _sorted_keys(_ATTEMPT_FIELDS)}
        if attempt.request_headers:
            body["attempt"]["request_headers"] = attempt.request_headers
    if deliveries:
        body["deliveries"] = [_delivery_fields(d) for d in deliveries]
    if idempotency is not None:
        body["idempotency"] = dict(zip(_IDEMPOTENCY_FIELDS, idempotency, strict=True))
    if delivery is not None:
        body["delivery"] = _delivery_fields(delivery)
    if event is not None:
        body["event"] = {k: getattr(event, k) for k in _sorted_keys(_EVENT_FIELDS)}
        if event.owner_gen:
            body["event"]["owner_gen"] = event.owner_gen
    if registry:
        body["registry"] = {k: registry[k].to_bytes() for k in sorted(registry)}
    return msgpack.packb(body, use_bin_type=True)


_KEYS: dict[int, tuple[str, ...]] = {}


def _sorted_keys(spec: dict[str, Any]) -> tuple[str, ...]:
    """``sorted(spec)``, computed once per field table (records are encoded per write)."""
    keys = _KEYS.get(id(spec))
    if keys is None:
        keys = _KEYS[id(spec)] = tuple(sorted(spec))
    return keys


def _delivery_fields(d: Delivery) -> dict[str, Any]:
    out = {k: getattr(d, k) for k in _sorted_keys(_DELIVERY_FIELDS)}
    out["status"] = d.status.value
    if d.owner_gen:
        out["owner_gen"] = d.owner_gen
    return out


def _delivery(obj: Any, what: str) -> Delivery:
    d = _fields(obj, _DELIVERY_FIELDS, what)
    try:
        status = DeliveryStatus(d["status"])
    except ValueError:
        raise ValueError(f"{what}.status: unknown {d['status']!r}") from None
    return Delivery(**{**d, "status": status})


class _Spec:
    """A section's fields (``spec``: name -> type or tuple of types, plus ``_OPTIONAL``
    ones), compiled once per module-level table: every replicated record is checked here.
    Types are matched exactly (msgpack decodes to exact builtins), so a bool is no int."""

    __slots__ = ("all_checks", "allowed", "checks", "names", "optional", "required")

    def __init__(self, spec: dict[str, Any]):
        def exact(t: Any) -> tuple[type, ...]:
            return t if isinstance(t, tuple) else (t,)

        self.names = sorted(spec)
        self.required = frozenset(spec)
        self.allowed = self.required | frozenset(_OPTIONAL)
        self.checks = tuple((k, exact(t)) for k, t in spec.items())
        self.optional = tuple(
            (k, exact(t)) for k, (t, _d) in _OPTIONAL.items() if k not in spec
        )  # fmt: skip
        self.all_checks = self.checks + self.optional

    def check(self, obj: Any, what: str) -> dict[str, Any]:
        """``obj`` if it is a map with exactly these fields of their types, else
        ValueError naming ``what`` and the field."""
        if type(obj) is not dict:
            raise ValueError(f"{what}: expected fields {self.names}")
        keys = obj.keys()
        if keys == self.allowed:
            checks = self.all_checks
        elif keys == self.required:
            checks = self.checks
        else:
            if not self.required <= keys <= self.allowed:
                raise ValueError(f"{what}: expected fields {self.names}")
            checks = (*self.checks, *((k, t) for k, t in self.optional if k in obj))
        for name, types in checks:
            if type(obj[name]) not in types:
                raise ValueError(f"{what}.{name}: wrong type {type(obj[name]).__name__}")
        return obj


_SPECS: dict[int, _Spec] = {}


def _fields(obj: Any, spec: dict[str, Any], what: str) -> dict[str, Any]:
    """``_Spec(spec).check(obj, what)``, with ``spec``'s compiled form kept."""
    compiled = _SPECS.get(id(spec))
    if compiled is None:
        compiled = _SPECS[id(spec)] = _Spec(spec)
    return compiled.check(obj, what)


def decode_body(kind: str, body: bytes) -> Decoded:
    """Validate and decode a record body.

    Raises ValueError (with a reason naming the bad part) for an unknown kind, bad msgpack,
    unknown sections or keys, wrong field types, or CRDT bytes that do not decode to the
    type their key holds.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ValueError(f"body is not msgpack: {exc}") from None
    if type(obj) is not dict or not obj or not obj.keys() <= _SECTION_SET:
        raise ValueError(
            "body must be a map of registry/event/delivery/deliveries/attempt/idempotency/"
            "audit sections"
        )
    if kind not in obj:
        raise ValueError(f"kind {kind!r} but no {kind!r} section")
    out = Decoded()
    reg = obj.get("registry")
    if reg is not None:
        if not isinstance(reg, dict):
            raise ValueError("registry: must be a map")
        for key, data in reg.items():
            cls = key_type(key) if isinstance(key, str) else None
            if cls is None:
                raise ValueError(f"registry: unknown key {key!r}")
            if not isinstance(data, bytes):
                raise ValueError(f"registry.{key}: state must be bytes")
            try:
                state = decode(data)
            except DecodeError as exc:
                raise ValueError(f"registry.{key}: {exc}") from None
            if not isinstance(state, cls):
                raise ValueError(f"registry.{key}: holds {type(state).__name__}")
            out.registry[key] = state
    if "event" in obj:
        ev = _fields(obj["event"], _EVENT_FIELDS, "event")
        out.event = Event(**ev)
    if "delivery" in obj:
        out.delivery = _delivery(obj["delivery"], "delivery")
    if "deliveries" in obj:
        rows = obj["deliveries"]
        if not isinstance(rows, list) or len(rows) > _MAX_FANOUT:
            raise ValueError(f"deliveries: must be a list of at most {_MAX_FANOUT}")
        out.deliveries = [_delivery(r, f"deliveries[{i}]") for i, r in enumerate(rows)]
    if "attempt" in obj:
        a = obj["attempt"]
        if not isinstance(a, dict) or not (
            set(_ATTEMPT_FIELDS) <= set(a) <= set(_ATTEMPT_FIELDS) | set(_ATTEMPT_OPTIONAL)
        ):
            raise ValueError(f"attempt: expected fields {sorted(_ATTEMPT_FIELDS)}")
        full = len(a) == len(_ATTEMPT_WITH_OPTIONAL)  # (one optional field so far)
        _fields(a, _ATTEMPT_WITH_OPTIONAL if full else _ATTEMPT_FIELDS, "attempt")
        if len(a.get("request_headers", "").encode()) > REQUEST_HEADERS_MAX_BYTES:
            raise ValueError(
                f"attempt.request_headers: longer than {REQUEST_HEADERS_MAX_BYTES} bytes"
            )
        out.attempt = Attempt(**{**a, "latency_ms": float(a["latency_ms"])})
    if "idempotency" in obj:
        i = _fields(obj["idempotency"], _IDEMPOTENCY_FIELDS, "idempotency")
        out.idempotency = tuple(i[k] for k in _IDEMPOTENCY_FIELDS)  # type: ignore[assignment]
    if "audit" in obj:
        au = _fields(obj["audit"], _AUDIT_SPEC, "audit")
        for k in AUDIT_FIELDS:
            if len(au[k]) > AUDIT_MAX_CHARS:
                raise ValueError(f"audit.{k}: longer than {AUDIT_MAX_CHARS} characters")
        out.audit = {k: au[k] for k in AUDIT_FIELDS}
    return out
