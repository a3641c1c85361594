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

Names starting with ``_`` are optional (core.capabilities): a reader that reads
``optional-fields`` skips one it does not know, in the body or in a section, and counts it
(``Decoded.unknown``); a reader restricted to the baseline (release 0.1.0) refuses it, as
that release does. ``_writer`` ({"release": str}) is the one this release writes, on
registry records, once every region reads ``optional-fields``. A registry key kind gated
by a feature (``core.registry_keys.KEY_FEATURES``) is refused by a reader without it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from crdt import CRDT, DecodeError, ORSet, decode

from .capabilities import ALL
from .envelope import REQUEST_HEADERS_MAX_BYTES
from .model import Attempt, Delivery, DeliveryStatus, Event, storable_text
from .registry import key_type
from .registry_keys import key_feature

__all__ = [
    "AUDIT_FIELDS", "AUDIT_MAX_CHARS", "KINDS", "Decoded", "decode_body", "downgrade",
    "encode_body",
]  # fmt: skip

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
# fields a record may leave out (written before they existed, or only when not empty;
# a record without one decodes to the model's default): name -> type
_OPTIONAL = {"owner_gen": str}  # events and deliveries
_ATTEMPT_OPTIONAL = {"request_headers": str}
_AUDIT_SPEC = dict.fromkeys(AUDIT_FIELDS, str)
# Values every store keeps exactly, whatever region wrote them: integers in 0..2**63-1
# (SQLite INTEGER, PostgreSQL BIGINT) or, for these, 0..2**31-1 (PostgreSQL INTEGER);
# finite floats; strings without NUL (SQLite cuts a text there, PostgreSQL refuses it)
_INT_MAX = 2**63 - 1
_INT32_MAX = {name: 2**31 - 1 for name in ("attempts", "generation", "n", "status_code")}
# free text from outside (a receiver's answer, an error's message): made ``storable_text``
# here, as the attempt's origin wrote it (core.retry.attempt_row), not refused
_TEXT = frozenset({"error", "response_excerpt", "response_headers", "request_headers"})


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
    writer: str | None = None  # _writer's release: who wrote the record (diagnostics)
    unknown: int = 0  # optional (``_``) fields and sections skipped, not known here

    def delivery_ids(self) -> list[str]:
        """Ids of the deliveries it carries (``deliveries``, then ``delivery``)."""
        ids = [d.id for d in self.deliveries]
        if self.delivery is not None:
            ids.append(self.delivery.id)
        return ids


def encode_body(
    registry: Mapping[str, CRDT | bytes] | None = None,
    event: Event | None = None,
    delivery: Delivery | None = None,
    idempotency: tuple[str, str, str, str, int, str] | None = None,
    deliveries: list[Delivery] | None = None,
    attempt: Attempt | None = None,
    audit: dict[str, str] | None = None,
    writer: str | None = None,
) -> bytes:
    """Canonical msgpack body (sorted keys) for a record; see module docstring.
    ``writer``: the release for the ``_writer`` section (only once the cluster reads
    ``optional-fields``: the caller decides, core.capabilities)."""
    body: dict[str, Any] = {}
    if writer is not None:
        body["_writer"] = {"release": writer}
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
        body["registry"] = {k: _state_bytes(registry[k]) for k in sorted(registry)}
    return msgpack.packb(body, use_bin_type=True)


def _state_bytes(state: CRDT | bytes) -> bytes:
    """A registry section's value: a state's canonical bytes (given as such, unread)."""
    return state if isinstance(state, bytes) else state.to_bytes()


# a msgpack fixstr of 1..31 bytes starting with "_": where an optional name may be
_OPTIONAL_NAME = re.compile(rb"[\xa1-\xbf]_")


def downgrade(body: bytes, reads: frozenset[str]) -> bytes:
    """``body`` as a reader of ``reads`` accepts it: without its optional (``_``)
    sections and fields when the reader lacks ``optional-fields`` (a record written while
    every region read them, sent to a region rolled back since). Bytes that may hold no
    such name come back as they are; so does a body that is not a map of sections."""
    if "optional-fields" in reads or _OPTIONAL_NAME.search(body) is None:
        return body
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception:  # msgpack raises several unrelated types; the reader will refuse it
        return body
    if type(obj) is not dict:
        return body

    def strip(m: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in m.items() if not (type(k) is str and k[:1] == "_")}

    out: dict[str, Any] = {}
    for k, v in strip(obj).items():
        if type(v) is dict and k != "registry":  # registry keys are never optional
            v = strip(v)
        elif type(v) is list:
            v = [strip(x) if type(x) is dict else x for x in v]
        out[k] = v
    return msgpack.packb(out, use_bin_type=True)


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


