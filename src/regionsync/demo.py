"""``regionsync demo``: three regions on loopback, a receiver, the main job end to end.

Starts us-east-1, eu-central-1 and ap-southeast-1 as separate ``regionsync serve``
processes (SQLite files in a temp dir) and a local receiver that verifies every signature
with the official ``standardwebhooks`` library when installed. Creates a tenant in one
region and endpoints in another, publishes events round-robin into all three, waits until
every expected (event, endpoint) delivery arrived and the registry hashes agree, and
prints a per-region table (or one JSON object).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .core.signing import parse_secret, sign

__all__ = [
    "REGIONS",
    "PayloadsError",
    "Receiver",
    "load_payloads",
    "run_demo",
    "start_cluster",
]

REGIONS = ("us-east-1", "eu-central-1", "ap-southeast-1")


_HANDED_OUT: set[int] = set()
_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _listen_ports() -> range:
    """Ports to hand out: the 12,000 below the kernel's ephemeral range (Linux
    ``ip_local_port_range``, else IANA's 49152), never into the privileged ones. An
    ephemeral port is also what every outgoing connection's local end gets: a port taken
    by a client between ``free_port`` and the server's bind failed the server's start."""
    try:
        low = int(_PORT_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 49152
    return range(max(1024, low - 12_000), low)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the ephemeral range
    (``_listen_ports``), and that this process has not handed out before (two servers
    started together must never be given the same one). Raises OSError if none is
    found."""
    ports = _listen_ports()
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.choice(ports) if len(ports) else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (or lingering): another one
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise OSError("no fresh free port on 127.0.0.1")


def _verifier(secret: str):  # noqa: ANN202
    """A ``verify(body, headers)`` that raises on a bad signature: the official library
    when installed, else our own constant-time check."""
    try:
        from standardwebhooks.webhooks import Webhook
    except ImportError:
        key = parse_secret(secret)

        def verify(body: bytes, headers: dict[str, str]) -> None:
            import hmac

            want = sign(key, headers["webhook-id"], int(headers["webhook-timestamp"]), body)
            got = headers["webhook-signature"].split()
            if not any(hmac.compare_digest(want, g) for g in got):
                raise ValueError("signature mismatch")

        return verify, "regionsync"
    wh = Webhook(secret)
    return (lambda body, headers: wh.verify(body, headers)), "standardwebhooks"


@dataclass
class Receiver:
    """An HTTP receiver on loopback: one path per endpoint, each with its secret."""

    port: int = field(default_factory=free_port)
    secrets: dict[str, str] = field(default_factory=dict)  # path name -> whsec_
    seen: dict[tuple[str, str], int] = field(default_factory=dict)  # (name, webhook-id) -> n
    verified: int = 0
    failed: int = 0
    verifier_name: str = ""

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/{name}"

    async def _hook(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        secret = self.secrets.get(name)
        if secret is None:
            return Response(status_code=404)
        verify, self.verifier_name = _verifier(secret)
        try:
            verify(body, headers)
        except Exception:
            self.failed += 1
            return Response(status_code=400)
        self.verified += 1
        key = (name, headers["webhook-id"])
        self.seen[key] = self.seen.get(key, 0) + 1
        return Response(status_code=204)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Receiver]:
        app = Starlette(routes=[Route("/hooks/{name}", self._hook, methods=["POST"])])
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        try:
            yield self
        finally:
            server.should_exit = True
            await task


@dataclass
class Cluster:
    """Node processes on loopback: region -> HTTP base URL, and their logs."""

    root: Path
    http: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]]

    def log(self, region: str) -> str:
        return (self.root / f"{region}.log").read_text(errors="replace")


