"""``regionsync sources list|create|delete`` (admin token)."""

from __future__ import annotations

import click

from .client import api_path, client_of, out
from .endpoints import TENANT_OPTION

__all__ = ["sources"]


@click.group()
def sources() -> None:
    """List, create and delete inbound sources (admin token)."""


@sources.command("list")
@click.option("--tenant", default=None, help="Only this tenant's.")
@click.pass_context
def sources_list(ctx: click.Context, tenant: str | None) -> None:
    rows = client_of(ctx).pages("/v1/sources", {"tenant": tenant})
    out(ctx, rows, ["id", "tenant", "kind", "url_path", "created_at"])


@sources.command("create")
@TENANT_OPTION
@click.option("--kind", type=click.Choice(["github", "stripe", "standard-webhooks", "hmac"]),
              required=True)  # fmt: skip
@click.option("--secret", required=True)
@click.option("--id", "source_id", default=None)
@click.pass_context
def sources_create(
    ctx: click.Context, tenant: str, kind: str, secret: str, source_id: str | None
) -> None:
    body = {"tenant": tenant, "kind": kind, "secret": secret}
    if source_id:
        body["id"] = source_id
    out(ctx, client_of(ctx).call("POST", "/v1/sources", json_body=body))


@sources.command("delete")
@click.argument("source_id")
@click.pass_context
def sources_delete(ctx: click.Context, source_id: str) -> None:
    client_of(ctx).call("DELETE", api_path("/v1/sources/{source}", source=source_id))
    click.echo(f"deleted source {source_id}")
