"""Routes of inbound sources: ``/v1/sources`` and the senders' ``/in/{source}``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from .bodies import SourceIn
from .common import (
    ApiContext,
    accepted_response,
    decode_cursor,
    encode_cursor,
    page_params,
    read_body,
    read_no_body,
    read_object,
    source_json,
)

__all__ = ["build"]


def build(ctx: ApiContext) -> APIRouter:
    """Register, read and delete sources; accept senders' webhooks (also on the fast lane)."""
    router, node = APIRouter(), ctx.node

    @router.post("/v1/sources", status_code=201, openapi_extra=SourceIn.openapi())
    async def create_source(request: Request) -> dict[str, Any]:
        ctx.auth.check(request)
        body = await read_object(request, ctx.max_body)
        SourceIn.check(body)
        return source_json(await node.registry_ops.create_source(body))

    @router.get("/v1/sources")
    async def list_sources(
        request: Request, tenant: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """Live sources (of ``tenant`` if given), newest first, without secrets (admin)."""
        ctx.auth.check(request)
        page_params(limit, None)
        rows, nxt = node.listing.sources(tenant, decode_cursor(cursor), limit)
        return {"items": [source_json(s) for s in rows], "next": encode_cursor(nxt)}

    @router.get("/v1/sources/{source}")
    async def get_source(request: Request, source: str) -> dict[str, Any]:
        ctx.auth.check(request)
        return source_json(node.catalog.source(source))

    @router.delete("/v1/sources/{source}", status_code=204)
    async def delete_source(request: Request, source: str) -> Response:
        ctx.auth.check(request)
        await read_no_body(request, ctx.max_body)
        await node.registry_ops.delete_source(source)
        return Response(status_code=204)

    async def inbound_handler(request: Request, source: str) -> Response:
        node.ingest.require_following()  # else the source lookup may be stale too
        node.catalog.source(source)  # 404 before reading a byte of an unknown source's body
        raw = await read_body(request, ctx.max_body, also=("application/x-www-form-urlencoded",))
        headers = {k.lower(): v for k, v in request.headers.items()}
        event, created = await node.ingest.ingest(source, headers, raw)
        return accepted_response(node, event, duplicate=not created)

    ctx.fast_routes[r"/in/([^/]+)"] = inbound_handler

    @router.post("/in/{source}", status_code=202)
    async def inbound(request: Request, source: str) -> Response:
        return await inbound_handler(request, source)

    return router
