"""``regionsync endpoints list|show|create|update|pause|resume|rotate-secret|test-filter|
delete --tenant T``: every endpoint route of the API (``adapters/routes/endpoints.py``)."""

from __future__ import annotations

from typing import Any

import click

from .client import api_path, client_of, deleted, out
from .fields import ENDPOINT_CREATE, ENDPOINT_UPDATE, body_of, json_arg, options

__all__ = ["TENANT_OPTION", "endpoints"]

TENANT_OPTION = click.option("--tenant", required=True, help="Tenant id.")
_ENDPOINT_ARG = click.argument("endpoint_id")
_COLS = ["id", "url", "state", "event_types"]


def _path(tenant: str, endpoint: str, action: str = "") -> str:
    path = api_path("/v1/tenants/{tenant}/endpoints/{endpoint}", tenant=tenant, endpoint=endpoint)
    return path + action


@click.group()
def endpoints() -> None:
    """List, create, change and delete a tenant's endpoints."""


@endpoints.command("list")
@TENANT_OPTION
@click.pass_context
def endpoints_list(ctx: click.Context, tenant: str) -> None:
    rows = client_of(ctx).pages(api_path("/v1/tenants/{tenant}/endpoints", tenant=tenant))
    out(ctx, rows, _COLS)


@endpoints.command("show")
@TENANT_OPTION
@_ENDPOINT_ARG
@click.pass_context
def endpoints_show(ctx: click.Context, tenant: str, endpoint_id: str) -> None:
    out(ctx, client_of(ctx).call("GET", _path(tenant, endpoint_id)))


@endpoints.command("create")
@TENANT_OPTION
@options(ENDPOINT_CREATE)
@click.pass_context
def endpoints_create(ctx: click.Context, tenant: str, **given: Any) -> None:
    """Create an endpoint; its id is generated and printed."""
    body = body_of(ENDPOINT_CREATE, given)
    path = api_path("/v1/tenants/{tenant}/endpoints", tenant=tenant)
    out(ctx, client_of(ctx).call("POST", path, json_body=body))


@endpoints.command("update")
@TENANT_OPTION
@_ENDPOINT_ARG
@options(ENDPOINT_UPDATE)
@click.pass_context
def endpoints_update(ctx: click.Context, tenant: str, endpoint_id: str, **given: Any) -> None:
    """Change the options given (PATCH); the others stay as they are."""
    body = body_of(ENDPOINT_UPDATE, given)
    if not body:
        raise click.UsageError("nothing to change: give at least one option")
    out(ctx, client_of(ctx).call("PATCH", _path(tenant, endpoint_id), json_body=body))


def _patch_command(name: str, body: dict[str, Any], doc: str) -> None:
    @endpoints.command(name, help=doc)
    @TENANT_OPTION
    @_ENDPOINT_ARG
    @click.pass_context
    def command(ctx: click.Context, tenant: str, endpoint_id: str) -> None:
        out(ctx, client_of(ctx).call("PATCH", _path(tenant, endpoint_id), json_body=body))


_patch_command("pause", {"paused": True}, "Stop sending; new events' deliveries are skipped "
               "(replay sends them later).")  # fmt: skip
_patch_command("resume", {"paused": False}, "Send again.")


@endpoints.command("rotate-secret")
@TENANT_OPTION
@_ENDPOINT_ARG
@click.pass_context
def endpoints_rotate(ctx: click.Context, tenant: str, endpoint_id: str) -> None:
    """A new generated secret; the previous one keeps signing for the overlap period."""
    out(ctx, client_of(ctx).call("POST", _path(tenant, endpoint_id, "/rotate-secret")))


@endpoints.command("test-filter")
@TENANT_OPTION
@_ENDPOINT_ARG
@click.option("--payload", required=True, help="A sample payload, JSON; @file or - for stdin.")
@click.pass_context
def endpoints_test_filter(ctx: click.Context, tenant: str, endpoint_id: str, payload: str) -> None:
    """Would this payload pass the endpoint's filter, and if not, which clause failed?"""
    body = {"payload": json_arg(payload, "--payload")}
    path = _path(tenant, endpoint_id, "/test-filter")
    out(ctx, client_of(ctx).call("POST", path, json_body=body))


@endpoints.command("delete")
@TENANT_OPTION
@_ENDPOINT_ARG
@click.pass_context
def endpoints_delete(ctx: click.Context, tenant: str, endpoint_id: str) -> None:
    client_of(ctx).call("DELETE", _path(tenant, endpoint_id))
    deleted(ctx, "endpoint", endpoint_id)
