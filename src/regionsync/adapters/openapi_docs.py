"""Request body schemas for the OpenAPI document (documentation only).

The handlers parse bodies themselves (size limit first, then JSON, then field checks that
name the field), so these pydantic models never validate a request: they only describe
the bodies of shared/API.md in ``/openapi.json``, with the problem body of every error.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field
from starlette.staticfiles import StaticFiles

__all__ = ["PROBLEM_RESPONSES", "body", "install_docs"]


class TenantIn(BaseModel):
    id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    name: str = Field(min_length=1, max_length=256)
    ack_policy: Literal["local", "one-remote"] = "local"
    publish_rate_per_s: float | None = Field(
        None, ge=0.01, le=1_000_000, description="events/s per region; null: node default"
    )
    delivery_max_in_flight: int | None = Field(
        None, ge=1, le=10_000, description="attempts in flight per region; null: node default"
    )


class EndpointIn(BaseModel):
    id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    url: str = Field(description="http(s) URL resolving to a public address")
    event_types: list[str] = Field([], description="exact types, 'prefix.*' or '*'")
    filter: dict[str, Any] | None = Field(None, description="payload filter ($eq, $in, ...)")
    secret: str | None = Field(None, description="whsec_ + base64 of 24..64 bytes")
    description: str = ""
    rate_limit_per_s: float = 50
    max_in_flight: int = 16
    headers: dict[str, str] = {}
    paused: bool = False
    payload_format: Literal["raw", "standard-webhooks"] = Field(
        "raw", description="raw: the payload as sent; standard-webhooks: {type, timestamp, data}"
    )


class EndpointPatch(BaseModel):
    url: str | None = None
    event_types: list[str] | None = Field(None, description="replaces the whole set")
    event_types_add: list[str] = Field([], description="OR-Set add; concurrent-safe")
    event_types_remove: list[str] = Field([], description="OR-Set remove; concurrent-safe")
    filter: dict[str, Any] | None = None
    secret: str | None = Field(None, description="new secret (null: generate one)")
    description: str | None = None
    rate_limit_per_s: float | None = None
    max_in_flight: int | None = None
    headers: dict[str, str] | None = None
    paused: bool | None = None
    disabled: bool | None = Field(None, description="false re-enables a disabled endpoint")
    payload_format: Literal["raw", "standard-webhooks"] | None = None


class EventIn(BaseModel):
    event_type: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,128}$")
    payload: Any


class SourceIn(BaseModel):
    """An inbound source; its id is generated (an ``id`` member is 422)."""

    tenant: str
    kind: Literal["github", "stripe", "standard-webhooks", "hmac"]
    secret: str
    priority: Literal["critical", "high", "normal", "low"] | None = None
    ack_policy: Literal["local", "one-remote"] = "local"
    header: str = "x-signature"
    algorithm: Literal["sha1", "sha256", "sha512"] = "sha256"
    encoding: Literal["hex", "base64"] = "hex"
    prefix: str = ""
    event_type_from: str = Field("payload:type", description="header:<name> or payload:<path>")
    id_from: str = Field("", description="header:<name> or payload:<path>; empty: body hash")
    default_event_type: str = Field(
        "webhook",
        pattern=r"^[A-Za-z0-9_.\-]{1,128}$",
        description="standard-webhooks, hmac: the event type of a verified request whose "
        "event_type_from finds no usable type (never refused for it)",
    )


class TokenIn(BaseModel):
    scope: str = Field(
        pattern=r"^(admin|tenant:[A-Za-z0-9_.\-]{1,64}:(manage|publish|read))$",
        description="admin, or tenant:<id>:manage|publish|read (read: GET only)",
    )
    name: str = Field(min_length=1, max_length=128)
    expires_at: str | None = Field(None, description="RFC 3339 time; null: never")


class SinceIn(BaseModel):
    since: str = Field(description="RFC 3339 time")


class SampleIn(BaseModel):
    payload: Any


class Problem(BaseModel):
    error: str
    detail: str
    field: str | None = None


MODELS = {
    "tenant": TenantIn,
    "endpoint": EndpointIn,
    "endpoint_patch": EndpointPatch,
    "event": EventIn,
    "source": SourceIn,
    "since": SinceIn,
    "token": TokenIn,
    "sample": SampleIn,
}

_PROBLEM = {"content": {"application/json": {"schema": Problem.model_json_schema()}}}
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": text, **_PROBLEM}
    for code, text in (
        (400, "malformed JSON"),
        (401, "missing or bad credentials or signature"),
        (403, "the token's scope does not allow this route"),
        (404, "not found"),
        (409, "conflict"),
        (413, "body too large"),
        (415, "not JSON"),
        (422, "a field is invalid (named in `field`)"),
        (429, "shedding load (Retry-After)"),
        (503, "overloaded or not replicated in time (Retry-After)"),
    )
}


def body(name: str) -> dict[str, Any]:
    """``openapi_extra`` documenting the JSON request body ``name`` (see MODELS)."""
    schema = MODELS[name].model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    }


# routes that take no bearer token (probes, metrics, senders' signed webhooks)
_UNAUTHENTICATED = ("/healthz", "/readyz", "/metrics", "/in/{source}")


def install_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI from the assets vendored by ``swagger-ui-bundle`` (served
    under ``/docs/assets``, no CDN), over ``/openapi.json``, whose document declares the
    ``bearerAuth`` scheme (every operation but the unauthenticated ones requires it)."""
    from swagger_ui_bundle import swagger_ui_path

    app.mount("/docs/assets", StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon-32x32.png",
        )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            doc.setdefault("components", {})["securitySchemes"] = {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "an API token from [[tokens]]: admin, "
                    "tenant:<id>:manage or tenant:<id>:publish",
                }
            }
            doc["security"] = [{"bearerAuth": []}]
            for path in _UNAUTHENTICATED:
                for op in doc["paths"].get(path, {}).values():
                    op["security"] = []
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
