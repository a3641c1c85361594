"""``regionsync publish`` and ``regionsync event-types list|show|create|update|delete``."""

from __future__ import annotations

import json
from typing import Any

import click

from .client import api_path, client_of, deleted, out
from .endpoints import TENANT_OPTION
from .fields import EVENT_TYPE_CREATE, EVENT_TYPE_UPDATE, body_of, json_arg, options, read_arg

__all__ = ["event_types", "publish"]


def _payload_text(payload: str) -> str:
    """The payload's JSON text as given (``@file``, ``-`` for stdin), checked to be JSON
    but sent byte for byte (``1.10`` stays ``1.10``)."""
    text = read_arg(payload, "--payload")
    json_arg(text, "--payload")  # refused before sending: not JSON
    return text.strip()


@click.command()
@TENANT_OPTION
@click.option("--type", "event_type", required=True, help="The event type, e.g. invoice.paid.")
@click.option("--payload", required=True, help="JSON text; @file to read a file, - for stdin.")
@click.option("--idempotency-key", default=None,
              help="Publishing again with this key returns the first event.")  # fmt: skip
@click.pass_context
def publish(
    ctx: click.Context, tenant: str, event_type: str, payload: str, idempotency_key: str | None
) -> None:
    """Publish one event; prints its id and the regions' answer (202)."""
    text = _payload_text(payload)
    content = ('{"event_type":' + json.dumps(event_type) + ',"payload":' + text + "}").encode()
    headers = {"idempotency-key": idempotency_key} if idempotency_key is not None else None
    path = api_path("/v1/tenants/{tenant}/events", tenant=tenant)
    answer = client_of(ctx).send("POST", path, content=content, headers=headers)
    out(ctx, answer.json_body)


def _type_path(tenant: str, name: str | None = None) -> str:
    if name is None:
        return api_path("/v1/tenants/{tenant}/event-types", tenant=tenant)
    return api_path("/v1/tenants/{tenant}/event-types/{name}", tenant=tenant, name=name)


@click.group("event-types")
def event_types() -> None:
    """A tenant's event-type catalog: names, descriptions, payload schemas."""


@event_types.command("list")
@TENANT_OPTION
@click.pass_context
def types_list(ctx: click.Context, tenant: str) -> None:
    rows = client_of(ctx).call("GET", _type_path(tenant))["items"]
    out(ctx, rows, ["name", "description", "deprecated", "updated_at"])


@event_types.command("show")
@TENANT_OPTION
@click.argument("name")
@click.pass_context
def types_show(ctx: click.Context, tenant: str, name: str) -> None:
    out(ctx, client_of(ctx).call("GET", _type_path(tenant, name)))


@event_types.command("create")
@TENANT_OPTION
@options(EVENT_TYPE_CREATE)
@click.pass_context
def types_create(ctx: click.Context, tenant: str, **given: Any) -> None:
    body = body_of(EVENT_TYPE_CREATE, given)
    out(ctx, client_of(ctx).call("POST", _type_path(tenant), json_body=body))


@event_types.command("update")
@TENANT_OPTION
@click.argument("name")
@options(EVENT_TYPE_UPDATE)
@click.pass_context
def types_update(ctx: click.Context, tenant: str, name: str, **given: Any) -> None:
    """Change the description, schema or deprecation given; the rest stays."""
    body = body_of(EVENT_TYPE_UPDATE, given)
    if not body:
        raise click.UsageError("nothing to change: give at least one option")
    out(ctx, client_of(ctx).call("PATCH", _type_path(tenant, name), json_body=body))


@event_types.command("delete")
@TENANT_OPTION
@click.argument("name")
@click.pass_context
def types_delete(ctx: click.Context, tenant: str, name: str) -> None:
    client_of(ctx).call("DELETE", _type_path(tenant, name))
    deleted(ctx, "event type", name)
