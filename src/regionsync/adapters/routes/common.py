"""What every route module shares: the API context, body reading with limits, time and
page parameters, the JSON problem body, bearer-token scopes and the JSON renderers.

Time, page and cursor parameters and the strict query check live in ``paging``, body
reading in ``request_body`` (both re-exported here). Every error becomes the problem body
``{error, detail, field}``.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from ...core.brokers import destination_json
from ...core.envelope import MASK, masked_request_headers, masked_text, rfc3339_ms
from ...core.event_types import EventTypeView
from ...core.jsontext import embed, loads
from ...core.model import Attempt, Delivery, DeliveryStatus, Event
from ...core.portal import PREFIX as PORTAL_PREFIX
from ...core.portal import portal_allows
from ...core.registry import EndpointView, TenantView
from ...core.sources import KIND_FIELDS
from ...core.tokens import Caller, config_caller, hash_token, registry_caller
from ...errors import (
    ClientError,
    Forbidden,
    NotFound,
    Unauthorized,
    Unprocessable,
)
from ...runtime.audit import acting_as
from ...runtime.node import Node
from ...runtime.recovery import Job
from ..usage_rates import UsageRates
from .paging import (
    decode_cursor,
    encode_cursor,
    open_cursor,
    page_params,
    parse_time,
    seal_cursor,
    strict_query,
)
from .request_body import read_body, read_no_body, read_object

__all__ = [
    "ApiContext",
    "Auth",
    "accepted_json",
    "accepted_response",
    "attempt_json",
    "can_see_secrets",
    "client_problem",
    "decode_cursor",
    "delivery_json",
    "delivery_status",
    "encode_cursor",
    "endpoint_json",
    "event_body",
    "event_json",
    "event_summary_json",
    "event_type_json",
    "hidden_values",
    "job_json",
    "open_cursor",
    "page_params",
    "parse_time",
    "problem",
    "read_body",
    "read_no_body",
    "read_object",
    "rfc3339",
    "seal_cursor",
    "source_json",
    "strict_query",
    "tenant_json",
]

log = logging.getLogger("regionsync.http")


def rfc3339(ms: int | None) -> str | None:
    """Milliseconds since the epoch -> ``2026-11-29T14:03:36.123Z`` (None stays None;
    ``core.envelope.rfc3339_ms``)."""
    return None if ms is None else rfc3339_ms(ms)


def delivery_status(status: str | None) -> DeliveryStatus | None:
    """Parse a ``status`` query parameter; 422 naming ``status`` for an unknown one."""
    try:
        return DeliveryStatus(status) if status is not None else None
    except ValueError:
        raise Unprocessable(
            f"must be one of {[s.value for s in DeliveryStatus]}", field="status"
        ) from None


def problem(
    status: int, code: str, detail: str, field: str | None = None, extra: Any = None
) -> JSONResponse:
    """The problem body ``{error, detail, field}`` (plus ``extra`` members, e.g. the
    ``path`` and ``schema_path`` of a schema violation)."""
    body: dict[str, Any] = {"error": code, "detail": detail}
    if field is not None:
        body["field"] = field
    if extra:
        body.update(extra)
    return JSONResponse(body, status_code=status)


def client_problem(exc: ClientError) -> JSONResponse:
    resp = problem(exc.status, exc.code, exc.detail, exc.field, getattr(exc, "extra", None))
    retry_after = getattr(exc, "retry_after_s", None)
    if retry_after is not None:
        resp.headers["Retry-After"] = str(retry_after)
    accept_encoding = getattr(exc, "accept_encoding", None)
    if accept_encoding is not None:
        resp.headers["Accept-Encoding"] = accept_encoding
    return resp


def tenant_json(t: TenantView, cluster_rate: float | None = None) -> dict[str, Any]:
    """A tenant body; ``cluster_rate``: events/s all regions accepted over about the last
    minute, from the replicated usage counter (adapters.usage_rates), or None."""
    return {
        "id": t.id,
        "name": t.name,
        "ack_policy": t.ack_policy,
        "publish_rate_per_s": t.publish_rate_per_s,
        "strict_event_types": t.strict_event_types,
        "delivery_max_in_flight": t.delivery_max_in_flight,
        "created_at": rfc3339(t.created_at_ms),
        "usage": t.usage,
        "publish_rate_cluster_per_s": cluster_rate,
    }


def event_type_json(v: EventTypeView) -> dict[str, Any]:
    """A catalog type; ``schema`` is the JSON Schema as registered (parsed), or null."""
    return {
        "name": v.name,
        "description": v.description,
        "schema": None if v.schema is None else json.loads(v.schema),
        "deprecated": v.deprecated,
        "deprecated_at": rfc3339(v.deprecated_at_ms),
        "created_at": rfc3339(v.created_at_ms),
        "updated_at": rfc3339(v.updated_at_ms),
    }


_KIND_SPECIFIC = frozenset(f for fields in KIND_FIELDS.values() for f in fields)


def source_json(fields: dict[str, Any]) -> dict[str, Any]:
    """A source without its secret (secrets of sources are never echoed or logged) and
    with only the settings its kind reads (``core.sources.KIND_FIELDS``)."""
    own = KIND_FIELDS.get(fields.get("kind", ""), ())
    hidden = {"secret", "created_at"} | {k for k in fields if k in _KIND_SPECIFIC and k not in own}
    out = {k: v for k, v in fields.items() if k not in hidden}
    out["created_at"] = rfc3339(fields.get("created_at"))
    out["url_path"] = f"/in/{fields['id']}"
    return out


def can_see_secrets(caller: Caller) -> bool:
    """Whether ``caller`` may read endpoint signing secrets and custom header values:
    admin and ``tenant:<id>:manage`` tokens (which may set them anyway); a
    ``tenant:<id>:read`` token may not, since the secret signs deliveries (its holder
    could forge them to the consumer) and header values often carry credentials. The one
    decision every view of an endpoint's secrets follows (``endpoint_json``,
    ``hidden_values`` for ``attempt_json``)."""
    return not caller.scope.endswith(":read")


def hidden_values(node: Node, caller: Caller, tenant: str, endpoint_id: str) -> list[str] | None:
    """For ``attempt_json``: None if ``caller`` may see the endpoint's header values
    (``can_see_secrets``), else the values of its configured headers, to mask."""
    if can_see_secrets(caller):
        return None
    view = node.catalog.registry.endpoint(endpoint_id, tenant)
    return list((view.headers or {}).values()) if view is not None else []


def endpoint_json(e: EndpointView, secrets: bool = True, listed: bool = False) -> dict[str, Any]:
    """An endpoint; without ``secrets`` (``can_see_secrets``) its ``secret`` reads
    ``whsec_…`` and every custom header value ``…`` (the names stay). A broker
    destination's URL password reads ``…`` without ``secrets`` and in lists (``listed``)."""
    if not secrets:
        return {
            **endpoint_json(e),
            "secret": "whsec_" + MASK,
            "headers": dict.fromkeys(e.headers or {}, MASK),
            "destination": destination_json(e.destination, False),
        }
    if listed:
        return {**endpoint_json(e), "destination": destination_json(e.destination, False)}
    return {
        "id": e.id,
        "tenant": e.tenant,
        "url": e.url,
        "event_types": list(e.event_types),
        "filter": e.filter,
        "description": e.description,
        "rate_limit_per_s": e.rate_limit_per_s,
        "max_in_flight": e.max_in_flight,
        "headers": e.headers,
        "paused": e.paused,
        "payload_format": e.payload_format,
        "destination": destination_json(e.destination),
        "state": e.state,
        "failing_since": rfc3339(e.failing_since_ms),
        "secret": e.secret,
        "created_at": rfc3339(e.created_at_ms),
        "updated_at": rfc3339(e.updated_at_ms),
    }


