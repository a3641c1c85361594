"""``regionsync endpoints list|create|delete --tenant T``."""

from __future__ import annotations

import click

from .client import api_path, client_of, json_mode, out

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
    if not json_mode(ctx):  # a broker endpoint's url is its broker's, without password
        rows = [{**r, "type": (r.get("destination") or {}).get("type", "http")} for r in rows]
    out(ctx, rows, ["id", "type", "url", "state", "event_types"])


BROKER_OPTIONS = {  # option -> the destination member it sets
    "destination_url": "url", "exchange": "exchange", "routing_key": "routing_key",
    "subject": "subject", "stream": "stream",
}  # fmt: skip


@endpoints.command("create")
@TENANT_OPTION
@click.option("--url", "ep_url", help="The HTTP endpoint's URL (http destinations).")
@click.option("--event-type", "event_types", multiple=True, help="Repeat; none: every type.")
@click.option("--destination-type", type=click.Choice(["http", "rabbitmq", "nats", "redis"]),
              default="http", show_default=True, help="Where deliveries go (README.md, "
              "Destinations).")  # fmt: skip
@click.option("--destination-url", help="The broker's URL, credentials included "
              "(amqp://, nats://, redis://).")  # fmt: skip
@click.option("--exchange", help="rabbitmq: the exchange (default: the default exchange).")
@click.option("--routing-key", help="rabbitmq: the routing key.")
@click.option("--subject", help="nats: the subject to publish to.")
@click.option("--stream", help="nats: the JetStream stream expected; redis: the stream.")
@click.pass_context
def endpoints_create(
    ctx: click.Context, tenant: str, ep_url: str | None, event_types: tuple[str, ...],
    destination_type: str, **broker: str | None,
) -> None:  # fmt: skip
    """Create an endpoint; its id is generated and printed. The node judges the body
    (a problem names the member at fault, e.g. ``destination.url``)."""
    body: dict[str, object] = {"event_types": list(event_types)}
    if ep_url is not None:
        body["url"] = ep_url
    if destination_type != "http":
        members = {BROKER_OPTIONS[k]: v for k, v in broker.items() if v is not None}
        body["destination"] = {"type": destination_type, **members}
    elif any(v is not None for v in broker.values()):
        raise click.UsageError("broker options need --destination-type rabbitmq|nats|redis")
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
