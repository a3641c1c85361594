"""Routes of API tokens: ``/v1/tokens`` (admin; the secret is in the 201 body only) and
``/v1/whoami`` (any valid token: its scope)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from ...core.tokens import TokenView
from .bodies import TokenIn
from .common import (
    ApiContext,
    decode_cursor,
    encode_cursor,
    page_params,
    read_no_body,
    read_object,
    rfc3339,
)

__all__ = ["build", "token_json"]


def token_json(t: TokenView) -> dict[str, Any]:
    """A token without its secret or hash."""
    return {
        "id": t.id,
        "name": t.name,
        "scope": t.scope,
        "expires_at": rfc3339(t.expires_at_ms),
        "created_at": rfc3339(t.created_at_ms),
        "created_by": t.created_by,
    }


def build(ctx: ApiContext) -> APIRouter:
    """Create (the token is shown once), list and revoke replicated API tokens; whoami."""
    router, node = APIRouter(), ctx.node

    @router.post("/v1/tokens", status_code=201, openapi_extra=TokenIn.openapi())
    async def create_token(request: Request) -> dict[str, Any]:
        """A new token ``rs_...``: returned in ``token`` once, stored only as its sha256."""
        caller = ctx.auth.check(request)
        t = TokenIn.check(await read_object(request, ctx.max_body))
        view, secret = await node.tokens.create(t.scope, t.name, t.expires_ms, caller)
        return {**token_json(view), "token": secret}

    @router.get("/v1/whoami")
    async def whoami(request: Request) -> dict[str, Any]:
        """The caller's token: ``scope``, ``name`` (audit name), ``tenant`` (None for
        admin) and ``right`` (``admin``, ``manage``, ``publish`` or ``read``). Any valid
        token may ask (the console reads it to choose its view); 401 otherwise."""
        caller = ctx.auth.caller(request)
        if caller.scope == "admin":
            return {"scope": "admin", "name": caller.name, "tenant": None, "right": "admin"}
        _, tenant, right = caller.scope.split(":")
        return {"scope": caller.scope, "name": caller.name, "tenant": tenant, "right": right}

    @router.get("/v1/tokens")
    async def list_tokens(
        request: Request, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """Live tokens (never their secrets), newest first; ``{items, next}``."""
        ctx.auth.check(request)
        page_params(limit, None)
        rows, nxt = node.listing.tokens(decode_cursor(cursor), limit)
        return {"items": [token_json(t) for t in rows], "next": encode_cursor(nxt)}

    @router.delete("/v1/tokens/{token}", status_code=204)
    async def revoke_token(request: Request, token: str) -> Response:
        """Revoke in every region (effective in each once replicated there)."""
        ctx.auth.check(request)
        await read_no_body(request, ctx.max_body)
        await node.tokens.revoke(token)
        return Response(status_code=204)

    return router
