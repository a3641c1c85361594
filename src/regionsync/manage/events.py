"""``regionsync events list|show``, ``deliveries retry``, ``recover`` and ``replay``."""

from __future__ import annotations

import sys
import time

import click

from .client import ManageError, api_path, client_of, json_mode, out
from .endpoints import TENANT_OPTION

__all__ = ["deliveries", "events", "recover", "replay"]


@click.group()
def events() -> None:
    """Search a tenant's events and show one."""


@events.command("list")
@TENANT_OPTION
@click.option("--type", "event_type", default=None, help="Exact, or prefix.*")
@click.option("--since", default=None, help="RFC 3339")
@click.option("--until", default=None, help="RFC 3339")
@click.option("--endpoint", default=None)
@click.option("--status", default=None, help="A delivery status of any of its deliveries.")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.pass_context
def events_list(ctx: click.Context, tenant: str, limit: int, **filters: str | None) -> None:
    path = api_path("/v1/tenants/{tenant}/events", tenant=tenant)
    rows = client_of(ctx).pages(path, dict(filters), limit=limit)
    if not json_mode(ctx):
        for r in rows:
            r["delivered"] = f"{r['deliveries']['delivered']}/{r['deliveries']['total']}"
    out(ctx, rows, ["id", "event_type", "received_at", "region", "delivered"])


@events.command("show")
@TENANT_OPTION
@click.argument("event_id")
@click.pass_context
def events_show(ctx: click.Context, tenant: str, event_id: str) -> None:
    """Print the event as the API answers it (JSON, with or without ``--json``): its
    payload is the stored text byte for byte (``1.10`` stays ``1.10``)."""
    path = api_path("/v1/tenants/{tenant}/events/{event}", tenant=tenant, event=event_id)
    click.echo(client_of(ctx).send("GET", path).text)


@click.group()
def deliveries() -> None:
    """Act on deliveries."""


@deliveries.command("retry")
@TENANT_OPTION
@click.argument("delivery_id")
@click.pass_context
def deliveries_retry(ctx: click.Context, tenant: str, delivery_id: str) -> None:
    path = api_path("/v1/tenants/{tenant}/deliveries/{delivery}/retry", tenant=tenant,
                    delivery=delivery_id)  # fmt: skip
    out(ctx, client_of(ctx).call("POST", path))


_JOB_STATUS = {"recover": "dead", "replay-missing": "skipped"}


def _run_job(ctx: click.Context, tenant: str, endpoint: str, since: str, kind: str,
             poll_s: float) -> None:  # fmt: skip
    """Start a recovery job, follow it with a progress bar until it ends; exit 1 if it
    failed. The bar's length is the matching deliveries counted at the start."""
    client = client_of(ctx)
    ids = {"tenant": tenant, "endpoint": endpoint}
    start = api_path("/v1/tenants/{tenant}/endpoints/{endpoint}/", **ids) + kind  # checks ids
    total = len(client.pages(
        api_path("/v1/tenants/{tenant}/deliveries", tenant=tenant),
        {"endpoint": endpoint, "status": _JOB_STATUS[kind], "since": since},
    ))  # fmt: skip
    job = client.call("POST", start, json_body={"since": since})
    with click.progressbar(length=max(total, 1), label=f"{kind} {job['id']}",
                           file=sys.stderr) as bar:  # fmt: skip
        shown = 0
        while True:
            done = min(job["done"], bar.length or 0)
            bar.update(done - shown)
            shown = done
            if job["status"] != "running":
                bar.update((bar.length or 0) - shown)
                break
            time.sleep(poll_s)
            job = client.call("GET", api_path("/v1/tenants/{tenant}/jobs/{job}", tenant=tenant,
                                              job=job["id"]))  # fmt: skip
    out(ctx, job)
    if job["status"] != "succeeded":
        raise ManageError(f"job {job['id']} {job['status']}: {job.get('error')}")


_JOB_OPTIONS = [
    TENANT_OPTION,
    click.option("--endpoint", required=True, help="Endpoint id."),
    click.option("--since", required=True, help="RFC 3339: deliveries created since."),
    click.option("--poll", "poll_s", type=click.FloatRange(0.01), default=0.5,
                 show_default=True, help="Seconds between job polls."),
]  # fmt: skip


def _job_options(f):  # noqa: ANN001, ANN202 (decorator)
    for opt in reversed(_JOB_OPTIONS):
        f = opt(f)
    return f


@click.command()
@_job_options
@click.pass_context
def recover(ctx: click.Context, tenant: str, endpoint: str, since: str, poll_s: float) -> None:
    """Re-send the endpoint's dead deliveries since a time; follow the job to its end."""
    _run_job(ctx, tenant, endpoint, since, "recover", poll_s)


@click.command()
@_job_options
@click.pass_context
def replay(ctx: click.Context, tenant: str, endpoint: str, since: str, poll_s: float) -> None:
    """Send what was skipped while the endpoint was paused or disabled; follow the job."""
    _run_job(ctx, tenant, endpoint, since, "replay-missing", poll_s)