def _delivery(obj: Any, what: str, skipped: list[int] | None = None) -> Delivery:
    d = _DELIVERY.check(obj, what, skipped)
    try:
        status = DeliveryStatus(d["status"])
    except ValueError:
        raise ValueError(f"{what}.status: unknown {d['status']!r}") from None
    return Delivery(**{**d, "status": status})


class _Spec:
    """A section's fields, compiled once: ``spec`` (name -> type or tuple of types) and
    ``optional`` fields a record may leave out. Types are matched exactly (msgpack decodes
    to exact builtins), so a bool is no number; values are checked as ``_INT_MAX``,
    ``_INT32_MAX`` and ``_TEXT`` say."""

    __slots__ = ("all_checks", "allowed", "checks", "names", "optional", "required")

    def __init__(self, spec: dict[str, Any], optional: dict[str, Any] | None = None):
        def compiled(name: str, t: Any) -> tuple[str, tuple[type, ...], int, bool]:
            types = t if isinstance(t, tuple) else (t,)
            return name, types, _INT32_MAX.get(name, _INT_MAX), name in _TEXT

        self.names = sorted(spec)
        self.required = frozenset(spec)
        self.allowed = self.required | frozenset(optional or ())
        self.checks = tuple(compiled(k, t) for k, t in spec.items())
        self.optional = tuple(compiled(k, t) for k, t in (optional or {}).items())
        self.all_checks = self.checks + self.optional

    def check(self, obj: Any, what: str, skipped: list[int] | None = None) -> dict[str, Any]:
        """``obj`` if it is a map with exactly these fields, each of its type and with a
        value every store keeps (a NUL in free text replaced), else ValueError naming
        ``what`` and the field. With ``skipped`` (the reader reads ``optional-fields``),
        unknown ``_`` fields are dropped from ``obj`` and counted in ``skipped[0]``."""
        if type(obj) is not dict:
            raise ValueError(f"{what}: expected fields {self.names}")
        keys = obj.keys()
        if keys == self.allowed:
            checks = self.all_checks
        elif keys == self.required:
            checks = self.checks
        else:
            extra = keys - self.allowed
            if extra and skipped is not None and all(k[:1] == "_" for k in extra):
                for k in extra:
                    del obj[k]
                skipped[0] += len(extra)
                keys = obj.keys()
            if not self.required <= keys <= self.allowed:
                raise ValueError(f"{what}: expected fields {self.names}")
            checks = self.checks + tuple(c for c in self.optional if c[0] in obj)
        for name, types, most, text in checks:
            v = obj[name]
            t = type(v)
            if t not in types:
                raise ValueError(f"{what}.{name}: wrong type {t.__name__}")
            if t is str:
                if "\x00" in v:
                    if not text:
                        raise ValueError(f"{what}.{name}: holds a NUL character")
                    obj[name] = storable_text(v)
            elif t is int:
                if not 0 <= v <= most:
                    raise ValueError(f"{what}.{name}: outside 0..{most}")
            elif t is float and not math.isfinite(v):
                raise ValueError(f"{what}.{name}: not a finite number")
        return obj


_EVENT = _Spec(_EVENT_FIELDS, _OPTIONAL)
_DELIVERY = _Spec(_DELIVERY_FIELDS, _OPTIONAL)
_ATTEMPT = _Spec(_ATTEMPT_FIELDS, _ATTEMPT_OPTIONAL)
_IDEMPOTENCY = _Spec(_IDEMPOTENCY_FIELDS)
_AUDIT = _Spec(_AUDIT_SPEC)


