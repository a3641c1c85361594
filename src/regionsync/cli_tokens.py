"""``regionsync token create|list|revoke``: API tokens over the HTTP API of any region.

``--url`` / ``REGIONSYNC_URL`` is the node's base URL, ``--token`` / ``REGIONSYNC_TOKEN``
an admin token. A non-2xx answer exits 1 with the problem body's ``detail`` on stderr.
"""

from __future__ import annotations

import json
from typing import Any

import click
import httpx

__all__ = ["token"]


def _call(ctx: click.Context, method: str, path: str, body: Any = None) -> Any:
    url, secret = ctx.obj["url"], ctx.obj["token"]
    headers = {"authorization": f"Bearer {secret}"} if secret else {}
    try:
        resp = httpx.request(method, url.rstrip("/") + path, json=body, headers=headers)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"{url}: {exc}") from None
    if resp.status_code >= 400:
        try:
            detail = resp.json()
            text = f"{detail.get('error')}: {detail.get('detail')}"
            if detail.get("field"):
                text += f" (field {detail['field']})"
        except (ValueError, AttributeError):
            text = resp.text
        raise click.ClickException(f"HTTP {resp.status_code} {text}")
    return resp.json() if resp.content else None


@click.group()
@click.option("--url", envvar="REGIONSYNC_URL", default="http://127.0.0.1:8080",
              show_default=True, help="Node base URL (env REGIONSYNC_URL).")  # fmt: skip
@click.option("--token", "secret", envvar="REGIONSYNC_TOKEN", default=None,
              help="Admin bearer token (env REGIONSYNC_TOKEN).")  # fmt: skip
@click.pass_context
def token(ctx: click.Context, url: str, secret: str | None) -> None:
    """Create, list and revoke API tokens (replicated to every region)."""
    ctx.obj = {"url": url, "token": secret}


@token.command("create")
@click.option("--scope", required=True, help="admin | tenant:<id>:manage|publish|read")
@click.option("--name", required=True, help="Shown in listings and audit entries.")
@click.option("--expires-at", default=None, help="RFC 3339 time; default never.")
@click.pass_context
def create(ctx: click.Context, scope: str, name: str, expires_at: str | None) -> None:
    """Create a token; prints it once as JSON (``token`` is the secret)."""
    body = {"scope": scope, "name": name, "expires_at": expires_at}
    click.echo(json.dumps(_call(ctx, "POST", "/v1/tokens", body), indent=2))


@token.command("list")
@click.pass_context
def list_(ctx: click.Context) -> None:
    """List live tokens (never their secrets), one JSON object per line."""
    for item in _call(ctx, "GET", "/v1/tokens")["items"]:
        click.echo(json.dumps(item))


@token.command("revoke")
@click.argument("token_id")
@click.pass_context
def revoke(ctx: click.Context, token_id: str) -> None:
    """Revoke a token in every region (each refuses it once the change replicates)."""
    _call(ctx, "DELETE", f"/v1/tokens/{token_id}")
    click.echo(f"revoked {token_id}")
