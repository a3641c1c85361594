"""``regionsync attempts list``, ``audit list`` and ``jobs list|show``: what happened."""

from __future__ import annotations

import click

from .client import ManageError, api_path, client_of, out
from .endpoints import TENANT_OPTION

__all__ = ["attempts", "audit", "jobs"]

_LIMIT = click.option("--limit", type=click.IntRange(1), default=50, show_default=True,
                      help="At most this many.")  # fmt: skip


@click.group()
def attempts() -> None:
    """The attempt log of a delivery or of an endpoint."""


@attempts.command("list")
@TENANT_OPTION
@click.option("--delivery", default=None, help="A delivery's attempts (every generation).")
@click.option("--endpoint", default=None, help="An endpoint's attempts.")
@click.option("--order", default=None, help="desc (newest first, the default) or asc.")
@click.option("--status", default=None, help="--endpoint only: succeeded or failed.")
@click.option("--since", default=None, help="--endpoint only: RFC 3339.")
@_LIMIT
@click.pass_context
def attempts_list(
    ctx: click.Context,
    tenant: str,
    delivery: str | None,
    endpoint: str | None,
    order: str | None,
    status: str | None,
    since: str | None,
    limit: int,
) -> None:
    if (delivery is None) == (endpoint is None):
        raise ManageError("give one of --delivery or --endpoint", exit_code=2)
    if delivery is not None:
        if status is not None or since is not None:
            raise ManageError("--status and --since filter --endpoint only", exit_code=2)
        path = api_path("/v1/tenants/{tenant}/deliveries/{delivery}/attempts", tenant=tenant,
                        delivery=delivery)  # fmt: skip
    else:
        path = api_path("/v1/tenants/{tenant}/endpoints/{endpoint}/attempts", tenant=tenant,
                        endpoint=endpoint or "")  # fmt: skip
    params = {"order": order, "status": status, "since": since}
    rows = client_of(ctx).pages(path, params, limit=limit)
    out(ctx, rows, ["delivery", "generation", "n", "at", "region", "status_code", "error"])


@click.group()
def audit() -> None:
    """The audit log: registry changes and re-sends in every region."""


@audit.command("list")
@click.option("--tenant", default=None, help="Only this tenant's (a tenant token: its own).")
@click.option("--since", default=None, help="RFC 3339.")
@_LIMIT
@click.pass_context
def audit_list(ctx: click.Context, tenant: str | None, since: str | None, limit: int) -> None:
    rows = client_of(ctx).pages("/v1/audit", {"tenant": tenant, "since": since}, limit=limit)
    out(ctx, rows, ["at", "region", "who", "op", "object", "tenant", "detail"])


@click.group()
def jobs() -> None:
    """Recovery jobs (recover, replay) started in the node's region."""


@jobs.command("list")
@TENANT_OPTION
@_LIMIT
@click.pass_context
def jobs_list(ctx: click.Context, tenant: str, limit: int) -> None:
    rows = client_of(ctx).pages(api_path("/v1/tenants/{tenant}/jobs", tenant=tenant), limit=limit)
    out(ctx, rows, ["id", "kind", "endpoint", "status", "done", "started_at", "finished_at"])


@jobs.command("show")
@TENANT_OPTION
@click.argument("job_id")
@click.pass_context
def jobs_show(ctx: click.Context, tenant: str, job_id: str) -> None:
    out(ctx, client_of(ctx).call("GET", api_path("/v1/tenants/{tenant}/jobs/{job}",
                                                 tenant=tenant, job=job_id)))  # fmt: skip
