"""Management commands over a node's HTTP API (httpx): status, tenants, endpoints,
sources, events, deliveries, recover and replay.

Talks HTTP only (never the runtime): ``--url`` / ``REGIONSYNC_URL`` names the node,
``--token`` / ``REGIONSYNC_TOKEN`` the bearer token, ``--json`` prints the API's JSON
instead of tables. Exit codes: 0 done; 1 the API refused the request (its problem body's
``detail`` and ``field`` are printed); 2 the token was refused (401/403) or the node could
not be reached.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click
import httpx

__all__ = ["ApiClient", "ManageError", "register"]

DEFAULT_URL = "http://127.0.0.1:8080"


class ManageError(click.ClickException):
    """A failed management request; ``exit_code`` 2 for auth and connection failures."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class ApiClient:
    """A blocking client of one node: ``call(method, path, ...)`` -> the decoded JSON
    body (None for 204). Raises ManageError (see the module docstring)."""

    def __init__(self, url: str, token: str | None, timeout_s: float = 10.0):
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def call(
        self, method: str, path: str, *, json_body: Any = None, params: dict | None = None
    ) -> Any:
        params = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            resp = self.http.request(method, path, json=json_body, params=params)
        except httpx.TransportError as exc:
            raise ManageError(
                f"cannot reach {self.url}: {exc or type(exc).__name__}", exit_code=2
            ) from None
        if resp.status_code == 204:
            return None
        try:
            body = resp.json()
        except ValueError:
            body = None
        if resp.is_success:
            return body
        problem = body if isinstance(body, dict) else {}
        detail = problem.get("detail") or resp.text[:200] or resp.reason_phrase
        where = f" (field: {problem['field']})" if problem.get("field") else ""
        if resp.status_code in (401, 403):
            raise ManageError(
                f"{resp.status_code} {problem.get('error', 'unauthorized')}: {detail}{where}; "
                "check --token / REGIONSYNC_TOKEN",
                exit_code=2,
            )
        raise ManageError(f"{resp.status_code} {problem.get('error', 'error')}: {detail}{where}")

    def pages(self, path: str, params: dict | None = None, limit: int | None = None) -> list:
        """Every item of a list route (following ``next``), at most ``limit`` items."""
        items: list = []
        cursor = None
        while True:
            page = self.call("GET", path, params={**(params or {}), "cursor": cursor,
                                                  "limit": 1000 if limit is None else
                                                  min(limit - len(items), 1000)})  # fmt: skip
            items.extend(page["items"])
            cursor = page["next"]
            if cursor is None or (limit is not None and len(items) >= limit):
                return items


def _client(ctx: click.Context) -> ApiClient:
    return ctx.find_root().obj["client"]


def _json_mode(ctx: click.Context) -> bool:
    return bool(ctx.find_root().obj["json"])


