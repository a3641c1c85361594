"""Routes of the consumer portal (issue 43): ``POST /v1/tenants/{tenant}/portal-sessions``
(an admin or ``tenant:<id>:manage`` token; a portal session cannot make another), its
``/expire-all`` and
``GET /portal``, the console page in portal mode.

The answer's ``url`` is ``<base>/portal?frame=<grant>#key=<session>``: the session stays
in the fragment (never sent to a server, never in a log); the frame grant in the query is
no credential (core.portal) and lets ``GET /portal`` answer with the session's allowed
origins as CSP ``frame-ancestors`` (``'none'`` without a valid grant), so the application
can embed the portal in an iframe of its own pages and nobody else can.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse

from ...core.portal import frame_ancestors
from .bodies import PortalSessionIn
from .common import ApiContext, read_no_body, read_object, rfc3339
from .console import CONSOLE_DIR

__all__ = ["build", "portal_csp"]

_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors "
)


def portal_csp(ancestors: str) -> str:
    """The portal page's Content-Security-Policy: the console's, framed by ``ancestors``."""
    return _CSP + ancestors


def build(ctx: ApiContext) -> APIRouter:
    """Create portal sessions; serve the portal page."""
    router, node = APIRouter(), ctx.node

    @router.post(
        "/v1/tenants/{tenant}/portal-sessions",
        status_code=201,
        openapi_extra=PortalSessionIn.openapi(),
    )
    async def create_portal_session(request: Request, tenant: str) -> dict[str, Any]:
        """A short-lived consumer portal session for the tenant (Svix's App Portal
        access): ``token`` is a bearer token for the tenant's portal routes only, valid
        in every region until ``expires_at``; ``url`` opens the portal with it (the token
        in the fragment), framable by ``allowed_origins`` only. Not stored: it cannot be
        revoked alone (it ends at its expiry, or when the tenant is deleted)."""
        ctx.auth.check(request, tenant)
        body = PortalSessionIn.check(await read_object(request, ctx.max_body))
        claims, session, frame = await node.portal.create(tenant, body.ttl, body.origins)
        path = f"/portal?frame={quote(frame, safe='.')}#key={session}"
        return {
            "id": claims.sid,
            "tenant": tenant,
            "token": session,
            "url": str(request.base_url).rstrip("/") + path,
            "path": path,
            "frame": frame,
            "allowed_origins": list(claims.origins),
            "expires_at": rfc3339(claims.exp_ms),
        }

    @router.post("/v1/tenants/{tenant}/portal-sessions/expire-all", status_code=204)
    async def expire_portal_sessions(request: Request, tenant: str) -> Response:
        """End every portal session of the tenant made until now (Svix's expire-all),
        in each region once the change has replicated there. No body (or ``{}``)."""
        ctx.auth.check(request, tenant)
        await read_no_body(request, ctx.max_body)
        await node.portal.expire_all(tenant)
        return Response(status_code=204)

    @router.get("/portal", include_in_schema=False)
    async def portal_page(frame: str | None = None) -> FileResponse:
        ancestors = frame_ancestors(node.portal.frame(frame))
        headers = {
            "content-security-policy": portal_csp(ancestors),
            "x-content-type-options": "nosniff",
            "cache-control": "no-store",
            "referrer-policy": "no-referrer",
        }
        if ancestors == "'none'":
            headers["x-frame-options"] = "DENY"
        return FileResponse(CONSOLE_DIR / "index.html", media_type="text/html; charset=utf-8",
                            headers=headers)  # fmt: skip

    return router
