"""Routes of events: publish (also served by the fast lane) and read-back."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from ...core.jsontext import decode_utf8, loads_members
from ...errors import Unprocessable
from ..openapi_docs import body
from .common import ApiContext, accepted_json, delivery_json, event_body, read_body

__all__ = ["build"]


def build(ctx: ApiContext) -> APIRouter:
    """Publish and read events; registers the publish handler for the fast lane."""
    router, node = APIRouter(), ctx.node

    async def publish_handler(request: Request, tenant: str) -> JSONResponse:
        ctx.auth.check(request, tenant, publish=True)
        node.catalog.require_tenant(tenant)
        # the payload is delivered as the exact text of the body's "payload" member
        body, texts = loads_members(decode_utf8(await read_body(request, ctx.max_body)))
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
        event, _created = await node.ingest.publish(
            tenant, body["event_type"], payload.encode(), key, body["payload"]
        )
        return JSONResponse(accepted_json(event), status_code=202)

    ctx.fast_routes[r"/v1/tenants/([^/]+)/events"] = publish_handler

    @router.post("/v1/tenants/{tenant}/events", status_code=202, openapi_extra=body("event"))
    async def publish(request: Request, tenant: str) -> JSONResponse:
        return await publish_handler(request, tenant)

    @router.get("/v1/tenants/{tenant}/events/{event}")
    async def get_event(request: Request, tenant: str, event: str) -> Response:
        ctx.auth.check(request, tenant)
        ev, deliveries = await node.ingest.get_event(tenant, event)
        extra = {"deliveries": [delivery_json(d) for d in deliveries]}
        return Response(event_body(ev, extra), media_type="application/json")

    return router
