"""Routes of events: publish (also served by the fast lane) and read-back."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ...errors import Unprocessable
from ..openapi_docs import body
from .common import ApiContext, accepted_json, delivery_json, event_json, read_object

__all__ = ["build"]


def build(ctx: ApiContext) -> APIRouter:
    """Publish and read events; registers the publish handler for the fast lane."""
    router, node = APIRouter(), ctx.node

    async def publish_handler(request: Request, tenant: str) -> JSONResponse:
        ctx.auth.check(request, tenant, publish=True)
        node.catalog.require_tenant(tenant)
        body = await read_object(request, ctx.max_body)
        unknown = sorted(set(body) - {"event_type", "payload"})
        if unknown:
            raise Unprocessable("unknown field", field=unknown[0])
        for name in ("event_type", "payload"):
            if name not in body:
                raise Unprocessable("is required", field=name)
        try:
            payload = json.dumps(
                body["payload"], separators=(",", ":"), ensure_ascii=False, allow_nan=False
            )
        except ValueError:  # e.g. 1e400 parses to inf, which JSON cannot carry
            raise Unprocessable("numbers must be finite doubles", field="payload") from None
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
    async def get_event(request: Request, tenant: str, event: str) -> JSONResponse:
        ctx.auth.check(request, tenant)
        ev, deliveries = await node.ingest.get_event(tenant, event)
        # JSONResponse directly: payloads may nest deeper than pydantic serializes
        return JSONResponse(
            {**event_json(ev), "deliveries": [delivery_json(d) for d in deliveries]}
        )

    return router
