"""Routes of endpoints: CRUD, test-filter, secret rotation and the attempt log."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from ...core.envelope import masked_request_headers, masked_text
from ...core.jsontext import decode_utf8, loads_members
from ...core.numtext import parse_uint
from ...core.registry import ID_RE
from ...core.retry import OutcomeKind
from ...errors import Unprocessable
from ...runtime.test_event import TestResult, send_test_event
from .bodies import EndpointIn, EndpointPatch, SampleIn, TestEventIn
from .common import (
    ApiContext,
    attempt_json,
    can_see_secrets,
    decode_cursor,
    encode_cursor,
    endpoint_json,
    hidden_values,
    open_cursor,
    page_params,
    read_body,
    read_no_body,
    read_object,
    rfc3339,
    seal_cursor,
)
from .paging import parse_order

__all__ = ["build"]


def build(ctx: ApiContext) -> APIRouter:
    """Endpoints of a tenant, their filter test, secret rotation and attempt log."""
    router, node = APIRouter(), ctx.node

    @router.post(
        "/v1/tenants/{tenant}/endpoints", status_code=201, openapi_extra=EndpointIn.openapi()
    )
    async def create_endpoint(request: Request, tenant: str) -> dict[str, Any]:
        ctx.auth.check(request, tenant)
        body = await read_object(request, ctx.max_body)
        EndpointIn.check(body)
        return endpoint_json(await node.registry_ops.create_endpoint(tenant, body))

    @router.get("/v1/tenants/{tenant}/endpoints")
    async def list_endpoints(
        request: Request, tenant: str, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """The tenant's endpoints, newest first; ``{items, next}``, pass ``next`` as
        ``cursor`` for the following page."""
        secrets = can_see_secrets(ctx.auth.check(request, tenant))
        page_params(limit, None)
        rows, nxt = node.listing.endpoints(tenant, decode_cursor(cursor), limit)
        items = [endpoint_json(e, secrets, listed=True) for e in rows]
        return {"items": items, "next": encode_cursor(nxt)}

    @router.get("/v1/tenants/{tenant}/endpoints/{endpoint}")
    async def get_endpoint(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        """One endpoint; a ``read`` token sees its secret and header values masked."""
        secrets = can_see_secrets(ctx.auth.check(request, tenant))
        return endpoint_json(node.catalog.endpoint(tenant, endpoint), secrets)

    @router.patch(
        "/v1/tenants/{tenant}/endpoints/{endpoint}", openapi_extra=EndpointPatch.openapi()
    )
    async def patch_endpoint(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        ctx.auth.check(request, tenant)
        body = await read_object(request, ctx.max_body)
        EndpointPatch.check(body)
        return endpoint_json(await node.registry_ops.patch_endpoint(tenant, endpoint, body))

    @router.delete("/v1/tenants/{tenant}/endpoints/{endpoint}", status_code=204)
    async def delete_endpoint(request: Request, tenant: str, endpoint: str) -> Response:
        ctx.auth.check(request, tenant)
        await read_no_body(request, ctx.max_body)
        await node.registry_ops.delete_endpoint(tenant, endpoint)
        return Response(status_code=204)

    _actions(router, ctx)
    return router


def _actions(router: APIRouter, ctx: ApiContext) -> None:
    """An endpoint's filter test, secret rotation and attempt log."""
    node = ctx.node

    @router.post(
        "/v1/tenants/{tenant}/endpoints/{endpoint}/test-filter", openapi_extra=SampleIn.openapi()
    )
    async def test_filter(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        """Would a sample payload pass this endpoint's filter, and if not, which clause
        failed (``path.$op``)? Body: ``{"payload": ...}``."""
        ctx.auth.check(request, tenant)
        body = await read_object(request, ctx.max_body, surrogates=True)  # as publish accepts
        sample = SampleIn.check(body)
        return await node.registry_ops.test_filter(tenant, endpoint, sample.payload)

    @router.post(
        "/v1/tenants/{tenant}/endpoints/{endpoint}/test", openapi_extra=TestEventIn.openapi()
    )
    async def test_event(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        """Send one test event to this endpoint now, signed as a delivery is, and answer
        what came back (``ok``, ``status_code``, ``error``, ``response_excerpt``) and what
        was sent (``request_headers``). Not stored, replicated or retried; the endpoint's
        health is unchanged. Body: ``{"event_type"?, "payload"?}`` (``{}``: the defaults)."""
        caller = ctx.auth.check(request, tenant)
        ep = node.catalog.endpoint(tenant, endpoint)
        members, texts = loads_members(decode_utf8(await read_body(request, ctx.max_body)))
        body = TestEventIn.check(members)
        payload = texts["payload"].encode() if "payload" in texts else None
        sent = await send_test_event(ep, body.event_type, payload, opts=node.settings.delivery,
                                     sender=node.sender, clock=node.cluster_clock,
                                     ids=node.ids)  # fmt: skip
        return test_json(sent, hidden_values(node, caller, tenant, endpoint))

    @router.post("/v1/tenants/{tenant}/endpoints/{endpoint}/rotate-secret")
    async def rotate_secret(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        """New generated secret; the previous one keeps signing for the overlap period.
        No body (or ``{}``)."""
        ctx.auth.check(request, tenant)
        await read_no_body(request, ctx.max_body)
        return endpoint_json(
            await node.registry_ops.patch_endpoint(tenant, endpoint, {"secret": None})
        )

    @router.get("/v1/tenants/{tenant}/endpoints/{endpoint}/attempts")
    async def list_endpoint_attempts(
        request: Request,
        tenant: str,
        endpoint: str,
        status: str | None = None,
        since: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        order: str = "desc",
    ) -> dict[str, Any]:
        """The attempt log of an endpoint: ``status`` succeeded|failed, newest first
        unless ``order=asc`` (``next`` continues in the order asked). A ``read`` token
        sees the endpoint's header values masked (``…``) wherever they appear."""
        caller = ctx.auth.check(request, tenant)
        node.catalog.endpoint(tenant, endpoint)
        since_ms = page_params(limit, since)
        newest = parse_order(order)
        if status not in (None, "succeeded", "failed"):
            raise Unprocessable("must be succeeded or failed", field="status")
        after = _log_position(cursor)
        ok = None if status is None else status == "succeeded"
        rows, last = await node.recovery.attempts_page(
            tenant, endpoint, ok, since_ms, after, limit, newest
        )
        nxt = None if last is None else seal_cursor(f"{last[0]}:{last[1]}:{last[2]}")
        hidden = hidden_values(node, caller, tenant, endpoint)
        return {"items": [attempt_json(a, hidden) for a in rows], "next": nxt}


def _log_position(cursor: str | None) -> tuple[int, str, int] | None:
    """``(at_ms, delivery id, n)`` of an attempt-log cursor (None stays None); 422 naming
    ``cursor`` for one this API did not return."""
    if cursor is None:
        return None
    at, _, rest = (open_cursor(cursor) or "").partition(":")
    did, _, n = rest.rpartition(":")
    if not ID_RE.fullmatch(did):
        raise Unprocessable("not a cursor this API returned", field="cursor")
    at_ms, n_int = (parse_uint(v, "cursor", error=Unprocessable) for v in (at, n))
    return at_ms, did, n_int


def test_json(t: TestResult, hidden: list[str] | None) -> dict[str, Any]:
    """A test event's answer; with ``hidden`` (a ``read`` caller) header values masked as
    in ``attempt_json``."""
    o = t.outcome
    headers, excerpt = t.request_headers, o.response_excerpt
    if hidden is not None:
        headers, excerpt = masked_request_headers(headers), masked_text(excerpt, hidden)
    return {
        "id": t.id,
        "event_type": t.event_type,
        "at": rfc3339(t.at_ms),
        "ok": o.kind is OutcomeKind.SUCCEEDED,
        "status_code": o.status_code,
        "error": o.reason,
        "latency_ms": o.latency_ms,
        "request_headers": headers,
        "response_excerpt": excerpt,
    }
