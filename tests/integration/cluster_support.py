"""Helpers of the three-region integration tests (imported by conftest.py and the tests).

The nodes are real ``regionsync serve`` processes on loopback started by
``regionsync.demo.start_cluster``; the receiver is ``demo.Receiver`` (it verifies every
signature with the official standardwebhooks library) that also records raw requests.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from regionsync.demo import REGIONS, Receiver, free_port

__all__ = [
    "FAILOVER_AFTER_S",
    "FAILOVER_DELIVERY",
    "FAILOVER_REPLICATION",
    "REGIONS",
    "Hit",
    "RecordingReceiver",
    "clusters",
    "converged",
    "eventually",
    "expect",
    "http_base",
    "process_config",
]

# the failover tests' cluster: a dead region's deliveries adopted within seconds
FAILOVER_AFTER_S = 3.0
FAILOVER_REPLICATION = {
    "failover_after_s": FAILOVER_AFTER_S,
    "heartbeat_s": 0.5,
    "custody_interval_s": 0.2,
}
FAILOVER_DELIVERY = {
    "retry_schedule_s": [0.5, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3],
    "probe_initial_s": 0.5,
    "probe_max_s": 1.0,
}


async def eventually(
    check: Callable[[], Awaitable[Any]], timeout_s: float = 30.0, interval: float = 0.05
) -> Any:
    """Poll ``check`` until it returns a truthy value (returned) or fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s (last: {value!r})")
        await asyncio.sleep(interval)


async def expect(client: httpx.AsyncClient, method: str, url: str, status: int, **kw: Any) -> Any:
    """One request that must answer ``status``; returns its JSON body (or None)."""
    resp = await client.request(method, url, **kw)
    assert resp.status_code == status, f"{method} {url}: {resp.status_code} {resp.text}"
    return resp.json() if resp.content else None


@dataclass
class Hit:
    """One request the receiver got: path name, lower-cased headers, raw body, answer."""

    name: str
    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class RecordingReceiver(Receiver):
    """demo.Receiver that also keeps every raw request (``hits``)."""

    hits: list[Hit] = field(default_factory=list)

    async def _hook(self, request: Request) -> Response:
        body = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        resp = await super()._hook(request)
        self.hits.append(Hit(request.path_params["name"], headers, body, resp.status_code))
        return resp

    def ids(self, name: str) -> set[str]:
        """webhook-ids that reached ``name`` with a valid signature."""
        return {wid for (n, wid) in self.seen if n == name}


async def clusters(client: httpx.AsyncClient, http: dict[str, str]) -> dict[str, Any]:
    """``GET /v1/cluster`` of every region."""
    return {r: (await client.get(f"{base}/v1/cluster")).json() for r, base in http.items()}


class Diverged(dict[str, Any]):
    """What ``converged`` answers while regions differ: false, and its repr (which
    ``eventually`` prints at its deadline) shows each region's hash and version vector."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return (
            "Diverged("
            + "; ".join(
                f"{r}: hash {c['registry_hash']}, vv {c['version_vector']}" for r, c in self.items()
            )
            + ")"
        )


async def converged(client: httpx.AsyncClient, http: dict[str, str]) -> dict[str, Any]:
    """Every region's cluster view if registry hashes and version vectors are all equal,
    else a false ``Diverged`` of them."""
    cs = await clusters(client, http)
    hashes = {c["registry_hash"] for c in cs.values()}
    vvs = {json.dumps(c["version_vector"], sort_keys=True) for c in cs.values()}
    return cs if len(hashes) == 1 and len(vvs) == 1 else Diverged(cs)


def process_config(region_config: Path, path: Path) -> tuple[Path, str]:
    """A copy of ``region_config`` at ``path`` for one more process of that region (on a
    shared PostgreSQL store): its own free HTTP port, everything else shared (the gRPC
    address too: only the region's replication holder binds it). Returns the path and
    the process's base URL."""
    port = free_port()
    lines = [
        f'http_listen = "127.0.0.1:{port}"' if line.startswith("http_listen") else line
        for line in region_config.read_text().splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path, f"http://127.0.0.1:{port}"


def http_base(config: Path) -> str:
    """The base URL of the node a config file describes (its ``http_listen``)."""
    line = next(x for x in config.read_text().splitlines() if x.startswith("http_listen"))
    return "http://" + line.split('"')[1]


def stop_processes(procs: list[subprocess.Popen[Any]], root: Path) -> None:
    """Terminate ``procs`` (SIGKILL any still running after 15 s), print the tail of each
    ``*.log`` in ``root`` (pytest shows it when the test failed) and remove ``root``."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
    for log in sorted(root.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        print(f"--- {log.name} (last 40 of {len(lines)} lines)", *lines[-40:], sep="\n")
    shutil.rmtree(root, ignore_errors=True)


async def endpoint_everywhere(
    c: httpx.AsyncClient,
    bases: dict[str, str],
    first: str,
    tenant: str,
    name: str,
    receiver: RecordingReceiver,
) -> None:
    """Tenant ``tenant`` with an endpoint on ``receiver``'s path ``name``, made at
    ``bases[first]`` and awaited at every base (region or process -> HTTP base URL)."""
    await expect(c, "POST", f"{bases[first]}/v1/tenants", 201, json={"id": tenant, "name": name})
    ep = await expect(c, "POST", f"{bases[first]}/v1/tenants/{tenant}/endpoints", 201,
                      json={"url": receiver.url(name)})  # fmt: skip
    receiver.secrets[name] = ep["secret"]

    async def everywhere() -> bool:
        for base in bases.values():
            resp = await c.get(f"{base}/v1/tenants/{tenant}/endpoints/{ep['id']}")
            if resp.status_code != 200:
                return False
        return True

    await eventually(everywhere, timeout_s=30, interval=0.1)


async def all_delivered(acked: set[str], receiver: RecordingReceiver, name: str) -> None:
    """Every event id of ``acked`` reached ``receiver``'s path ``name`` within 60 s; the
    failure says how many did not."""

    async def delivered() -> bool:
        return acked <= receiver.ids(name)

    try:
        await eventually(delivered, timeout_s=60, interval=0.2)
    except AssertionError:
        lost = acked - receiver.ids(name)
        raise AssertionError(f"{len(lost)} of {len(acked)} not delivered") from None
