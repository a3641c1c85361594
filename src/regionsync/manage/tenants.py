"""``regionsync tenants list|create|delete`` (admin token)."""

from __future__ import annotations

import click

from .client import api_path, client_of, out

__all__ = ["tenants"]


@click.group()
def tenants() -> None:
    """List, create and delete tenants (admin token)."""


@tenants.command("list")
@click.option("--limit", type=click.IntRange(1), default=None, help="At most this many.")
@click.pass_context
def tenants_list(ctx: click.Context, limit: int | None) -> None:
    rows = client_of(ctx).pages("/v1/tenants", limit=limit)
    out(ctx, rows, ["id", "name", "ack_policy", "created_at"])


@tenants.command("create")
@click.option("--id", "tenant_id", default=None)
@click.option("--name", required=True)
@click.option("--ack-policy", type=click.Choice(["local", "one-remote"]), default="local")
@click.pass_context
def tenants_create(ctx: click.Context, tenant_id: str | None, name: str, ack_policy: str) -> None:
    body = {"name": name, "ack_policy": ack_policy, **({"id": tenant_id} if tenant_id else {})}
    out(ctx, client_of(ctx).call("POST", "/v1/tenants", json_body=body))


@tenants.command("delete")
@click.argument("tenant_id")
@click.pass_context
def tenants_delete(ctx: click.Context, tenant_id: str) -> None:
    client_of(ctx).call("DELETE", api_path("/v1/tenants/{tenant}", tenant=tenant_id))
    click.echo(f"deleted tenant {tenant_id}")
