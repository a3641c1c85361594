"""Routes of events: publish (also served by the fast lane) and read-back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request, Response

from ...core.jsontext import decode_utf8, loads_members
from ...core.matching import check_event_pattern
from ...core.model import EventQuery
from ...core.validate import check_text
from ...errors import Unprocessable
from ..openapi_docs import IDEMPOTENCY_KEY
from .bodies import EventIn
from .common import (
    ApiContext,
    accepted_response,
    decode_cursor,
    delivery_json,
    delivery_status,
    encode_cursor,
    event_body,
    event_summary_json,
    page_params,
    parse_time,
    read_body,
)

__all__ = ["build"]


def _publisher(ctx: ApiContext) -> Callable[[Request, str], Awaitable[Response]]:
    """The publish handler (FastAPI's route and the fast lane's)."""
    node = ctx.node

    async def publish_handler(request: Request, tenant: str) -> Response:
        ctx.auth.check(request, tenant, publish=True)
        node.ingest.require_following()  # else the tenant lookup may be stale too
        node.catalog.require_tenant(tenant)
        # the payload is delivered as the exact text of the body's "payload" member
        body, texts = loads_members(decode_utf8(await read_body(request, ctx.max_body)))
        EventIn.check(body)
        payload = texts["payload"]
        key = request.headers.get("idempotency-key")
        if key is not None:  # 1..256 characters, no control characters (C1 included)
            check_text(key, "Idempotency-Key", 256, 1)
        event, created = await node.ingest.publish(
            tenant, body["event_type"], payload.encode(), key, body["payload"],
            event_id=body.get("id"),
        )  # fmt: skip
        return (
            accepted_response(node, event)
            if created
            else accepted_response(node, event, duplicate=True)
        )

    return publish_handler


def build(ctx: ApiContext) -> APIRouter:
    """Publish and read events; registers the publish handler for the fast lane."""
    router, node = APIRouter(), ctx.node
    publish_handler = _publisher(ctx)
    ctx.fast_routes[r"/v1/tenants/([^/]+)/events"] = publish_handler

    @router.post(
        "/v1/tenants/{tenant}/events",
        status_code=202,
        openapi_extra={**EventIn.openapi(), "parameters": [IDEMPOTENCY_KEY]},
    )
    async def publish(request: Request, tenant: str) -> Response:
        return await publish_handler(request, tenant)

    @router.get("/v1/tenants/{tenant}/events")
    async def list_events(
        request: Request,
        tenant: str,
        event_type: str | None = None,
        since: str | None = None,
        until: str | None = None,
        endpoint: str | None = None,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """Search the tenant's events, newest first, without payloads (``GET
        .../events/{id}`` has it): ``event_type`` exact or ``prefix.*``; ``since`` <=
        received < ``until`` (RFC 3339); ``endpoint`` / ``status``: events with a delivery
        to that endpoint / in that status (both: the same delivery). Each item counts its
        deliveries per status. 422 names the bad parameter."""
        ctx.auth.check(request, tenant)
        q = EventQuery(
            tenant,
            since_ms=page_params(limit, since),
            until_ms=parse_time(until, "until") if until is not None else None,
            endpoint_id=endpoint,
            status=delivery_status(status),
        )
        if q.since_ms is not None and q.until_ms is not None and q.since_ms > q.until_ms:
            raise Unprocessable("must not be after until", field="since")
        if event_type is not None:
            # the rule of endpoint patterns: an event type as publish takes it, '<prefix>.*'
            # or '*' (core.matching)
            check_event_pattern(event_type, "event_type")
            if event_type.endswith(".*"):
                q = replace(q, type_prefix=event_type[:-1])
            elif event_type != "*":
                q = replace(q, event_type=event_type)
        rows, nxt = await node.listing.events(q, decode_cursor(cursor), limit)
        return {
            "items": [event_summary_json(e, ds) for e, ds in rows],
            "next": encode_cursor(nxt),
        }

    @router.get("/v1/tenants/{tenant}/events/{event}")
    async def get_event(request: Request, tenant: str, event: str) -> Response:
        ctx.auth.check(request, tenant)
        ev, deliveries = await node.ingest.get_event(tenant, event)
        extra = {"deliveries": [delivery_json(node, d) for d in deliveries]}
        return Response(event_body(ev, extra), media_type="application/json")

    return router