def write_configs(
    root: Path,
    regions: tuple[str, ...],
    replication: dict[str, Any] | None = None,
    sections: dict[str, dict[str, Any]] | None = None,
    **delivery: Any,
) -> dict[str, Path]:
    """One node.toml per region, all peered with each other on free loopback ports;
    ``replication`` and ``delivery`` entries go into those sections, ``sections`` are
    further tables (name -> entries, e.g. ``{"operational_webhooks": {"tenant": "ops"}}``)."""
    ports = {r: (free_port(), free_port()) for r in regions}
    paths = {}
    for r in regions:
        lines = [
            f'region = "{r}"',
            f'data_dir = "{root / r}"',
            f'http_listen = "127.0.0.1:{ports[r][0]}"',
            f'grpc_listen = "127.0.0.1:{ports[r][1]}"',
            'log_level = "warning"',
        ]
        for p in regions:
            if p != r:
                lines += [
                    "[[peers]]",
                    f'region = "{p}"',
                    f'address = "127.0.0.1:{ports[p][1]}"',
                    f'http_url = "http://127.0.0.1:{ports[p][0]}"',
                ]
        lines += ["[delivery]", 'allow_private_networks = ["127.0.0.0/8", "::1/128"]']
        lines += [f"{k} = {json.dumps(v)}" for k, v in delivery.items()]
        repl = {"reconnect_max_s": 1.0, **(replication or {})}
        lines += ["[replication]"] + [f"{k} = {json.dumps(v)}" for k, v in repl.items()]
        for name, entries in (sections or {}).items():
            lines += [f"[{name}]"] + [f"{k} = {json.dumps(v)}" for k, v in entries.items()]
        path = root / f"{r}.toml"
        path.write_text("\n".join(lines) + "\n")
        paths[r] = path
    return paths


def spawn(root: Path, region: str, config: Path) -> subprocess.Popen[bytes]:
    """Start ``regionsync serve --config`` for one region, logging to ``<region>.log``."""
    with open(root / f"{region}.log", "ab") as logf:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, "-m", "regionsync.cli", "serve", "--config", str(config)],
            stdout=logf,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


async def wait_ready(client: httpx.AsyncClient, base: str, deadline: float) -> None:
    """Poll ``/readyz`` until 200; raises TimeoutError at ``deadline`` (monotonic s)."""
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if (await client.get(f"{base}/readyz")).status_code == 200:
                return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{base} not ready")


@contextlib.asynccontextmanager
async def start_cluster(
    regions: tuple[str, ...] = REGIONS,
    ready_timeout_s: float = 30.0,
    replication: dict[str, Any] | None = None,
    sections: dict[str, dict[str, Any]] | None = None,
    **delivery: Any,
) -> AsyncIterator[Cluster]:
    """Run one node process per region in a temp dir; stops them and cleans up after."""
    root = Path(tempfile.mkdtemp(prefix="regionsync-"))
    configs = write_configs(root, regions, replication, sections, **delivery)
    http = {}
    for r, path in configs.items():
        listen = next(
            line.split('"')[1] for line in path.read_text().splitlines() if "http_listen" in line
        )
        http[r] = f"http://{listen}"
    cluster = Cluster(root, http, {r: spawn(root, r, configs[r]) for r in regions})
    try:
        async with httpx.AsyncClient(timeout=5.0) as client:
            deadline = time.monotonic() + ready_timeout_s
            for r in regions:
                await wait_ready(client, http[r], deadline)
        yield cluster
    finally:
        stop_nodes(cluster)
        shutil.rmtree(root, ignore_errors=True)


def stop_nodes(cluster: Cluster) -> None:
    """Terminate the cluster's node processes (SIGKILL any still running after 10 s)."""
    for p in cluster.procs.values():
        if p.poll() is None:
            p.terminate()
    for p in cluster.procs.values():
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class PayloadsError(ValueError):
    """A ``--payloads`` directory that cannot be used; the message names the file."""


