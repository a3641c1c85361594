"""What ``/openapi.json`` shows beyond the routes: the problem body of every error, the
query parameters' rules, the success bodies' schemas, bearer auth, and the ``/docs`` page.

The request bodies document themselves (routes/bodies.py: the models that judge them).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field

from ..core.model import DeliveryStatus
from ..errors import NotFound

__all__ = [
    "DOCS_DIR",
    "IDEMPOTENCY_KEY",
    "PROBLEM_RESPONSES",
    "TIME_DOC",
    "install_docs",
    "swagger_ui_dir",
]

DOCS_DIR = Path(__file__).resolve().parent / "apidocs"  # the /docs page and its initializer
# what the page loads of the Swagger UI 5 files vendored by fastapi-offline (its
# ``static`` folder; OpenAPI 3.1 needs Swagger UI 5, issue 43): name -> (file, media)
_SWAGGER = {
    "swagger-ui-bundle.js": ("swagger-ui-bundle.js", "text/javascript; charset=utf-8"),
    "swagger-ui.css": ("swagger-ui.css", "text/css; charset=utf-8"),
    "favicon.png": ("favicon.png", "image/png"),
}


def swagger_ui_dir() -> Path:
    """The folder of the vendored Swagger UI files (the package is located, not imported:
    it imports FastAPI's app class to build pages we do not use). RuntimeError if it is
    not installed."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or spec.origin is None:
        raise RuntimeError("fastapi-offline is not installed (pyproject.toml dependencies)")
    return Path(spec.origin).parent / "static"


TIME_DOC = "RFC 3339 time (e.g. 2026-01-01T00:00:00Z)"  # how parameters and bodies read


class Problem(BaseModel):
    error: str
    detail: str
    field: str | None = None
    path: str | None = Field(
        None, description="schema_violation: JSON Pointer (RFC 6901) into the payload"
    )
    schema_path: str | None = Field(
        None, description="schema_violation: JSON Pointer of the failing schema keyword"
    )


_PROBLEM = {"content": {"application/json": {"schema": Problem.model_json_schema()}}}
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": text, **_PROBLEM}
    for code, text in (
        (
            400,
            "malformed JSON, a body that is not UTF-8 or does not decode (gzip, "
            "deflate), or a request the HTTP parser refuses (framing, headers)",
        ),
        (401, "missing or bad credentials or signature"),
        (403, "the token's scope does not allow this route"),
        (404, "not found"),
        (409, "conflict"),
        (413, "body too large"),
        (415, "not JSON, or a content coding other than gzip or deflate (Accept-Encoding)"),
        (422, "a field is invalid (named in `field`; a schema violation adds `path`)"),
        (429, "shedding load, or the tenant over its rate or backlog share (Retry-After)"),
        (501, "a request method or transfer coding the server does not implement"),
        (
            503,
            "overloaded, not replicated in time, or this process cannot read its region "
            "(Retry-After)",
        ),
    )
}


# the publish route's optional header (runtime.ingest.Ingest.publish)
IDEMPOTENCY_KEY: dict[str, Any] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 256},
    "description": (
        "A repeat with the same key and body within `ingest.idempotency_ttl_s` (24 h) is "
        "answered with the original event (`duplicate: true`) in every region the first "
        "acceptance reached; the same key with another body is 409 "
        "`idempotency_conflict`."
    ),
}

# query parameters as the routes validate them (common.page_params, parse_time,
# decode_cursor, delivery_status; the attempt log's own status): 422 naming them otherwise
_QUERY: dict[str, dict[str, Any]] = {
    "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50},
    "since": {"type": "string", "format": "date-time", "description": TIME_DOC},
    "until": {"type": "string", "format": "date-time", "description": TIME_DOC},
    "cursor": {
        "type": "string",
        "pattern": r"^[A-Za-z0-9_\-]{1,1400}$",
        "description": "the `next` of the previous page, as returned",
    },
    "status": {"type": "string", "enum": [s.value for s in DeliveryStatus]},
    "order": {
        "type": "string",
        "enum": ["asc", "desc"],
        "default": "desc",
        "description": "`desc`: newest first; `asc`: oldest first; a page's `next` "
        "continues in the order asked",
    },
    "event_type": {
        "type": "string",
        "minLength": 1,
        "maxLength": 256,
        "description": "an exact event type or `prefix.*`",
    },
}