def event_json(e: Event) -> dict[str, Any]:
    """An event without its payload (``event_body`` embeds the payload text)."""
    return {
        "id": e.id,
        "tenant": e.tenant,
        "event_type": e.event_type,
        "region": e.region,
        "received_at": rfc3339(e.received_at_ms),
    }


def event_summary_json(e: Event, deliveries: list[Delivery]) -> dict[str, Any]:
    """An event in a list: no payload, its deliveries counted per status
    (``{"total": n, "pending": n, "delivered": n, ...}``, every status present)."""
    summary = {"total": len(deliveries), **{s.value: 0 for s in DeliveryStatus}}
    for d in deliveries:
        summary[d.status.value] += 1
    return {**event_json(e), "deliveries": summary}


def event_body(e: Event, extra: dict[str, Any]) -> bytes:
    """The event object with its stored payload text embedded as written (numbers keep
    their digits). A payload stored before the JSON policy (core.jsontext) that it refuses
    is read back as ``null`` with ``payload_error``, never as a 500."""
    try:
        text = e.payload.decode("utf-8")
        loads(text)
    except (UnicodeDecodeError, ClientError) as exc:
        detail = exc.detail if isinstance(exc, ClientError) else "not UTF-8"
        log.warning("event %s has a stored payload outside the JSON policy: %s", e.id, detail)
        return json.dumps({**event_json(e), "payload": None, "payload_error": detail,
                           **extra}).encode()  # fmt: skip
    return embed({**event_json(e), **extra}, "payload", text).encode()