def load_payloads(directory: Path | None, count: int) -> list[tuple[str, Any]]:
    """``(event_type, payload)`` pairs: from a MANIFEST.json directory (type = ``event`` or
    ``event.action``), or ``count`` generated events.

    MANIFEST.json is an object whose ``files`` is a non-empty list of
    ``{"file": name in the directory, "event": str, "action": str (optional)}``; each file
    holds one JSON payload. Raises PayloadsError naming what is missing or malformed.
    """
    if directory is None:
        return [
            (f"demo.{('created', 'updated', 'deleted')[i % 3]}", {"n": i, "note": "generated"})
            for i in range(count)
        ]
    where = directory / "MANIFEST.json"

    def read_json(path: Path) -> Any:
        try:
            return json.loads(path.read_bytes())
        except OSError as exc:
            raise PayloadsError(f"{path}: {exc.strerror or exc}") from None
        except (ValueError, RecursionError) as exc:
            raise PayloadsError(f"{path}: not JSON: {exc}") from None

    manifest = read_json(where)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, list) or not files:
        raise PayloadsError(f"{where}: 'files' must be a non-empty list")
    out = []
    for i, f in enumerate(files):
        ok = isinstance(f, dict) and all(
            isinstance(f.get(k), str) and f.get(k) for k in ("file", "event")
        ) and isinstance(f.get("action", ""), str | type(None))  # fmt: skip
        name = f.get("file") if ok else None
        if not ok or Path(name).name != name or name in (".", ".."):
            raise PayloadsError(
                f"{where}: files[{i}] must be {{file: a name in the directory, event: str, "
                "action: str (optional)}"
            )
        etype = f["event"] if not f.get("action") else f"{f['event']}.{f['action']}"
        out.append((etype, read_json(directory / name)))
    return out


async def _expect(client: httpx.AsyncClient, method: str, url: str, status: int, **kw: Any) -> Any:
    resp = await client.request(method, url, **kw)
    if resp.status_code != status:
        raise RuntimeError(f"{method} {url}: {resp.status_code} {resp.text}")
    return resp.json() if resp.content else None


async def _until(check: Any, deadline: float, interval: float = 0.05) -> bool:
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(interval)
    return bool(await check())


async def run_demo(
    payloads: Path | None,
    as_json: bool = False,
    events: int = 300,
    timeout_s: float = 120.0,
    items: list[tuple[str, Any]] | None = None,
) -> bool:
    """Run the main job; prints the result and returns True only if everything held.
    ``items`` (from ``load_payloads``) replaces ``payloads``/``events`` when given."""
    if items is None:
        items = load_payloads(payloads, events)
    t0 = time.monotonic()
    receiver = Receiver()
    async with receiver.running(), start_cluster(retry_schedule_s=[0.2, 0.5, 1, 2, 5]) as c:
        http = c.http
        async with httpx.AsyncClient(timeout=10.0) as client:
            subset = await _set_up(client, http, receiver, items)
            t_pub = time.monotonic()
            expected, accepted = await _publish_all(client, http, items, subset)
            publish_s = time.monotonic() - t_pub

            async def done() -> bool:
                if not expected <= set(receiver.seen):
                    return False
                cs = await _clusters(client, http)
                hashes = {cs[r]["registry_hash"] for r in REGIONS}
                vvs = {json.dumps(cs[r]["version_vector"], sort_keys=True) for r in REGIONS}
                return len(hashes) == 1 and len(vvs) == 1

            finished = await _until(done, time.monotonic() + timeout_s, interval=0.1)
            wall_s = time.monotonic() - t_pub
            cs = await _clusters(client, http)
    total_s = time.monotonic() - t0
    hashes = {r: cs[r]["registry_hash"] for r in REGIONS}
    result = {
        "regions": {
            r: {
                "registry_hash": hashes[r],
                "events_accepted": cs[r]["counts"]["events_accepted"],
                "events_held": cs[r]["counts"]["events"],
                "deliveries_succeeded": cs[r]["counts"]["deliveries_delivered"],
            }
            for r in REGIONS
        },
        "events_published": len(items),
        "events_accepted": accepted,
        "deliveries_expected": len(expected),
        "deliveries_received": len(expected & set(receiver.seen)),
        "duplicates": sum(n - 1 for n in receiver.seen.values()),
        "converged": len(set(hashes.values())) == 1,
        "delivered_all": expected <= set(receiver.seen),
        "signatures_verified": receiver.verified,
        "signatures_failed": receiver.failed,
        "verifier": receiver.verifier_name,
        "publish_s": round(publish_s, 3),
        "publish_per_s": round(len(items) / publish_s, 1) if publish_s else None,
        "deliver_and_converge_s": round(wall_s, 3),
        "events_per_s": round(len(items) / wall_s, 1) if wall_s else None,
        "wall_s": round(total_s, 3),
    }
    ok = bool(
        finished
        and result["converged"]
        and result["delivered_all"]
        and accepted == len(items)
        and receiver.failed == 0
        and receiver.verified >= len(expected)
    )
    result["ok"] = ok
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        _print_table(result)
    return ok


