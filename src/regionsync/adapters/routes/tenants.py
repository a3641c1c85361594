"""Routes of tenants: ``/v1/tenants`` and ``/v1/tenants/{tenant}``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from ...errors import Forbidden
from .bodies import TenantIn, TenantPatch
from .common import (
    ApiContext,
    decode_cursor,
    encode_cursor,
    page_params,
    read_no_body,
    read_object,
    tenant_json,
)

__all__ = ["build"]


def build(ctx: ApiContext) -> APIRouter:
    """Create, read and delete tenants (admin token for create and delete)."""
    router, node = APIRouter(), ctx.node

    @router.post("/v1/tenants", status_code=201, openapi_extra=TenantIn.openapi())
    async def create_tenant(request: Request) -> dict[str, Any]:
        ctx.auth.check(request)
        t = TenantIn.check(await read_object(request, ctx.max_body))
        return tenant_json(
            await node.registry_ops.create_tenant(
                t.id,
                t.name,
                t.ack_policy,
                t.publish_rate_per_s,
                t.strict_event_types,
                t.delivery_max_in_flight,
            )  # fmt: skip
        )

    @router.get("/v1/tenants")
    async def list_tenants(
        request: Request, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """Live tenants, newest first (admin). ``{items, next}``; pass ``next`` as
        ``cursor`` for the following page (null: the last page)."""
        ctx.auth.check(request)
        page_params(limit, None)
        rows, nxt = node.listing.tenants(decode_cursor(cursor), limit)
        items = [tenant_json(t, ctx.usage_rates.rate(t.id)) for t in rows]
        return {"items": items, "next": encode_cursor(nxt)}

    @router.get("/v1/tenants/{tenant}")
    async def get_tenant(request: Request, tenant: str) -> dict[str, Any]:
        ctx.auth.check(request, tenant)
        return tenant_json(node.catalog.tenant(tenant), ctx.usage_rates.rate(tenant))

    @router.patch("/v1/tenants/{tenant}", openapi_extra=TenantPatch.openapi())
    async def patch_tenant(request: Request, tenant: str) -> dict[str, Any]:
        """Change ``name`` or ``strict_event_types`` (a manage token may), or
        ``ack_policy`` / ``publish_rate_per_s`` (admin only: 403 naming the field)."""
        caller = ctx.auth.check(request, tenant)
        body = await read_object(request, ctx.max_body)
        TenantPatch.check(body, admin=caller.scope == "admin")
        return tenant_json(await node.registry_ops.patch_tenant(tenant, body))

    @router.delete("/v1/tenants/{tenant}", status_code=204)
    async def delete_tenant(request: Request, tenant: str) -> Response:
        # another tenant's token gets 404 like on every tenant route; its own gets 403
        if ctx.auth.check(request, tenant).scope != "admin":
            raise Forbidden("deleting a tenant takes an admin token", field="authorization")
        await read_no_body(request, ctx.max_body)
        await node.registry_ops.delete_tenant(tenant)
        return Response(status_code=204)

    return router