def decode_body(kind: str, body: bytes, reads: frozenset[str] = ALL) -> Decoded:
    """Validate and decode a record body, as a node that reads the features ``reads``
    (core.capabilities; default: every feature of this release).

    Raises ValueError (with a reason naming the bad part) for an unknown kind, bad msgpack,
    unknown sections or keys, wrong field types, or CRDT bytes that do not decode to the
    type their key holds. A ``registry`` record may lack its section (a change that
    changed nothing, carrying only its ``audit``: an empty tenant PATCH wrote such records
    before they were left out): it decodes as an empty registry change. Unknown ``_``
    sections and fields are skipped and counted when ``reads`` has ``optional-fields``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ValueError(f"body is not msgpack: {exc}") from None
    skipped = [0] if "optional-fields" in reads else None
    if type(obj) is not dict or not obj or not _sections_ok(obj, skipped):
        raise ValueError(
            "body must be a map of registry/event/delivery/deliveries/attempt/idempotency/"
            "audit sections"
        )
    if kind not in obj and kind != "registry":  # a registry change may change nothing
        raise ValueError(f"kind {kind!r} but no {kind!r} section")
    out = Decoded()
    if "registry" in obj:
        out.registry = _registry(obj["registry"], reads)
    if "event" in obj:
        out.event = Event(**_EVENT.check(obj["event"], "event", skipped))
    if "delivery" in obj:
        out.delivery = _delivery(obj["delivery"], "delivery", skipped)
    if "deliveries" in obj:
        rows = obj["deliveries"]
        if type(rows) is not list or len(rows) > _MAX_FANOUT:
            raise ValueError(f"deliveries: must be a list of at most {_MAX_FANOUT}")
        out.deliveries = [_delivery(r, f"deliveries[{i}]", skipped) for i, r in enumerate(rows)]
    if "attempt" in obj:
        a = _ATTEMPT.check(obj["attempt"], "attempt", skipped)
        if len(a.get("request_headers", "").encode()) > REQUEST_HEADERS_MAX_BYTES:
            raise ValueError(
                f"attempt.request_headers: longer than {REQUEST_HEADERS_MAX_BYTES} bytes"
            )
        out.attempt = Attempt(**{**a, "latency_ms": float(a["latency_ms"])})
    if "idempotency" in obj:
        i = _IDEMPOTENCY.check(obj["idempotency"], "idempotency", skipped)
        out.idempotency = tuple(i[k] for k in _IDEMPOTENCY_FIELDS)  # type: ignore[assignment]
    if "audit" in obj:
        au = _AUDIT.check(obj["audit"], "audit", skipped)
        for k in AUDIT_FIELDS:
            if len(au[k]) > AUDIT_MAX_CHARS:
                raise ValueError(f"audit.{k}: longer than {AUDIT_MAX_CHARS} characters")
        out.audit = {k: au[k] for k in AUDIT_FIELDS}
    if "_writer" in obj and skipped is not None:
        out.writer = _WRITER.check(obj["_writer"], "_writer", skipped)["release"][:64]
    if skipped is not None:
        out.unknown = skipped[0]
    return out


_WRITER = _Spec({"release": str})
_KNOWN_OPTIONAL = frozenset({"_writer"})


def _sections_ok(obj: dict[str, Any], skipped: list[int] | None) -> bool:
    """Every section of ``obj`` is known; with ``skipped`` (the reader reads
    ``optional-fields``), unknown ``_`` sections are counted there and left alone."""
    if obj.keys() <= _SECTION_SET:
        return True
    if skipped is None:
        return False
    for k in obj.keys() - _SECTION_SET:
        if k[:1] != "_":
            return False
        if k not in _KNOWN_OPTIONAL:
            skipped[0] += 1
    return True


def _registry(reg: Any, reads: frozenset[str]) -> dict[str, CRDT]:
    if type(reg) is not dict:
        raise ValueError("registry: must be a map")
    out: dict[str, CRDT] = {}
    for key, data in reg.items():
        cls = key_type(key) if isinstance(key, str) else None
        if cls is None or key_feature(key) not in reads:
            raise ValueError(f"registry: unknown key {key!r}")
        if not isinstance(data, bytes):
            raise ValueError(f"registry.{key}: state must be bytes")
        try:
            state = decode(data)
        except DecodeError as exc:
            raise ValueError(f"registry.{key}: {exc}") from None
        if not isinstance(state, cls):
            raise ValueError(f"registry.{key}: holds {type(state).__name__}")
        if cls is ORSet and not all(
            type(e) is str and "\x00" not in e for e in state.entries
        ):  # every set of the registry holds ids or event types (core.registry)
            raise ValueError(f"registry.{key}: holds an element that is not an id")
        out[key] = state
    return out