async def _set_up(
    client: httpx.AsyncClient, http: dict[str, str], receiver: Receiver,
    items: list[tuple[str, Any]],
) -> list[str]:  # fmt: skip
    """Tenant ``acme`` and its two endpoints, replicated to every region; returns the
    types endpoint "some" subscribes to."""
    us, eu, ap = REGIONS
    await _expect(client, "POST", f"{http[us]}/v1/tenants", 201,
                  json={"id": "acme", "name": "Acme Corp"})  # fmt: skip
    deadline = time.monotonic() + 30

    async def tenant_everywhere() -> bool:
        codes = [(await client.get(f"{http[r]}/v1/tenants/acme")).status_code for r in REGIONS]
        return all(code == 200 for code in codes)

    if not await _until(tenant_everywhere, deadline):
        raise RuntimeError("tenant did not replicate")
    # endpoint "all" gets every type; "some" subscribes to a third of them
    types = sorted({t for t, _ in items})
    subset = types[::3]
    endpoints = {}
    for name, etypes in (("all", []), ("some", subset)):
        ep = await _expect(
            client, "POST", f"{http[eu]}/v1/tenants/acme/endpoints", 201,
            json={"url": receiver.url(name), "event_types": etypes,
                  "description": f"demo endpoint {name}"},
        )  # fmt: skip
        receiver.secrets[name] = ep["secret"]
        endpoints[name] = ep["id"]

    async def endpoints_everywhere() -> bool:
        for r in REGIONS:
            resp = await client.get(f"{http[r]}/v1/tenants/acme/endpoints")
            if len(resp.json().get("items", [])) != len(endpoints):
                return False
        return True

    if not await _until(endpoints_everywhere, time.monotonic() + 30):
        raise RuntimeError("endpoints did not replicate")
    return subset


async def _publish_all(
    client: httpx.AsyncClient, http: dict[str, str], items: list[tuple[str, Any]],
    subset: list[str],
) -> tuple[set[tuple[str, str]], int]:  # fmt: skip
    """Publish ``items`` round-robin over the regions, 16 at a time; returns the
    deliveries expected (endpoint name, event id) and how many events were accepted."""
    expected: set[tuple[str, str]] = set()
    accepted = 0
    sem = asyncio.Semaphore(16)

    async def publish(i: int, etype: str, payload: Any) -> None:
        nonlocal accepted
        region = REGIONS[i % 3]
        async with sem:
            body = await _expect(
                client, "POST", f"{http[region]}/v1/tenants/acme/events", 202,
                json={"event_type": etype, "payload": payload},
                headers={"Idempotency-Key": f"demo-{i}"},
            )  # fmt: skip
        accepted += 1
        expected.add(("all", body["id"]))
        if etype in subset:
            expected.add(("some", body["id"]))

    await asyncio.gather(*(publish(i, t, p) for i, (t, p) in enumerate(items)))
    return expected, accepted


async def _clusters(client: httpx.AsyncClient, http: dict[str, str]) -> dict[str, Any]:
    out = {}
    for r in REGIONS:
        out[r] = (await client.get(f"{http[r]}/v1/cluster")).json()
    return out


def _print_table(result: dict[str, Any]) -> None:
    print(f"{'region':<16} {'registry hash':<18} {'events accepted':>16} {'delivered':>10}")
    for r, row in result["regions"].items():
        print(
            f"{r:<16} {row['registry_hash'][:16]:<18} {row['events_accepted']:>16} "
            f"{row['deliveries_succeeded']:>10}"
        )
    print(
        f"\nevents: {result['events_accepted']}/{result['events_published']} accepted, "
        f"{result['deliveries_received']}/{result['deliveries_expected']} deliveries received "
        f"({result['duplicates']} duplicates), signatures verified by "
        f"{result['verifier'] or 'no library (nothing delivered)'}: "
        f"{result['signatures_verified']} ok, {result['signatures_failed']} bad"
    )
    print(
        f"converged: {result['converged']}  delivered all: {result['delivered_all']}  "
        f"wall {result['wall_s']} s, publish {result['publish_per_s']} ev/s, "
        f"end to end {result['events_per_s']} ev/s"
    )
    print("OK" if result["ok"] else "FAILED")
