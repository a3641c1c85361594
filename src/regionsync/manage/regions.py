"""``regionsync regions remove NAME``: remove a region for good over the HTTP API of any
remaining region (admin token); README "Removing a region for good" gives the steps."""

from __future__ import annotations

import click

from .client import api_path, client_of, out

__all__ = ["regions"]


@click.group()
def regions() -> None:
    """Regions of the cluster (removal for good; adding one is a config change)."""


@regions.command("remove")
@click.argument("name")
@click.pass_context
def remove(ctx: click.Context, name: str) -> None:
    """Remove region NAME for good: its deliveries go to the remaining regions, its clock
    entries are pruned once every remaining region acknowledged, and it is refused until
    wiped and re-added."""
    body = client_of(ctx).call("POST", api_path("/v1/cluster/regions/{name}/removal", name=name))
    if ctx.obj.get("json"):
        out(ctx, body)
    else:
        click.echo(f"removed {name} (incarnation {body['incarnation']}, by {body['by']})")
