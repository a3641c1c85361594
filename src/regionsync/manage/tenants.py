"""``regionsync tenants list|create|delete`` (admin token)."""

from __future__ import annotations

from typing import Any

import click

from .client import api_path, client_of, deleted, out
from .fields import TENANT_CREATE, body_of, options

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
@options(TENANT_CREATE)
@click.pass_context
def tenants_create(ctx: click.Context, **given: Any) -> None:
    out(ctx, client_of(ctx).call("POST", "/v1/tenants", json_body=body_of(TENANT_CREATE, given)))


@tenants.command("delete")
@click.argument("tenant_id")
@click.pass_context
def tenants_delete(ctx: click.Context, tenant_id: str) -> None:
    client_of(ctx).call("DELETE", api_path("/v1/tenants/{tenant}", tenant=tenant_id))
    deleted(ctx, "tenant", tenant_id)
