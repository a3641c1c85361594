"""HTTP API of one node (shared/API.md), on FastAPI/Starlette.

Translates HTTP to Node operations and every error to the JSON problem body
``{error, detail, field}``; bad input never answers 500. Bodies are read with a size
limit before parsing (413), must be JSON (415), and must parse (400) under the JSON
policy of core.jsontext (422 for what it refuses). Numbers from request text go through
core.numtext (ASCII digits, range-checked).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from ..core.jsontext import decode_utf8, embed, loads, loads_members
from ..core.model import Attempt, Delivery, DeliveryStatus, Event
from ..core.numtext import parse_uint
from ..core.registry import ID_RE, EndpointView, TenantView
from ..errors import (
    ClientError,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    Unprocessable,
    UnsupportedMediaType,
)
from ..runtime.node import Job, Node
from .openapi_docs import PROBLEM_RESPONSES, body

__all__ = ["create_app", "rfc3339"]

log = logging.getLogger("regionsync.http")


def rfc3339(ms: int | None) -> str | None:
    """Milliseconds since the epoch -> ``2026-11-29T14:03:36.123Z`` (None stays None)."""
    if ms is None:
        return None
    dt = datetime.fromtimestamp(ms / 1000, UTC)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_time(value: str, field: str) -> int:
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise Unprocessable("must be an RFC 3339 time", field=field) from None
    if dt.tzinfo is None:
        raise Unprocessable("must carry a time zone (e.g. Z)", field=field)
    return int(dt.timestamp() * 1000)


def _page_params(limit: int, since: str | None) -> int | None:
    """Check a list's ``limit`` (1..1000) and parse its ``since``; 422 naming the field."""
    if not 1 <= limit <= 1000:
        raise Unprocessable("must be in [1, 1000]", field="limit")
    return _parse_time(since, "since") if since is not None else None


