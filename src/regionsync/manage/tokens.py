"""``regionsync token create|list|revoke``: API tokens over the HTTP API of any region,
with the global ``--url``/``--token``/``--json`` (or ``REGIONSYNC_URL``/
``REGIONSYNC_TOKEN``) and exit codes of every management command; an admin token."""

from __future__ import annotations

import json

import click

from .client import api_path, client_of, json_mode, out

__all__ = ["token"]


@click.group()
def token() -> None:
    """Create, list and revoke API tokens (replicated to every region; admin token)."""


@token.command("create")
@click.option("--scope", required=True, help="admin | tenant:<id>:manage|publish|read")
@click.option("--name", required=True, help="Shown in listings and audit entries.")
@click.option("--expires-at", default=None, help="RFC 3339 time; default never.")
@click.pass_context
def create(ctx: click.Context, scope: str, name: str, expires_at: str | None) -> None:
    """Create a token; prints it once (``token`` is the secret)."""
    body = {"scope": scope, "name": name, "expires_at": expires_at}
    out(ctx, client_of(ctx).call("POST", "/v1/tokens", json_body=body))


@token.command("list")
@click.option("--limit", type=click.IntRange(1), default=None, help="At most this many.")
@click.pass_context
def list_(ctx: click.Context, limit: int | None) -> None:
    """List live tokens (never their secrets)."""
    rows = client_of(ctx).pages("/v1/tokens", limit=limit)
    out(ctx, rows, ["id", "name", "scope", "expires_at", "created_at", "created_by"])


@token.command("revoke")
@click.argument("token_id")
@click.pass_context
def revoke(ctx: click.Context, token_id: str) -> None:
    """Revoke a token in every region (each refuses it once the change replicates)."""
    client_of(ctx).call("DELETE", api_path("/v1/tokens/{token}", token=token_id))
    if json_mode(ctx):
        click.echo(json.dumps({"revoked": token_id}))
    else:
        click.echo(f"revoked {token_id}")
