"""Management commands over a node's HTTP API (httpx), one module per resource: status,
tenants, endpoints, sources, events (with deliveries, recover, replay), tokens, regions,
publish and event types, attempts, audit, jobs, and the outbox relay (``outbox``: a
producer's PostgreSQL outbox, published with the SDK).

Talks HTTP only (never the runtime; an import-linter contract): ``--url`` /
``REGIONSYNC_URL`` names the node, ``--token`` / ``REGIONSYNC_TOKEN`` the bearer token,
``--json`` prints the API's JSON instead of tables. Every id put into a URL path is
checked and percent-encoded (``client.api_path``). Exit codes: 0 done; 1 the API refused
the request (its problem body's ``detail`` and ``field`` are printed); 2 the token was
refused (401/403), the node could not be reached or an argument was refused before
sending; 3 ``status`` could not ask a region (its row says why).
"""

from __future__ import annotations

import click

from .client import DEFAULT_URL, ApiClient, ManageError, api_path
from .endpoints import endpoints
from .events import deliveries, events, recover, replay
from .logs import attempts, audit, jobs
from .outbox import outbox_relay
from .publish import event_types, publish
from .regions import regions
from .sources import sources
from .status import status, status_rows
from .tenants import tenants
from .tokens import token

__all__ = ["ApiClient", "ManageError", "api_path", "init_context", "register", "status_rows"]


def register(main: click.Group) -> None:
    """Add the management commands and the global ``--url/--token/--json`` to ``main``."""
    main.params.extend([
        click.Option(["--url"], envvar="REGIONSYNC_URL", default=DEFAULT_URL, show_default=True,
                     help="Base URL of a node's HTTP API (env REGIONSYNC_URL)."),
        click.Option(["--token"], envvar="REGIONSYNC_TOKEN", default=None,
                     help="Bearer token (env REGIONSYNC_TOKEN)."),
        click.Option(["--json", "as_json"], is_flag=True, default=False,
                     help="Management commands print the API's JSON."),
    ])  # fmt: skip
    commands = (status, tenants, endpoints, sources, events, deliveries, recover, replay,
                token, regions, publish, event_types, attempts, audit, jobs,
                outbox_relay)  # fmt: skip
    for cmd in commands:
        _json_everywhere(cmd)
        main.add_command(cmd)


def _as_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_root().obj["json"] = True


def _json_everywhere(cmd: click.Command) -> None:
    """``--json`` after any management command too (``regionsync endpoints list --json``),
    the same as the global one."""
    for sub in getattr(cmd, "commands", {}).values():
        _json_everywhere(sub)
    if not isinstance(cmd, click.Group) and not any(p.name == "as_json" for p in cmd.params):
        cmd.params.append(click.Option(["--json", "as_json"], is_flag=True,
                                       expose_value=False, callback=_as_json,
                                       help="Print the API's JSON."))  # fmt: skip


def init_context(ctx: click.Context, url: str, token: str | None, as_json: bool) -> None:
    """Called by the main group: the client, built on first use (so a command that does
    not talk HTTP never fails on ``--url``), and the output mode."""
    made: list[ApiClient] = []

    def client() -> ApiClient:
        if not made:
            made.append(ApiClient(url, token))
            ctx.call_on_close(made[0].close)
        return made[0]

    ctx.obj = {"client": client, "json": as_json}
