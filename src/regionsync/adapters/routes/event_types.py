"""Routes of a tenant's event-type catalog: ``/v1/tenants/{tenant}/event-types``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from .bodies import EventTypeIn, EventTypePatch
from .common import ApiContext, event_type_json, read_no_body, read_object

__all__ = ["build"]


def build(ctx: ApiContext) -> APIRouter:
    """Create, list, read, update and delete the types of a tenant's catalog (tenant
    tokens as on endpoints: manage writes, read reads, another tenant's gets 404)."""
    router, node = APIRouter(), ctx.node
    base = "/v1/tenants/{tenant}/event-types"

    @router.post(base, status_code=201, openapi_extra=EventTypeIn.openapi())
    async def create_event_type(request: Request, tenant: str) -> dict[str, Any]:
        """Add a type: ``name``, ``description``, ``schema`` (JSON Schema Draft 2020-12,
        422 ``invalid_schema`` if it is not one or loops without stepping into the
        payload), ``deprecated``; 409 if it exists."""
        ctx.auth.check(request, tenant)
        data = await read_object(request, ctx.max_body)
        EventTypeIn.check(data)
        return event_type_json(await node.event_types.create(tenant, data))

    @router.get(base)
    async def list_event_types(request: Request, tenant: str) -> dict[str, Any]:
        """The catalog in name order, ``{items, next: null}``."""
        ctx.auth.check(request, tenant)
        return {"items": [event_type_json(v) for v in node.event_types.list(tenant)], "next": None}

    @router.get(base + "/{name}")
    async def get_event_type(request: Request, tenant: str, name: str) -> dict[str, Any]:
        ctx.auth.check(request, tenant)
        return event_type_json(node.event_types.get(tenant, name))

    @router.patch(base + "/{name}", openapi_extra=EventTypePatch.openapi())
    async def patch_event_type(request: Request, tenant: str, name: str) -> dict[str, Any]:
        """Change ``description``, ``schema`` (null: no schema) or ``deprecated``."""
        ctx.auth.check(request, tenant)
        data = await read_object(request, ctx.max_body)
        EventTypePatch.check(data)
        return event_type_json(await node.event_types.update(tenant, name, data))

    @router.delete(base + "/{name}", status_code=204)
    async def delete_event_type(request: Request, tenant: str, name: str) -> Response:
        """Delete an event type. No body (or ``{}``)."""
        ctx.auth.check(request, tenant)
        await read_no_body(request, ctx.max_body)
        await node.event_types.delete(tenant, name)
        return Response(status_code=204)

    return router