def _constrain_query(doc: dict[str, Any]) -> None:
    """Write the query parameters' validation rules into ``doc`` (in place)."""
    for path, ops in doc.get("paths", {}).items():
        for op in ops.values():
            for param in op.get("parameters", []):
                rule = _QUERY.get(param["name"]) if param["in"] == "query" else None
                if rule is None:
                    continue
                if param["name"] == "status" and path.endswith("/attempts"):
                    rule = {"type": "string", "enum": ["succeeded", "failed"]}
                param["schema"] = {**rule, "title": param["schema"].get("title", "")}


# routes that take no bearer token (probes, metrics, senders' signed webhooks)
_UNAUTHENTICATED = ("/healthz", "/readyz", "/metrics", "/in/{source}")


def install_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI 5 (the page and its initializer in ``apidocs/``, the bundle
    from the assets vendored by ``fastapi-offline``, no CDN) under ``/docs/assets``, over
    ``/openapi.json`` (OpenAPI 3.1), whose document declares the ``bearerAuth`` scheme
    (every operation but the unauthenticated ones requires it). Only the files the page
    loads are served."""
    static = swagger_ui_dir()
    assets = {name: (static / file, media) for name, (file, media) in _SWAGGER.items()}
    assets["init.js"] = (DOCS_DIR / "init.js", _SWAGGER["swagger-ui-bundle.js"][1])

    @app.get("/docs", include_in_schema=False)
    async def docs() -> FileResponse:
        return FileResponse(DOCS_DIR / "index.html", media_type="text/html; charset=utf-8")

    @app.get("/docs/assets/{name}", include_in_schema=False)
    async def docs_asset(name: str) -> FileResponse:
        if name not in assets:
            raise NotFound(f"no docs asset {name!r}", field="name")
        path, media = assets[name]
        return FileResponse(path, media_type=media)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            doc.setdefault("components", {})["securitySchemes"] = {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "an API token from [[tokens]] or POST /v1/tokens: admin, "
                    "tenant:<id>:manage, tenant:<id>:publish or tenant:<id>:read; or a "
                    "consumer portal session (rsp_..., POST "
                    "/v1/tenants/{tenant}/portal-sessions): its tenant's portal routes only",
                }
            }
            doc["security"] = [{"bearerAuth": []}]
            _constrain_query(doc)
            _type_responses(doc)
            for path in _UNAUTHENTICATED:
                for op in doc["paths"].get(path, {}).values():
                    op["security"] = []
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


# -- success responses ------------------------------------------------------------------
# JSON Schemas of the success bodies (OpenAPI 3.1: JSON Schema 2020-12 types), attached to
# every operation by ``_type_responses``; members beyond those named may be added later,
# so objects stay open. The route modules' ``*_json`` functions build these bodies.

_STR, _INT, _NUM, _BOOL = (
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
)
_TIME = {"type": "string", "format": "date-time"}


def _null(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _obj(**props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": sorted(props)}


def _with_optional(schema: dict[str, Any], **props: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (an ``_obj``) with ``props`` as members that are not always present."""
    return {**schema, "properties": {**schema["properties"], **props}}


