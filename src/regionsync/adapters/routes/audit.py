"""Route of the audit log: ``GET /v1/audit`` (registry changes, replicated)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ...core.model import AuditEntry
from ...errors import Unprocessable
from .common import ApiContext, decode_cursor, encode_cursor, page_params, rfc3339

__all__ = ["audit_json", "build"]


def audit_json(a: AuditEntry) -> dict[str, Any]:
    """One entry: ``id`` (origin actor/seq of the record), ``at`` (HLC wall time), ``hlc``
    (``<wall ms>.<logical>``), ``region``, ``who``, ``op``, ``object``, ``tenant``
    (null: none), ``detail`` (changed field names)."""
    return {
        "id": a.id,
        "at": rfc3339(a.hlc_wall_ms),
        "hlc": f"{a.hlc_wall_ms}.{a.hlc_logical}",
        "region": a.region,
        "who": a.who,
        "op": a.op,
        "object": a.object,
        "tenant": a.tenant or None,
        "detail": a.detail,
    }


def build(ctx: ApiContext) -> APIRouter:
    """The audit log, newest first; admin sees every entry, a tenant token its tenant's."""
    router, node = APIRouter(), ctx.node

    @router.get("/v1/audit")
    async def list_audit(
        request: Request,
        tenant: str | None = None,
        since: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> dict[str, Any]:
        """Registry changes and operator re-sends in every region (each entry travels
        with its change through replication): who (``token:<id>:<name>`` or
        ``config:tokens[<i>]:<scope>``; older entries ``token:<name>`` or
        ``config:<scope>``), what (op, object, changed fields), where
        (region) and when (HLC time). ``tenant`` filters (a tenant token: only its own,
        another tenant's is 404); ``since`` is an RFC 3339 lower bound."""
        caller = ctx.auth.caller(request)
        if caller.scope != "admin":
            tenant = tenant if tenant is not None else caller.scope.split(":")[1]
            ctx.auth.check(request, tenant=tenant)  # 404 another tenant, 403 publish-only
        since_ms = page_params(limit, since)
        try:
            rows, nxt = await node.listing.audit(tenant, since_ms, decode_cursor(cursor), limit)
        except ValueError:
            raise Unprocessable("not a cursor this API returned", field="cursor") from None
        return {"items": [audit_json(a) for a in rows], "next": encode_cursor(nxt)}

    return router