def _problem(status: int, code: str, detail: str, field: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": code, "detail": detail}
    if field is not None:
        body["field"] = field
    return JSONResponse(body, status_code=status)


def _client_problem(exc: ClientError) -> JSONResponse:
    resp = _problem(exc.status, exc.code, exc.detail, exc.field)
    retry_after = getattr(exc, "retry_after_s", None)
    if retry_after is not None:
        resp.headers["Retry-After"] = str(retry_after)
    return resp


async def read_body(request: Request, max_bytes: int, also: tuple[str, ...] = ()) -> bytes:
    """The raw body of a JSON request (or of a content type in ``also``): 415 for another
    content type, 413 as soon as it is known to exceed ``max_bytes`` (from Content-Length,
    or while streaming), 400 for a Content-Length that is not ASCII digits."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json" and not ctype.endswith("+json") and ctype not in also:
        raise UnsupportedMediaType("content type must be application/json", field="content-type")
    declared = request.headers.get("content-length")
    if declared is not None:
        if parse_uint(declared.strip(), "content-length") > max_bytes:
            raise PayloadTooLarge(f"body is over {max_bytes} bytes", field="body")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"body is over {max_bytes} bytes", field="body")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_object(request: Request, max_bytes: int, surrogates: bool = False) -> dict[str, Any]:
    """The request body as a parsed JSON object; 415, 413 (before reading past the
    limit), 400, 422 naming the member (core.jsontext); lone surrogates refused unless
    ``surrogates`` (registry fields are stored as strings, which cannot hold them)."""
    raw = await read_body(request, max_bytes)
    return loads_members(decode_utf8(raw), surrogates=surrogates)[0]


def tenant_json(t: TenantView) -> dict[str, Any]:
    return {
        "id": t.id,
        "name": t.name,
        "ack_policy": t.ack_policy,
        "created_at": rfc3339(t.created_at_ms),
        "usage": t.usage,
    }


def source_json(fields: dict[str, Any]) -> dict[str, Any]:
    """A source without its secret (secrets of sources are never echoed or logged)."""
    out = {k: v for k, v in fields.items() if k not in ("secret", "created_at")}
    out["created_at"] = rfc3339(fields.get("created_at"))
    out["url_path"] = f"/in/{fields['id']}"
    return out


def endpoint_json(e: EndpointView) -> dict[str, Any]:
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


def delivery_json(d: Delivery) -> dict[str, Any]:
    return {
        "id": d.id,
        "event": d.event_id,
        "endpoint": d.endpoint_id,
        "status": d.status.value,
        "attempts": d.attempts,
        "next_attempt_at": rfc3339(d.next_attempt_at_ms),
        "region": d.region,
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


def attempt_json(a: Attempt) -> dict[str, Any]:
    return {
        "n": a.n,
        "generation": a.generation,
        "delivery": a.delivery_id,
        "at": rfc3339(a.at_ms),
        "region": a.region,
        "status_code": a.status_code,
        "latency_ms": a.latency_ms,
        "error": a.error,
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


class _Auth:
    """Bearer tokens with scopes (shared/API.md, Authentication)."""

    def __init__(self, node: Node):
        self.tokens = {t.token: t.scope for t in node.settings.tokens}
        self.open = not self.tokens and _loopback(node.settings.http_listen)
        if self.open:
            log.warning("no API tokens configured: accepting unauthenticated requests on loopback")
        elif not self.tokens:
            log.warning(
                "no API tokens configured and the HTTP listener is not on loopback: every /v1 "
                "request will be refused (401); add [[tokens]] to the configuration"
            )

    def check(self, request: Request, tenant: str | None = None, publish: bool = False) -> None:
        if self.open:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        scope = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if scope is None:
            raise Unauthorized("missing or unknown bearer token", field="authorization")
        if scope == "admin":
            return
        _, scope_tenant, right = scope.split(":")
        if tenant is not None and scope_tenant == tenant and (right == "manage" or publish):
            return
        raise Forbidden(f"token scope {scope!r} does not allow this", field="authorization")


def create_app(node: Node, manage_node: bool = False) -> Any:
    """The ASGI app serving ``node``; with ``manage_node`` its lifespan starts and stops
    the node (so a server's graceful shutdown also stops replication and delivery)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if manage_node:
            await node.start()
        try:
            yield
        finally:
            if manage_node:
                await node.stop()

    app = FastAPI(
        title="regionsync",
        version="0.1.0",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        responses=PROBLEM_RESPONSES,
    )
    auth = _Auth(node)
    max_body = node.settings.ingest.max_payload_bytes

    @app.exception_handler(ClientError)
    async def _client_error(request: Request, exc: ClientError) -> JSONResponse:
        return _client_problem(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _problem(exc.status_code, code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in err.get("loc", ()) if p not in ("query", "path", "body")]
        return _problem(422, "invalid", err.get("msg", "invalid request"), ".".join(loc) or None)

    @app.exception_handler(ClientDisconnect)
    async def _disconnect(request: Request, exc: ClientDisconnect) -> JSONResponse:
        return _problem(400, "client_disconnected", "the client went away mid-request")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return _problem(500, "internal", "internal error; see the node's log")

    # -- tenants -------------------------------------------------------------------------

    @app.post("/v1/tenants", status_code=201, openapi_extra=body("tenant"))
    async def create_tenant(request: Request) -> dict[str, Any]:
        auth.check(request)
        body = await read_object(request, max_body)
        unknown = sorted(set(body) - {"id", "name", "ack_policy"})
        if unknown:
            raise Unprocessable("unknown field", field=unknown[0])
        if "name" not in body:
            raise Unprocessable("is required", field="name")
        return tenant_json(
            await node.create_tenant(body.get("id"), body["name"], body.get("ack_policy", "local"))
        )

    @app.get("/v1/tenants/{tenant}")
    async def get_tenant(request: Request, tenant: str) -> dict[str, Any]:
        auth.check(request, tenant)
        return tenant_json(node.tenant(tenant))

    @app.delete("/v1/tenants/{tenant}", status_code=204)
    async def delete_tenant(request: Request, tenant: str) -> Response:
        auth.check(request)
        await node.delete_tenant(tenant)
        return Response(status_code=204)

    # -- endpoints -----------------------------------------------------------------------

    @app.post("/v1/tenants/{tenant}/endpoints", status_code=201, openapi_extra=body("endpoint"))
    async def create_endpoint(request: Request, tenant: str) -> dict[str, Any]:
        auth.check(request, tenant)
        body = await read_object(request, max_body)
        return endpoint_json(await node.create_endpoint(tenant, body))

    @app.get("/v1/tenants/{tenant}/endpoints")
    async def list_endpoints(request: Request, tenant: str) -> dict[str, Any]:
        auth.check(request, tenant)
        return {"items": [endpoint_json(e) for e in node.endpoints(tenant)], "next": None}

    @app.get("/v1/tenants/{tenant}/endpoints/{endpoint}")
    async def get_endpoint(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        auth.check(request, tenant)
        return endpoint_json(node.endpoint(tenant, endpoint))

    @app.patch("/v1/tenants/{tenant}/endpoints/{endpoint}", openapi_extra=body("endpoint_patch"))
    async def patch_endpoint(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        auth.check(request, tenant)
        body = await read_object(request, max_body)
        return endpoint_json(await node.patch_endpoint(tenant, endpoint, body))

    @app.delete("/v1/tenants/{tenant}/endpoints/{endpoint}", status_code=204)
    async def delete_endpoint(request: Request, tenant: str, endpoint: str) -> Response:
        auth.check(request, tenant)
        await node.delete_endpoint(tenant, endpoint)
        return Response(status_code=204)

    @app.post("/v1/tenants/{tenant}/endpoints/{endpoint}/test-filter", openapi_extra=body("sample"))
    async def test_filter(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        """Would a sample payload pass this endpoint's filter, and if not, which clause
        failed (``path.$op``)? Body: ``{"payload": ...}``."""
        auth.check(request, tenant)
        body = await read_object(request, max_body, surrogates=True)  # as publish accepts
        if set(body) != {"payload"}:
            raise Unprocessable('body must be {"payload": ...}', field="payload")
        return node.test_filter(tenant, endpoint, body["payload"])

    @app.get("/v1/tenants/{tenant}/endpoints/{endpoint}/deliveries")
    async def list_deliveries(
        request: Request,
        tenant: str,
        endpoint: str,
        status: str | None = None,
        since: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        auth.check(request, tenant)
        node.endpoint(tenant, endpoint)
        since_ms = _page_params(limit, since)
        try:
            st = DeliveryStatus(status) if status is not None else None
        except ValueError:
            raise Unprocessable(
                f"must be one of {[s.value for s in DeliveryStatus]}", field="status"
            ) from None
        if cursor is not None and not ID_RE.fullmatch(cursor):
            raise Unprocessable("not a cursor this API returned", field="cursor")
        rows = await node.store.list_deliveries(endpoint, st, since_ms, cursor, limit)
        nxt = rows[-1].id if len(rows) == limit else None
        return {"items": [delivery_json(d) for d in rows], "next": nxt}

    @app.post("/v1/tenants/{tenant}/endpoints/{endpoint}/rotate-secret")
    async def rotate_secret(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        """New generated secret; the previous one keeps signing for the overlap period."""
        auth.check(request, tenant)
        return endpoint_json(await node.patch_endpoint(tenant, endpoint, {"secret": None}))

    @app.get("/v1/tenants/{tenant}/endpoints/{endpoint}/attempts")
    async def list_endpoint_attempts(
        request: Request,
        tenant: str,
        endpoint: str,
        status: str | None = None,
        since: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """The attempt log of an endpoint: ``status`` succeeded|failed, time-ordered."""
        auth.check(request, tenant)
        node.endpoint(tenant, endpoint)
        since_ms = _page_params(limit, since)
        if status not in (None, "succeeded", "failed"):
            raise Unprocessable("must be succeeded or failed", field="status")
        after = None
        if cursor is not None:
            at, _, rest = cursor.partition(":")
            did, _, n = rest.rpartition(":")
            if not ID_RE.fullmatch(did):
                raise Unprocessable("not a cursor this API returned", field="cursor")
            at_ms, n_int = (parse_uint(v, "cursor", error=Unprocessable) for v in (at, n))
            after = (at_ms, did, n_int)
        ok = None if status is None else status == "succeeded"
        rows = await node.store.list_attempts(endpoint, ok, since_ms, after, limit)
        nxt = (
            f"{rows[-1].at_ms}:{rows[-1].delivery_id}:{rows[-1].n}" if len(rows) == limit else None
        )
        return {"items": [attempt_json(a) for a in rows], "next": nxt}

    async def _job_body(request: Request) -> int:
        body = await read_object(request, max_body)
        unknown = sorted(set(body) - {"since"})
        if unknown:
            raise Unprocessable("unknown field", field=unknown[0])
        if not isinstance(body.get("since"), str):
            raise Unprocessable("is required: an RFC 3339 time", field="since")
        return _parse_time(body["since"], "since")

    @app.post(
        "/v1/tenants/{tenant}/endpoints/{endpoint}/recover",
        status_code=202,
        openapi_extra=body("since"),
    )
    async def recover(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        """Re-send every dead delivery of the endpoint since a time (a background job)."""
        auth.check(request, tenant)
        since = await _job_body(request)
        return job_json(node.start_job(tenant, endpoint, "recover", since))

    @app.post(
        "/v1/tenants/{tenant}/endpoints/{endpoint}/replay-missing",
        status_code=202,
        openapi_extra=body("since"),
    )
    async def replay_missing(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        """Send what was skipped while the endpoint was paused or disabled (a job)."""
        auth.check(request, tenant)
        since = await _job_body(request)
        return job_json(node.start_job(tenant, endpoint, "replay-missing", since))

    @app.get("/v1/tenants/{tenant}/jobs/{job}")
    async def get_job(request: Request, tenant: str, job: str) -> dict[str, Any]:
        auth.check(request, tenant)
        found = node.jobs.get(job)
        if found is None or found.tenant != tenant:
            raise NotFound(f"no job {job!r}", field="job")
        return job_json(found)

    @app.post("/v1/tenants/{tenant}/deliveries/{delivery}/retry", status_code=202)
    async def retry(request: Request, tenant: str, delivery: str) -> dict[str, Any]:
        """Re-send one delivery now (a new generation, the same webhook-id)."""
        auth.check(request, tenant)
        return delivery_json(await node.retry_delivery(tenant, delivery))

    # -- events and deliveries -----------------------------------------------------------

    async def publish_handler(request: Request, tenant: str) -> JSONResponse:
        auth.check(request, tenant, publish=True)
        node.require_tenant(tenant)
        # the payload is delivered as the exact text of the body's "payload" member
        body, texts = loads_members(decode_utf8(await read_body(request, max_body)))
        unknown = sorted(set(body) - {"event_type", "payload"})
        if unknown:
            raise Unprocessable("unknown field", field=unknown[0])
        for name in ("event_type", "payload"):
            if name not in body:
                raise Unprocessable("is required", field=name)
        payload = texts["payload"]
        key = request.headers.get("idempotency-key")
        if key is not None and not 1 <= len(key) <= 256:
            raise Unprocessable("must be 1..256 characters", field="Idempotency-Key")
        event, _created = await node.publish(
            tenant, body["event_type"], payload.encode(), key, body["payload"]
        )
        return JSONResponse(accepted_json(event), status_code=202)

    @app.post("/v1/tenants/{tenant}/events", status_code=202, openapi_extra=body("event"))
    async def publish(request: Request, tenant: str) -> JSONResponse:
        return await publish_handler(request, tenant)

    @app.get("/v1/tenants/{tenant}/events/{event}")
    async def get_event(request: Request, tenant: str, event: str) -> Response:
        auth.check(request, tenant)
        ev, deliveries = await node.get_event(tenant, event)
        extra = {"deliveries": [delivery_json(d) for d in deliveries]}
        return Response(event_body(ev, extra), media_type="application/json")

    @app.get("/v1/tenants/{tenant}/deliveries/{delivery}/attempts")
    async def list_attempts(request: Request, tenant: str, delivery: str) -> dict[str, Any]:
        auth.check(request, tenant)
        node.tenant(tenant)
        d = await node.store.get_delivery(delivery)
        if d is None or d.tenant != tenant:
            raise NotFound(f"no delivery {delivery!r}", field="delivery")
        attempts = await node.store.attempts_of(delivery)
        return {"items": [attempt_json(a) for a in attempts], "next": None}

    # -- inbound sources -----------------------------------------------------------------

    @app.post("/v1/sources", status_code=201, openapi_extra=body("source"))
    async def create_source(request: Request) -> dict[str, Any]:
        auth.check(request)
        body = await read_object(request, max_body)
        return source_json(await node.create_source(body))

    @app.get("/v1/sources/{source}")
    async def get_source(request: Request, source: str) -> dict[str, Any]:
        auth.check(request)
        return source_json(node.source(source))

    @app.delete("/v1/sources/{source}", status_code=204)
    async def delete_source(request: Request, source: str) -> Response:
        auth.check(request)
        await node.delete_source(source)
        return Response(status_code=204)

    async def inbound_handler(request: Request, source: str) -> JSONResponse:
        node.source(source)  # 404 before reading a byte of an unknown source's body
        raw = await read_body(request, max_body, also=("application/x-www-form-urlencoded",))
        headers = {k.lower(): v for k, v in request.headers.items()}
        event, created = await node.ingest(source, headers, raw)
        return JSONResponse({**accepted_json(event), "duplicate": not created}, status_code=202)

    @app.post("/in/{source}", status_code=202)
    async def inbound(request: Request, source: str) -> JSONResponse:
        return await inbound_handler(request, source)

    # -- operations ----------------------------------------------------------------------

    @app.get("/v1/cluster")
    async def cluster(request: Request) -> dict[str, Any]:
        auth.check(request)
        c = node.cluster()
        for p in c["peers"]:
            p["last_ack_at"] = rfc3339(p.pop("last_ack_at_ms"))
        c["counts"] = await node.store.counts(node.region)
        return c

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        if node.started:
            return JSONResponse({"status": "ready"})
        return _problem(503, "not_ready", "node is starting or stopping")

    @app.get("/metrics")
    async def metrics() -> Response:
        counts = await node.store.counts(node.region)
        reg = CollectorRegistry(auto_describe=False)
        reg.register(_Snapshot(node, counts))
        return Response(generate_latest(reg), media_type="text/plain; version=0.0.4")

    return _FastLane(
        app,
        {
            re.compile(r"/v1/tenants/([^/]+)/events"): publish_handler,
            re.compile(r"/in/([^/]+)"): inbound_handler,
        },
    )


class _FastLane:
    """Serves the ingest routes without FastAPI's per-request dependency machinery (half
    the CPU of a publish); every other request, and the OpenAPI document, go to the
    FastAPI app. The handlers are the same functions the FastAPI routes call, and errors
    get the same JSON problem bodies."""

    def __init__(self, app: FastAPI, routes: dict[re.Pattern[str], Any]):
        self.app = app
        self.routes = routes
        self.state = app.state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            for pattern, handler in self.routes.items():
                m = pattern.fullmatch(scope["path"])
                if m is not None:
                    request = _RawRequest(scope, receive)
                    try:
                        response = await handler(request, m.group(1))
                    except ClientError as exc:
                        response = _client_problem(exc)
                    except ClientDisconnect:
                        response = _problem(400, "client_disconnected", "the client went away")
                    except Exception:
                        log.exception("internal error on POST %s", scope["path"])
                        response = _problem(500, "internal", "internal error; see the node's log")
                    await send(
                        {
                            "type": "http.response.start",
                            "status": response.status_code,
                            "headers": response.raw_headers,
                        }
                    )
                    await send({"type": "http.response.body", "body": response.body})
                    return
        await self.app(scope, receive, send)


class _RawRequest:
    """What the ingest handlers read of a request (``headers``, ``stream()``), straight
    from the ASGI scope: cheaper than building a starlette Request per publish."""

    __slots__ = ("_headers", "_receive", "_scope")

    def __init__(self, scope: Any, receive: Any):
        self._scope, self._receive = scope, receive
        self._headers: dict[str, str] | None = None

    @property
    def headers(self) -> dict[str, str]:
        """Header names lower-cased (ASGI sends them so); the first of a repeated name."""
        if self._headers is None:
            headers: dict[str, str] = {}
            for name, value in self._scope["headers"]:
                headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
            self._headers = headers
        return self._headers

    async def stream(self) -> AsyncIterator[bytes]:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            body = message.get("body", b"")
            if body:
                yield body
            if not message.get("more_body", False):
                return


class _Snapshot:
    """A Prometheus collector over values read just before the scrape."""

    def __init__(self, node: Node, counts: dict[str, int]):
        self.node, self.counts = node, counts

    def collect(self):  # noqa: ANN201 (prometheus collector protocol)
        node = self.node
        g = GaugeMetricFamily("regionsync_events", "Events held by this node", labels=["origin"])
        g.add_metric(["local"], self.counts["events_accepted"])
        g.add_metric(["all"], self.counts["events"])
        yield g
        g = GaugeMetricFamily(
            "regionsync_deliveries", "Deliveries owned by this region", labels=["status"]
        )
        for s in DeliveryStatus:
            g.add_metric([s.value], self.counts[f"deliveries_{s.value}"])
        yield g
        g = GaugeMetricFamily(
            "regionsync_replication_records_behind", "Records a peer lacks", labels=["peer"]
        )
        for p in node.peers.values():
            g.add_metric([p.region], node.records_behind(p))
        yield g
        g = GaugeMetricFamily("regionsync_peer_connected", "1 if connected", labels=["peer"])
        for p in node.peers.values():
            g.add_metric([p.region], 1.0 if p.connected else 0.0)
        yield g
        p = node.pressure
        g = GaugeMetricFamily("regionsync_ingest_saturation", "Smoothed backlog saturation S")
        g.add_metric([], p.smoothed if p else 0.0)
        yield g
        state = p.state if p else "accepting"
        g = GaugeMetricFamily("regionsync_ingest_state", "Backpressure state", labels=["state"])
        for name in ("accepting", "shedding", "critical_only", "overloaded"):
            g.add_metric([name], 1.0 if name == state else 0.0)
        yield g
        yield GaugeMetricFamily(
            "regionsync_ingest_retry_after_seconds",
            "Last Retry-After given",
            node.last_retry_after_s,
        )
        yield GaugeMetricFamily("regionsync_backlog", "Pending deliveries owned", node.backlog)
        stats = node.index.stats()
        c = CounterMetricFamily(
            "regionsync_match_negative_cache", "No-subscriber lookups", labels=["result"]
        )
        c.add_metric(["hit"], stats["hits"])
        c.add_metric(["miss"], stats["misses"])
        c.add_metric(["invalidated"], stats["invalidations"])
        yield c
        yield GaugeMetricFamily(
            "regionsync_match_endpoints", "Endpoints in the subscription index", stats["endpoints"]
        )
        c = CounterMetricFamily(
            "regionsync_ingest", "Ingest decisions", labels=["decision", "priority"]
        )
        for (decision, priority), n in sorted(node.ingest_counts.items()):
            c.add_metric([decision, priority], n)
        yield c
        for name, value in node.counters.items():
            yield CounterMetricFamily(f"regionsync_{name}", name.replace("_", " "), value=value)