def _page(item: str) -> dict[str, Any]:
    return _obj(items={"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}},
                next=_null(_STR))  # fmt: skip


_DELIVERY_STATUSES = [s.value for s in DeliveryStatus]

# what a node refused of one origin (``/v1/cluster`` ``refused``; runtime/replica.py)
_REFUSED = _obj(count=_INT, skipped=_INT, last_seq=_INT, last_reason=_STR, first_at=_TIME,
                last_at=_TIME)  # fmt: skip
RESPONSE_SCHEMAS: dict[str, dict[str, Any]] = {
    "Tenant": _obj(
        id=_STR,
        name=_STR,
        ack_policy={"enum": ["local", "one-remote"]},
        publish_rate_per_s=_null(_NUM),
        strict_event_types=_BOOL,
        delivery_max_in_flight=_null(_INT),
        created_at=_null(_TIME),
        usage={"type": "object", "additionalProperties": _INT},
        publish_rate_cluster_per_s=_null(_NUM),
    ),  # fmt: skip
    "Endpoint": _obj(
        id=_STR,
        tenant=_STR,
        url=_STR,
        event_types={"type": "array", "items": _STR},
        filter={},
        description=_null(_STR),
        rate_limit_per_s=_NUM,
        max_in_flight=_INT,
        headers=_null({"type": "object", "additionalProperties": _STR}),
        paused=_BOOL,
        payload_format=_STR,
        state=_STR,
        failing_since=_null(_TIME),
        secret=_STR,
        created_at=_null(_TIME),
        updated_at=_null(_TIME),
    ),  # fmt: skip
    "EventType": _obj(
        name=_STR,
        description=_STR,
        schema={},
        deprecated=_BOOL,
        deprecated_at=_null(_TIME),
        created_at=_null(_TIME),
        updated_at=_null(_TIME),
    ),  # fmt: skip
    "Source": _with_optional(
        _obj(
            id=_STR,
            tenant=_STR,
            kind=_STR,
            url_path=_STR,
            created_at=_null(_TIME),
            priority=_null(_STR),
            ack_policy=_null(_STR),
        ),
        # only the settings its kind reads (core.sources.KIND_FIELDS)
        header=_null(_STR),
        algorithm=_null(_STR),
        encoding=_null(_STR),
        prefix=_null(_STR),
        event_type_from=_null(_STR),
        id_from=_null(_STR),
        default_event_type=_null(_STR),
    ),  # fmt: skip
    "Token": _obj(
        id=_STR,
        name=_null(_STR),
        scope=_STR,
        expires_at=_null(_TIME),
        created_at=_null(_TIME),
        created_by=_null(_STR),
    ),  # fmt: skip
    "Accepted": _with_optional(
        _obj(id=_STR, event_type=_STR, region=_STR, received_at=_null(_TIME)),
        warnings={"type": "array", "items": _STR},  # the event type is deprecated
        # true: a redelivery (POST /in/{source}) or a repeated Idempotency-Key (publish)
        # of an event already accepted; the answer names that event
        duplicate=_BOOL,
    ),
    "Delivery": _obj(
        id=_STR,
        event=_STR,
        endpoint=_STR,
        status={"enum": _DELIVERY_STATUSES},
        attempts=_INT,
        next_attempt_at={
            **_null(_TIME),
            "description": "pending: when the custodian attempts it next (asked in another "
            "region: the replicated schedule while it is ahead, else null)",
        },
        region=_STR,
        custodian=_null(_STR),
        generation=_INT,
        created_at=_null(_TIME),
        updated_at=_null(_TIME),
    ),  # fmt: skip
    "EventSummary": _obj(
        id=_STR,
        tenant=_STR,
        event_type=_STR,
        region=_STR,
        received_at=_null(_TIME),
        deliveries={"type": "object", "additionalProperties": _INT},
    ),  # fmt: skip
    "Event": {
        **_obj(
            id=_STR,
            tenant=_STR,
            event_type=_STR,
            region=_STR,
            received_at=_null(_TIME),
            payload={},
            deliveries={"type": "array", "items": {"$ref": "#/components/schemas/Delivery"}},
        ),  # fmt: skip
        "description": "payload: the published JSON exactly as written",
    },
    "Job": _obj(
        id=_STR,
        kind=_STR,
        endpoint=_STR,
        since=_null(_TIME),
        status=_STR,
        done=_INT,
        error=_null(_STR),
        started_at=_null(_TIME),
        finished_at=_null(_TIME),
    ),  # fmt: skip
    "Attempt": _obj(
        n=_INT,
        generation=_INT,
        delivery=_STR,
        at=_null(_TIME),
        region=_STR,
        status_code=_null(_INT),
        latency_ms=_NUM,
        error=_null(_STR),
        request_headers=_STR,
        response_headers=_null(_STR),
        response_excerpt=_null(_STR),
    ),  # fmt: skip
    "AuditEntry": _obj(
        id=_STR,
        at=_null(_TIME),
        hlc=_STR,
        region=_STR,
        who=_STR,
        op=_STR,
        object=_STR,
        tenant=_null(_STR),
        detail=_STR,
    ),  # fmt: skip
    "Cluster": _obj(
        region=_STR,
        actor=_STR,
        incarnation=_INT,
        version_vector={"type": "object", "additionalProperties": _INT},
        log_floor={"type": "object", "additionalProperties": _INT},
        # sha256 over every non-empty state in key order; over a large registry cached
        # and worked out off the event loop at most every 5 s (its age: 0 when current)
        registry_hash=_STR,
        registry_hash_age_s=_NUM,
        # order-free digest kept by every change (issue 42): exact, compare this one
        registry_digest=_STR,
        # origin -> what this node refused of it (issue 41; peers[].refused: the peer's)
        refused={"type": "object", "additionalProperties": _REFUSED},
        # core.capabilities: this node's release and features, the cluster's effective
        # set and the peers holding it back; each peer's version and features in peers
        capabilities=_obj(
            release=_STR,
            features={"type": "array", "items": _STR},
            region_features={"type": "array", "items": _STR},
            effective={"type": "array", "items": _STR},
            held_back_by={"type": "array", "items": _STR},
        ),
        counts={"type": "object", "additionalProperties": _INT},
        peers={"type": "array", "items": {"type": "object"}},
        custody={},
        # this clock against the cluster's reference (runtime/cluster.py clock_view)
        clock=_obj(
            status=_STR,
            error_ms=_INT,
            correction_ms=_INT,
            reference=_STR,
            offsets_ms={"type": "object", "additionalProperties": _INT},
            suspect_ms=_INT,
            max_drift_ms=_INT,
            stamps_ahead_ms={"type": "object", "additionalProperties": _INT},
            hlc_rebases=_INT,
        ),
        # regions removed for good, the actors retired from clocks (runtime/removal.py)
        removals=_obj(
            removed={"type": "object", "additionalProperties": {"type": "object"}},
            retired_actors={"type": "array", "items": _STR},
            refused_hellos=_INT,
            # retired actors this process pruned from the stored state (runtime/pruning.py)
            pruned_actors=_INT,
        ),
        # this process among its region's (runtime/cluster.py ClusterView.process):
        # holder and processes are null for a region's only process (a store not shared)
        process=_obj(
            actor=_STR,
            holder=_null(_STR),
            replication_role=_BOOL,
            processes=_null({"type": "array", "items": _obj(holder=_STR, replication_role=_BOOL)}),
        ),
    ),  # fmt: skip
    "RegionRow": {
        "type": "object",
        "properties": {
            "region": _STR,
            "reached": _BOOL,
            "error": _null(_STR),
            # an unreached peer's agreement is this node's last state-digest verdict
            "digest_at": _null(_TIME),
            "digest_age_s": _null(_NUM),
        },
        "required": ["region", "reached"],
    },  # fmt: skip
    "WhoAmI": _obj(scope=_STR, name=_null(_STR), tenant=_null(_STR), right=_STR),
    "PortalSession": _obj(
        id=_STR,
        tenant=_STR,
        token=_STR,
        url=_STR,
        path=_STR,
        frame=_STR,
        allowed_origins={"type": "array", "items": _STR},
        expires_at=_TIME,
    ),  # fmt: skip
    "FilterTest": _obj(matches=_BOOL, failed_clause={}),
    "TestEvent": _obj(
        id=_STR,
        event_type=_STR,
        at=_TIME,
        ok=_BOOL,
        status_code=_null(_INT),
        error=_null(_STR),
        latency_ms=_NUM,
        request_headers=_STR,
        response_excerpt=_STR,
    ),  # fmt: skip
    "Status": _obj(status=_STR),
    "RegionRemoval": _obj(region=_STR, incarnation=_INT, removed_at=_STR, by=_STR),
}
RESPONSE_SCHEMAS["TokenCreated"] = {
    "allOf": [{"$ref": "#/components/schemas/Token"}, _obj(token=_STR)]
}
for _name in ("Tenant", "Endpoint", "EventType", "Source", "Token", "Delivery", "Job",
              "Attempt", "AuditEntry", "EventSummary", "RegionRow"):  # fmt: skip
    RESPONSE_SCHEMAS[_name + "Page"] = _page(_name)

# (method, path) -> schema name of its 2xx JSON body
_RESPONSES: dict[tuple[str, str], str] = {
    ("post", "/v1/tenants"): "Tenant",
    ("get", "/v1/tenants"): "TenantPage",
    ("get", "/v1/tenants/{tenant}"): "Tenant",
    ("patch", "/v1/tenants/{tenant}"): "Tenant",
    ("post", "/v1/tenants/{tenant}/endpoints"): "Endpoint",
    ("get", "/v1/tenants/{tenant}/endpoints"): "EndpointPage",
    ("get", "/v1/tenants/{tenant}/endpoints/{endpoint}"): "Endpoint",
    ("patch", "/v1/tenants/{tenant}/endpoints/{endpoint}"): "Endpoint",
    ("post", "/v1/tenants/{tenant}/endpoints/{endpoint}/test-filter"): "FilterTest",
    ("post", "/v1/tenants/{tenant}/endpoints/{endpoint}/rotate-secret"): "Endpoint",
    ("post", "/v1/tenants/{tenant}/endpoints/{endpoint}/test"): "TestEvent",
    ("get", "/v1/tenants/{tenant}/endpoints/{endpoint}/attempts"): "AttemptPage",
    ("post", "/v1/tenants/{tenant}/event-types"): "EventType",
    ("get", "/v1/tenants/{tenant}/event-types"): "EventTypePage",
    ("get", "/v1/tenants/{tenant}/event-types/{name}"): "EventType",
    ("patch", "/v1/tenants/{tenant}/event-types/{name}"): "EventType",
    ("get", "/v1/tenants/{tenant}/endpoints/{endpoint}/deliveries"): "DeliveryPage",
    ("get", "/v1/tenants/{tenant}/deliveries"): "DeliveryPage",
    ("get", "/v1/tenants/{tenant}/jobs"): "JobPage",
    ("post", "/v1/tenants/{tenant}/endpoints/{endpoint}/recover"): "Job",
    ("post", "/v1/tenants/{tenant}/endpoints/{endpoint}/replay-missing"): "Job",
    ("get", "/v1/tenants/{tenant}/jobs/{job}"): "Job",
    ("post", "/v1/tenants/{tenant}/deliveries/{delivery}/retry"): "Delivery",
    ("get", "/v1/tenants/{tenant}/deliveries/{delivery}"): "Delivery",
    ("get", "/v1/tenants/{tenant}/deliveries/{delivery}/attempts"): "AttemptPage",
    ("post", "/v1/tenants/{tenant}/events"): "Accepted",
    ("get", "/v1/tenants/{tenant}/events"): "EventSummaryPage",
    ("get", "/v1/tenants/{tenant}/events/{event}"): "Event",
    ("post", "/v1/sources"): "Source",
    ("get", "/v1/sources"): "SourcePage",
    ("get", "/v1/sources/{source}"): "Source",
    ("post", "/in/{source}"): "Accepted",
    ("get", "/v1/cluster"): "Cluster",
    ("get", "/v1/cluster/regions"): "RegionRowPage",
    ("post", "/v1/cluster/regions/{name}/removal"): "RegionRemoval",
    ("get", "/healthz"): "Status",
    ("get", "/readyz"): "Status",
    ("post", "/v1/tokens"): "TokenCreated",
    ("get", "/v1/tokens"): "TokenPage",
    ("get", "/v1/whoami"): "WhoAmI",
    ("post", "/v1/tenants/{tenant}/portal-sessions"): "PortalSession",
    ("get", "/v1/audit"): "AuditEntryPage",
}


def _type_responses(doc: dict[str, Any]) -> None:
    """Attach the JSON Schema of each operation's 2xx JSON body (``RESPONSE_SCHEMAS``) to
    ``doc`` in place; raises KeyError for a JSON operation without one (so a new route
    cannot go untyped)."""
    doc.setdefault("components", {}).setdefault("schemas", {}).update(RESPONSE_SCHEMAS)
    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            for code, resp in op.get("responses", {}).items():
                content = resp.get("content", {})
                if str(code).startswith("2") and "application/json" in content:
                    name = _RESPONSES[(method, path)]
                    content["application/json"]["schema"] = {"$ref": f"#/components/schemas/{name}"}
