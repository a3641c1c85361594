"""Routes of tenants: ``/v1/tenants`` and ``/v1/tenants/{tenant}``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from ...errors import Forbidden, Unprocessable
from ..openapi_docs import body
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

    @router.post("/v1/tenants", status_code=201, openapi_extra=body("tenant"))
    async def create_tenant(request: Request) -> dict[str, Any]:
        ctx.auth.check(request)
        body = await read_object(request, ctx.max_body)
        known = {"id", "name", "ack_policy", "publish_rate_per_s", "strict_event_types",
                 "delivery_max_in_flight"}  # fmt: skip
        unknown = sorted(set(body) - known)
        if unknown:
            raise Unprocessable("unknown field", field=unknown[0])
        if "name" not in body:
            raise Unprocessable("is required", field="name")
        return tenant_json(
            await node.registry_ops.create_tenant(
                body.get("id"),
                body["name"],
                body.get("ack_policy", "local"),
                body.get("publish_rate_per_s"),
                body.get("strict_event_types", False),
                body.get("delivery_max_in_flight"),
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

    @router.patch("/v1/tenants/{tenant}", openapi_extra=body("tenant_patch"))
    async def patch_tenant(request: Request, tenant: str) -> dict[str, Any]:
        """Change ``name`` or ``strict_event_types`` (a manage token may), or
        ``ack_policy`` / ``publish_rate_per_s`` (admin only: 403 naming the field)."""
        caller = ctx.auth.check(request, tenant)
        body = await read_object(request, ctx.max_body)
        unknown = sorted(
            set(body) - {"name", "ack_policy", "publish_rate_per_s", "strict_event_types"}
        )
        if unknown:
            raise Unprocessable("unknown field", field=unknown[0])
        if caller.scope != "admin":
            for name in ("ack_policy", "publish_rate_per_s"):
                if name in body:
                    raise Forbidden(f"setting {name} takes an admin token", field=name)
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