def _table(rows: list[dict], cols: list[str]) -> str:
    """Aligned text columns ``cols`` of ``rows`` (missing values print as ``-``)."""
    cells = [[("-" if r.get(c) is None else str(r.get(c))) for c in cols] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def _out(ctx: click.Context, data: Any, cols: list[str] | None = None) -> None:
    """Print ``data``: JSON with ``--json``; else a table of a list, or ``key: value``."""
    if _json_mode(ctx) or cols is None and not isinstance(data, dict):
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    elif cols is not None:
        click.echo(_table(data, cols))
    else:
        for k, v in data.items():
            click.echo(f"{k}: {json.dumps(v) if isinstance(v, dict | list) else v}")


def status_rows(cluster: dict, others: dict[str, dict | str] | None = None) -> list[dict]:
    """One row per region: the node asked (``cluster``, its ``/v1/cluster`` body) first,
    then its peers. ``connected``, ``records_behind`` and ``last_contact`` are the asked
    node's links; ``others`` maps a peer region to its own ``/v1/cluster`` body, or to why
    it could not be asked (a string): a reached region shows its own registry hash, whether
    it equals the asked node's (``agrees``) and how many of its own links are up
    (``peers_up``); an unreached one shows the asked node's state-digest verdict."""
    others = others or {}
    custody = cluster.get("custody", {})
    records = custody.get("records", {})
    suspected = set(custody.get("suspected", []))
    mine = cluster["registry_hash"]

    def custody_of(region: str) -> str:
        rec = records.get(region)
        state = "own" if rec is None or rec["state"] == "own" else (
            "adopted by " + ",".join(rec["live"])
        )  # fmt: skip
        return state + (" (suspected)" if region in suspected else "")

    def peers_up(c: dict) -> str:
        peers = c.get("peers", [])
        return f"{sum(1 for p in peers if p['connected'])}/{len(peers)}"

    rows = [{
        "region": cluster["region"], "reached": "self", "connected": "self",
        "records_behind": 0, "last_contact": "-", "registry": mine[:12], "agrees": "-",
        "peers_up": peers_up(cluster), "custody": custody_of(cluster["region"]),
    }]  # fmt: skip
    for p in cluster.get("peers", []):
        since = p.get("seconds_since_contact")
        row = {
            "region": p["region"], "connected": "yes" if p["connected"] else "NO",
            "records_behind": p["records_behind"],
            "last_contact": "never" if since is None else f"{since:.1f}s ago",
            "custody": custody_of(p["region"]),
        }  # fmt: skip
        other = others.get(p["region"], "no http_url")
        if isinstance(other, dict):
            same = other["registry_hash"] == mine
            row.update(reached="yes", registry=other["registry_hash"][:12],
                       agrees="yes" if same else "DIFFERS", peers_up=peers_up(other))  # fmt: skip
        else:
            verdict = {True: "agrees (digest)", False: "DIFFERS (digest)",
                       None: "not compared"}[p.get("state_agrees")]  # fmt: skip
            row.update(reached=f"no: {other}", registry="-", agrees=verdict, peers_up="-")
        rows.append(row)
    return rows


def _peer_clusters(client: ApiClient, cluster: dict, extra_urls: tuple[str, ...]) -> dict:
    """Every peer's own ``/v1/cluster`` (region -> body), or why it could not be had
    (region -> message): asked at its ``http_url`` from the cluster view, or at one of
    ``extra_urls`` (matched to regions by their answer)."""
    token = client.http.headers.get("authorization", "").removeprefix("Bearer ") or None
    out: dict[str, dict | str] = {}
    urls = [p["http_url"] for p in cluster.get("peers", []) if p.get("http_url")]
    for url in [*urls, *extra_urls]:
        peer = ApiClient(url, token)
        try:
            body = peer.call("GET", "/v1/cluster")
            out[body["region"]] = body
        except ManageError as exc:
            region = next((p["region"] for p in cluster.get("peers", [])
                           if p.get("http_url") == url), None)  # fmt: skip
            if region is not None:
                out[region] = exc.message.split(";")[0]
        finally:
            peer.http.close()
    return out


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
    for cmd in (status, tenants, endpoints, sources, events, deliveries, recover, replay):
        main.add_command(cmd)


def init_context(ctx: click.Context, url: str, token: str | None, as_json: bool) -> None:
    """Called by the main group: the lazily built client and output mode."""
    client = ApiClient(url, token)
    ctx.call_on_close(client.http.close)
    ctx.obj = {"client": client, "json": as_json}


@click.command()
@click.option(
    "--peer-url",
    "peer_urls",
    multiple=True,
    metavar="URL",
    help="Also ask this node (repeat; for peers configured without http_url).",
)
@click.pass_context
def status(ctx: click.Context, peer_urls: tuple[str, ...]) -> None:
    """Every region: the asked node's links to it (connected, records behind, last
    contact), its own registry hash and whether it agrees, its links up, custody. Peers
    are asked at the ``http_url`` of their ``[[peers]]`` entry (or ``--peer-url``) with
    the same token; a peer that cannot be asked shows the state-digest verdict."""
    client = _client(ctx)
    cluster = client.call("GET", "/v1/cluster")
    others = _peer_clusters(client, cluster, peer_urls)
    if _json_mode(ctx):
        _out(ctx, {**cluster, "regions": {cluster["region"]: cluster, **others}})
        return
    cols = ["region", "reached", "connected", "records_behind", "last_contact", "registry",
            "agrees", "peers_up", "custody"]  # fmt: skip
    _out(ctx, status_rows(cluster, others), cols)


@click.group()
def tenants() -> None:
    """List, create and delete tenants (admin token)."""


@tenants.command("list")
@click.option("--limit", type=click.IntRange(1), default=None, help="At most this many.")
@click.pass_context
def tenants_list(ctx: click.Context, limit: int | None) -> None:
    rows = _client(ctx).pages("/v1/tenants", limit=limit)
    _out(ctx, rows, ["id", "name", "ack_policy", "created_at"])


@tenants.command("create")
@click.option("--id", "tenant_id", default=None)
@click.option("--name", required=True)
@click.option("--ack-policy", type=click.Choice(["local", "one-remote"]), default="local")
@click.pass_context
def tenants_create(ctx: click.Context, tenant_id: str | None, name: str, ack_policy: str) -> None:
    body = {"name": name, "ack_policy": ack_policy, **({"id": tenant_id} if tenant_id else {})}
    _out(ctx, _client(ctx).call("POST", "/v1/tenants", json_body=body))


@tenants.command("delete")
@click.argument("tenant_id")
@click.pass_context
def tenants_delete(ctx: click.Context, tenant_id: str) -> None:
    _client(ctx).call("DELETE", f"/v1/tenants/{tenant_id}")
    click.echo(f"deleted tenant {tenant_id}")


@click.group()
def endpoints() -> None:
    """List, create and delete a tenant's endpoints."""


_TENANT = click.option("--tenant", required=True, help="Tenant id.")


@endpoints.command("list")
@_TENANT
@click.pass_context
def endpoints_list(ctx: click.Context, tenant: str) -> None:
    rows = _client(ctx).pages(f"/v1/tenants/{tenant}/endpoints")
    _out(ctx, rows, ["id", "url", "state", "event_types"])


@endpoints.command("create")
@_TENANT
@click.option("--url", "ep_url", required=True)
@click.option("--id", "ep_id", default=None)
@click.option("--event-type", "event_types", multiple=True, help="Repeat; none: every type.")
@click.pass_context
def endpoints_create(
    ctx: click.Context, tenant: str, ep_url: str, ep_id: str | None, event_types: tuple[str, ...]
) -> None:
    body = {"url": ep_url, "event_types": list(event_types), **({"id": ep_id} if ep_id else {})}
    _out(ctx, _client(ctx).call("POST", f"/v1/tenants/{tenant}/endpoints", json_body=body))


@endpoints.command("delete")
@_TENANT
@click.argument("endpoint_id")
@click.pass_context
def endpoints_delete(ctx: click.Context, tenant: str, endpoint_id: str) -> None:
    _client(ctx).call("DELETE", f"/v1/tenants/{tenant}/endpoints/{endpoint_id}")
    click.echo(f"deleted endpoint {endpoint_id}")


@click.group()
def sources() -> None:
    """List, create and delete inbound sources (admin token)."""


@sources.command("list")
@click.option("--tenant", default=None, help="Only this tenant's.")
@click.pass_context
def sources_list(ctx: click.Context, tenant: str | None) -> None:
    rows = _client(ctx).pages("/v1/sources", {"tenant": tenant})
    _out(ctx, rows, ["id", "tenant", "kind", "url_path", "created_at"])


@sources.command("create")
@_TENANT
@click.option("--kind", type=click.Choice(["github", "stripe", "standard-webhooks", "hmac"]),
              required=True)  # fmt: skip
@click.option("--secret", required=True)
@click.pass_context
def sources_create(ctx: click.Context, tenant: str, kind: str, secret: str) -> None:
    """Register a source; its id (the /in/<id> URL) is generated by the node."""
    body = {"tenant": tenant, "kind": kind, "secret": secret}
    _out(ctx, _client(ctx).call("POST", "/v1/sources", json_body=body))


@sources.command("delete")
@click.argument("source_id")
@click.pass_context
def sources_delete(ctx: click.Context, source_id: str) -> None:
    _client(ctx).call("DELETE", f"/v1/sources/{source_id}")
    click.echo(f"deleted source {source_id}")


@click.group()
def events() -> None:
    """Search a tenant's events and show one."""


@events.command("list")
@_TENANT
@click.option("--type", "event_type", default=None, help="Exact, or prefix.*")
@click.option("--since", default=None, help="RFC 3339")
@click.option("--until", default=None, help="RFC 3339")
@click.option("--endpoint", default=None)
@click.option("--status", default=None, help="A delivery status of any of its deliveries.")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.pass_context
def events_list(ctx: click.Context, tenant: str, limit: int, **filters: str | None) -> None:
    rows = _client(ctx).pages(f"/v1/tenants/{tenant}/events", dict(filters), limit=limit)
    if not _json_mode(ctx):
        for r in rows:
            r["delivered"] = f"{r['deliveries']['delivered']}/{r['deliveries']['total']}"
    _out(ctx, rows, ["id", "event_type", "received_at", "region", "delivered"])


@events.command("show")
@_TENANT
@click.argument("event_id")
@click.pass_context
def events_show(ctx: click.Context, tenant: str, event_id: str) -> None:
    click.echo(json.dumps(_client(ctx).call("GET", f"/v1/tenants/{tenant}/events/{event_id}"),
                          indent=2, sort_keys=True))  # fmt: skip


@click.group()
def deliveries() -> None:
    """Act on deliveries."""


@deliveries.command("retry")
@_TENANT
@click.argument("delivery_id")
@click.pass_context
def deliveries_retry(ctx: click.Context, tenant: str, delivery_id: str) -> None:
    d = _client(ctx).call("POST", f"/v1/tenants/{tenant}/deliveries/{delivery_id}/retry")
    _out(ctx, d)


_JOB_STATUS = {"recover": "dead", "replay-missing": "skipped"}


def _run_job(ctx: click.Context, tenant: str, endpoint: str, since: str, kind: str,
             poll_s: float) -> None:  # fmt: skip
    """Start a recovery job, follow it with a progress bar until it ends; exit 1 if it
    failed. The bar's length is the matching deliveries counted at the start."""
    client = _client(ctx)
    total = len(client.pages(
        f"/v1/tenants/{tenant}/deliveries",
        {"endpoint": endpoint, "status": _JOB_STATUS[kind], "since": since},
    ))  # fmt: skip
    job = client.call("POST", f"/v1/tenants/{tenant}/endpoints/{endpoint}/{kind}",
                      json_body={"since": since})  # fmt: skip
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
            job = client.call("GET", f"/v1/tenants/{tenant}/jobs/{job['id']}")
    _out(ctx, job)
    if job["status"] != "succeeded":
        raise ManageError(f"job {job['id']} {job['status']}: {job.get('error')}")


_JOB_OPTIONS = [
    _TENANT,
    click.option("--endpoint", required=True, help="Endpoint id."),
    click.option("--since", required=True, help="RFC 3339: deliveries created since."),
    click.option("--poll", "poll_s", type=float, default=0.5, show_default=True,
                 help="Seconds between job polls."),
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
