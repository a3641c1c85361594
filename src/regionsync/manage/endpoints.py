"""``regionsync endpoints list|show|create|update|pause|resume|rotate-secret|test-filter|
delete --tenant T``: every endpoint route of the API (``adapters/routes/endpoints.py``)."""

from __future__ import annotations

from typing import Any

import click

from .client import api_path, client_of, deleted, json_mode, out
from .fields import ENDPOINT_CREATE, ENDPOINT_UPDATE, body_of, json_arg, options

__all__ = ["TENANT_OPTION", "endpoints"]

TENANT_OPTION = click.option("--tenant", required=True, help="Tenant id.")
_ENDPOINT_ARG = click.argument("endpoint_id")
_COLS = ["id", "type", "url", "state", "event_types"]
# the broker options: option -> the destination member it sets (README.md, Destinations)
_BROKER = {
    "destination_url": "url", "exchange": "exchange", "routing_key": "routing_key",
    "subject": "subject", "stream": "stream",
}  # fmt: skip


def _broker_options(f: Any) -> Any:
    for decorator in reversed([
        click.option("--destination-type", type=click.Choice(["http", "rabbitmq", "nats", "redis"]),
                     help="Where deliveries go (README.md, Destinations); default http."),
        click.option("--destination-url", help="The broker's URL, credentials included "
                     "(amqp://, nats://, redis://)."),
        click.option("--exchange", help="rabbitmq: the exchange (default: the default exchange)."),
        click.option("--routing-key", help="rabbitmq: the routing key."),
        click.option("--subject", help="nats: the subject to publish to."),
        click.option("--stream", help="nats: the JetStream stream expected; redis: the stream."),
    ]):  # fmt: skip
        f = decorator(f)
    return f


def _destination(body: dict[str, Any], given: dict[str, Any]) -> None:
    """The ``destination`` member of the broker options in ``given`` (removed from it)."""
    kind = given.pop("destination_type")
    broker = {_BROKER[k]: v for k in _BROKER if (v := given.pop(k)) is not None}
    if kind is not None and kind != "http":
        body["destination"] = {"type": kind, **broker}
    elif broker:
        raise click.UsageError("broker options need --destination-type rabbitmq|nats|redis")
    elif kind == "http":
        body["destination"] = {"type": "http"}


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
    if not json_mode(ctx):  # a broker endpoint's url is its broker's, without password
        rows = [{**r, "type": (r.get("destination") or {}).get("type", "http")} for r in rows]
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
@_broker_options
@click.pass_context
def endpoints_create(ctx: click.Context, tenant: str, **given: Any) -> None:
    """Create an endpoint; its id is generated and printed. The node judges the body
    (a problem names the member at fault, e.g. ``destination.url``)."""
    body = body_of(ENDPOINT_CREATE, given)
    _destination(body, given)
    path = api_path("/v1/tenants/{tenant}/endpoints", tenant=tenant)
    out(ctx, client_of(ctx).call("POST", path, json_body=body))


@endpoints.command("update")
@TENANT_OPTION
@_ENDPOINT_ARG
@options(ENDPOINT_UPDATE)
@_broker_options
@click.pass_context
def endpoints_update(ctx: click.Context, tenant: str, endpoint_id: str, **given: Any) -> None:
    """Change the options given (PATCH); the others stay as they are."""
    body = body_of(ENDPOINT_UPDATE, given)
    _destination(body, given)
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
