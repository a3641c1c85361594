"""``regionsync endpoints list|create|delete --tenant T``."""

from __future__ import annotations

import click

from .client import api_path, client_of, out

__all__ = ["TENANT_OPTION", "endpoints"]

TENANT_OPTION = click.option("--tenant", required=True, help="Tenant id.")


@click.group()
def endpoints() -> None:
    """List, create and delete a tenant's endpoints."""


@endpoints.command("list")
@TENANT_OPTION
@click.pass_context
def endpoints_list(ctx: click.Context, tenant: str) -> None:
    rows = client_of(ctx).pages(api_path("/v1/tenants/{tenant}/endpoints", tenant=tenant))
    out(ctx, rows, ["id", "url", "state", "event_types"])


@endpoints.command("create")
@TENANT_OPTION
@click.option("--url", "ep_url", required=True)
@click.option("--event-type", "event_types", multiple=True, help="Repeat; none: every type.")
@click.pass_context
def endpoints_create(
    ctx: click.Context, tenant: str, ep_url: str, event_types: tuple[str, ...]
) -> None:
    """Create an endpoint; its id is generated and printed."""
    body = {"url": ep_url, "event_types": list(event_types)}
    path = api_path("/v1/tenants/{tenant}/endpoints", tenant=tenant)
    out(ctx, client_of(ctx).call("POST", path, json_body=body))


@endpoints.command("delete")
@TENANT_OPTION
@click.argument("endpoint_id")
@click.pass_context
def endpoints_delete(ctx: click.Context, tenant: str, endpoint_id: str) -> None:
    path = api_path("/v1/tenants/{tenant}/endpoints/{endpoint}", tenant=tenant,
                    endpoint=endpoint_id)  # fmt: skip
    client_of(ctx).call("DELETE", path)
    click.echo(f"deleted endpoint {endpoint_id}")
