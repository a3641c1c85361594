"""``regionsync outbox-relay``: run the transactional outbox relay (``outbox_relay``) over
a PostgreSQL outbox table, or print its progress and lag (``--status``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from typing import Any

import click
import psycopg

from .client import ManageError
from .outbox_relay import OutboxRelay, ensure_table, outbox_status, table_name

__all__ = ["outbox_relay"]


@click.command("outbox-relay")
@click.option(
    "--dsn",
    envvar="REGIONSYNC_OUTBOX_DSN",
    required=True,
    help="The producer's PostgreSQL database (env REGIONSYNC_OUTBOX_DSN).",
)
@click.option(
    "--table",
    default="regionsync_outbox",
    show_default=True,
    help="The outbox table (created if missing).",
)
@click.option(
    "--region",
    "regions",
    multiple=True,
    help="A region's HTTP base URL, nearest first (repeat); default: --url, and "
    "the other regions from its /v1/cluster.",
)
@click.option(
    "--batch",
    default=500,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Rows read per step.",
)
@click.option(
    "--concurrency",
    default=16,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Tenants published at once (each tenant's rows in order).",
)
@click.option(
    "--progress",
    "progress_s",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    help="Seconds between progress log lines.",
)
@click.option("--once", is_flag=True, help="Relay until no row is pending, then exit.")
@click.option(
    "--status",
    "status_only",
    is_flag=True,
    help="Print pending, sent, failed and lag, then exit (creates nothing).",
)
@click.pass_context
def outbox_relay(
    ctx: click.Context, dsn: str, table: str, regions: tuple[str, ...], batch: int,
    concurrency: int, progress_s: float, once: bool, status_only: bool,
) -> None:  # fmt: skip
    """Publish the rows of a transactional outbox table in order per tenant.

    The producer inserts (tenant, event_type, payload, idempotency_key) into the table in
    its own transaction; the relay gives each row an event id before its first publish,
    publishes it with the Python SDK (region failover), and sets sent_at. A row keeps its
    id across retries and restarts, so it is never two events (README "Outbox relay")."""
    try:
        table_name(table)
    except ValueError as exc:
        raise ManageError(f"--table: {exc}", exit_code=2) from None
    root = ctx.find_root().params
    if status_only:
        s = asyncio.run(_status(dsn, table))
        click.echo(json.dumps(s) if ctx.obj.get("json") else _status_line(s))
        return
    try:
        from regionsync_client import AsyncClient
    except ImportError:
        raise ManageError(
            "the Python SDK is not installed: pip install ./clients/python", exit_code=2
        ) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
    urls = list(regions) or [root["url"]]
    client = AsyncClient(urls, root.get("token"))
    opts = {"batch": batch, "concurrency": concurrency, "progress_s": progress_s}
    asyncio.run(_relay(dsn, table, client, opts, once))


def _status_line(s: dict[str, Any]) -> str:
    return (f"{s['table']}: pending {s['pending']}, sent {s['sent']} "
            f"({s['sent_last_minute']} in the last minute), failed {s['failed']}, "
            f"lag {s['lag_s']:.1f} s, last sent id {s['last_sent_id']}")  # fmt: skip


async def _connect(dsn: str) -> psycopg.AsyncConnection[Any]:
    try:
        return await psycopg.AsyncConnection.connect(dsn)
    except psycopg.Error as exc:
        raise ManageError(f"--dsn: cannot connect: {exc}".strip(), exit_code=2) from None


async def _status(dsn: str, table: str) -> dict[str, Any]:
    async with await _connect(dsn) as conn:
        try:
            return await outbox_status(conn, table)
        except psycopg.errors.UndefinedTable:
            raise ManageError(f"no table {table!r} (the relay creates it)", exit_code=2) from None


async def _relay(dsn: str, table: str, client: Any, opts: dict[str, Any], once: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with await _connect(dsn) as conn, client:
        await ensure_table(conn, table)
        relay = OutboxRelay(conn, table, client, **opts)
        if not await relay.lock():
            raise ManageError(f"another relay holds the lock of {table!r}", exit_code=2)
        logging.getLogger("regionsync.outbox").info("outbox %s: relaying", table)
        if once:
            while await relay.step():
                pass
        else:
            await relay.run(stop)
        s = await outbox_status(conn, table)
        click.echo(_status_line(s), err=True)