def accepted_json(e: Event) -> dict[str, Any]:
    """The 202 body of an accepted event (publish and inbound)."""
    return {
        "id": e.id,
        "event_type": e.event_type,
        "region": e.region,
        "received_at": rfc3339(e.received_at_ms),
    }


_compact = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class Accepted(Response):
    """A 202 with a JSON body, its headers built directly (issue 17: a starlette
    ``JSONResponse`` cost 6 % of a publish's CPU, a new encoder and header list each)."""

    def __init__(self, body: dict[str, Any], deprecation: str | None = None):
        self.status_code, self.background = 202, None
        self.body = _compact.encode(body).encode()
        self.raw_headers = [
            (b"content-length", str(len(self.body)).encode()),
            (b"content-type", b"application/json"),
        ]
        if deprecation is not None:
            self.raw_headers.append((b"deprecation", deprecation.encode()))


def accepted_response(node: Node, e: Event, **extra: Any) -> Accepted:
    """The 202 of an accepted event (``accepted_json`` plus ``extra`` members). If its
    type is deprecated in the tenant's catalog: ``Deprecation: @<unix seconds>`` (RFC
    9745, when it was deprecated) and ``warnings``."""
    body = {**accepted_json(e), **extra}
    deprecated_at = node.catalog.deprecated_at(e.tenant, e.event_type)
    if deprecated_at is None:
        return Accepted(body)
    body["warnings"] = [f"event type {e.event_type!r} is deprecated"]
    return Accepted(body, f"@{deprecated_at // 1000}")


def delivery_json(node: Node, d: Delivery) -> dict[str, Any]:
    """A delivery; ``region`` owns it, ``custodian`` (runtime.custody) delivers it now.

    ``next_attempt_at`` of a pending delivery whose custodian is this region and whose
    endpoint this region sees failing is no earlier than the endpoint's next probe: the
    attempt waits for it (README, endpoint health). Asked in another region, it is the
    replicated schedule while that is ahead, and null once it has passed: the attempt is
    the custodian's (due, in flight, or held by the endpoint's lane or probe backoff,
    which only the custodian knows), so a time in the past would say nothing true
    (issue 43)."""
    custodian = node.custody.custodian(d)
    next_ms = d.next_attempt_at_ms
    if next_ms is not None and d.status is DeliveryStatus.PENDING and custodian == node.region:
        health = node.queue.health.get(d.endpoint_id)
        if health is not None and health.state == "failing" and health.next_probe_ms:
            next_ms = max(next_ms, health.next_probe_ms)
    elif next_ms is not None and next_ms <= node.cluster_clock.wall_ms():
        next_ms = None
    return {
        "id": d.id,
        "event": d.event_id,
        "endpoint": d.endpoint_id,
        "status": d.status.value,
        "attempts": d.attempts,
        "next_attempt_at": rfc3339(next_ms),
        "region": d.region,
        "custodian": custodian,
        "generation": d.generation,
        "created_at": rfc3339(d.created_at_ms),
        "updated_at": rfc3339(d.updated_at_ms),
    }


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "endpoint": job.endpoint_id,
        "since": rfc3339(job.since_ms),
        "status": job.status,
        "done": job.done,
        "error": job.error,
        "started_at": rfc3339(job.started_at_ms),
        "finished_at": rfc3339(job.finished_at_ms),
    }


def attempt_json(a: Attempt, hidden: list[str] | None = None) -> dict[str, Any]:
    """An attempt as recorded; with ``hidden`` (``hidden_values``: the caller may not see
    the endpoint's header values) every endpoint header's value in ``request_headers``
    reads ``…`` and the ``hidden`` values read ``…`` in the error and the response (a
    receiver may echo what it was sent)."""
    if hidden is not None:
        a = replace(
            a,
            request_headers=masked_request_headers(a.request_headers),
            response_headers=masked_text(a.response_headers, hidden),
            response_excerpt=masked_text(a.response_excerpt, hidden),
            error=None if a.error is None else masked_text(a.error, hidden),
        )
    return {
        "n": a.n,
        "generation": a.generation,
        "delivery": a.delivery_id,
        "at": rfc3339(a.at_ms),
        "region": a.region,
        "status_code": a.status_code,
        "latency_ms": a.latency_ms,
        "error": a.error,
        "request_headers": a.request_headers,
        "response_headers": a.response_headers,
        "response_excerpt": a.response_excerpt,
    }


def _loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Auth:
    """Bearer tokens with scopes (docs/api.md, Authentication): the static ``[[tokens]]``
    of node.toml and the replicated registry tokens (``POST /v1/tokens``, looked up by
    sha256; a revoked or expired one is unknown)."""

    def __init__(self, node: Node):
        self.node = node
        self.tokens = {
            t.token: config_caller(i, t.scope) for i, t in enumerate(node.settings.tokens)
        }
        self.open = not self.tokens and _loopback(node.settings.http_listen)
        if self.open:
            log.warning("no API tokens configured: accepting unauthenticated requests on loopback")
        elif not self.tokens:
            log.warning(
                "no API tokens configured and the HTTP listener is not on loopback: every /v1 "
                "request needs a registry token (401 otherwise); add [[tokens]] to the "
                "configuration to create the first one"
            )

    def caller(self, request: Request) -> Caller:
        """Who sends ``request``; 401 (field ``authorization``) without a valid token. An
        open node (no static tokens, loopback) takes a request without Authorization as
        admin, but refuses an unknown, revoked or expired token like any node. Names the
        caller for the audit log of the registry changes this request makes."""
        caller = self._caller(request)
        acting_as(caller.name)
        return caller

    def _caller(self, request: Request) -> Caller:
        header = request.headers.get("authorization", "")
        scheme, _, secret = header.partition(" ")
        secret = secret.strip()
        if scheme.lower() == "bearer" and secret:
            static = self.tokens.get(secret)
            if static is not None:
                return static
            if secret.startswith(PORTAL_PREFIX):  # a portal session (core.portal), any region's
                claims = self.node.portal.verify(secret)
                if claims is not None:
                    return Caller(f"tenant:{claims.tenant}:portal", f"portal:{claims.sid}")
            found = self.node.catalog.token_hashes.get(hash_token(secret))
            if found is not None and not found.expired(self.node.cluster_clock.wall_ms()):
                return registry_caller(found)
        if self.open and not header:
            return Caller("admin", "anonymous")  # an unknown token is refused even here
        raise Unauthorized("missing or unknown bearer token", field="authorization")

    def check(self, request: Request, tenant: str | None = None, publish: bool = False) -> Caller:
        """Allow or raise: 401 without a valid token; for a tenant token, 404 (field
        ``tenant``) on another tenant's routes (ids must not be probeable), 403 on
        admin-only routes (``tenant`` None) and on routes its right does not cover
        (``publish`` only the publish route, ``read`` only GET, ``portal`` only
        ``core.portal.PORTAL_ROUTES``)."""
        caller = self.caller(request)
        if caller.scope == "admin":
            return caller
        _, scope_tenant, right = caller.scope.split(":")
        if tenant is None:
            raise Forbidden(f"token scope {caller.scope!r} does not allow this",
                            field="authorization")  # fmt: skip
        if scope_tenant != tenant:
            raise NotFound(f"no tenant {tenant!r}", field="tenant")
        if right == "manage" or (right == "publish" and publish):
            return caller
        if right == "portal" and portal_allows(request.scope["method"], request.scope["path"],
                                               tenant):  # fmt: skip
            return caller
        if right == "read" and not publish and request.method in ("GET", "HEAD"):
            return caller
        raise Forbidden(f"token scope {caller.scope!r} does not allow this", field="authorization")


@dataclass
class ApiContext:
    """What a route module needs: the node, the token checker, the body size limit (bytes)
    and ``fast_routes`` (path regex -> handler), which a module fills with the ingest
    handlers that the fast lane serves without FastAPI."""

    node: Node
    auth: Auth
    max_body: int
    fast_routes: dict[str, Any] = field(default_factory=dict)
    usage_rates: UsageRates = field(init=False)

    def __post_init__(self) -> None:
        self.usage_rates = UsageRates(self.node)
