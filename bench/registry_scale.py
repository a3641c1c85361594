"""Registry changes against the size of the registry (issue 17: structures that grow with
the data must not be rebuilt whole).

One ``regionsync serve`` (SQLite ``synchronous=FULL``, no peers) is filled through the API
with tenants that have one endpoint each. At ``--small`` tenants (the baseline, same run)
and again at ``--tenants``, it measures, one request at a time:

- creating a tenant, and creating an endpoint in a tenant of its own (median, p90, ms);
- the longest publish of another tenant (a paced 100/s publisher) while those registry
  changes run: what a change costs every tenant, as the node has one event loop;
- ``GET /v1/cluster`` right after a publish (median of 10): its ``registry_hash`` covers
  every registry key, and a publish's usage counter makes the cached one stale;
- the first page of ``GET /v1/tenants`` (50 tenants; median of 10).

Prints each figure at both sizes and its ratio (large / small). A change that costs
O(registry) shows a ratio that grows with ``--tenants``; one that costs O(what changed)
stays near 1x. ``--pythonpath DIR`` runs another checkout's node (its ``src``) in the same
run, e.g. ``git worktree add /tmp/before <commit>`` then ``--pythonpath /tmp/before/src``.

    .venv/bin/python bench/registry_scale.py [--tenants 2000] [--small 100] [--pythonpath DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from delivery_rate import _stop, free_port, wait_ready  # noqa: E402

SAMPLES = 30  # registry changes measured at each size
# endpoints on a closed loopback port; the publisher's type matches none (no deliveries)
FIELDS = {"url": "http://127.0.0.1:9/in", "event_types": ["order.created"]}


class Node:
    """``regionsync serve`` in its own process, optionally from another checkout."""

    def __init__(self, pythonpath: str | None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="regionsync-regscale-"))
        port = free_port()
        (self.dir / "node.toml").write_text(
            f'region = "bench-1"\ndata_dir = "{self.dir}"\nhttp_listen = "127.0.0.1:{port}"\n'
            f'grpc_listen = "127.0.0.1:{free_port()}"\nlog_level = "warning"\n'
            '[delivery]\nallow_private_networks = ["127.0.0.0/8"]\n'
        )
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "regionsync.cli", "serve", "--config",
             str(self.dir / "node.toml")], env=env,
        )  # fmt: skip
        self.base = f"http://127.0.0.1:{port}"
        self.tenants = 0

    async def post(self, s: aiohttp.ClientSession, path: str, body: dict) -> float:
        """One POST; its round trip in ms (asserts a 2xx)."""
        started = time.perf_counter()
        async with s.post(self.base + path, json=body) as r:
            assert r.status < 300, (path, r.status, await r.text())
            await r.read()
        return (time.perf_counter() - started) * 1000

    async def tenant(self, s: aiohttp.ClientSession, with_endpoint: bool = True) -> float:
        """Create the next tenant (and its endpoint); the tenant create's ms."""
        tid = f"t{self.tenants}"
        self.tenants += 1
        ms = await self.post(s, "/v1/tenants", {"id": tid, "name": tid})
        if with_endpoint:
            await self.post(s, f"/v1/tenants/{tid}/endpoints", FIELDS)
        return ms

    async def fill(self, s: aiohttp.ClientSession, n: int) -> None:
        """Tenants (with an endpoint each) up to ``n``, 8 requests at a time."""
        sem = asyncio.Semaphore(8)

        async def one() -> None:
            async with sem:
                await self.tenant(s)

        await asyncio.gather(*(one() for _ in range(n - self.tenants)))

    def close(self) -> None:
        _stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


async def measure(node: Node, s: aiohttp.ClientSession) -> dict[str, list[float]]:
    """SAMPLES tenant creates and endpoint creates, one at a time, while tenant ``t0``
    publishes at 100/s; returns ms lists per figure."""
    out: dict[str, list[float]] = {"tenant": [], "endpoint": [], "publish": []}
    done = asyncio.Event()

    async def publisher() -> None:
        body = {"event_type": "audit.noop", "payload": {"id": 1}}
        while not done.is_set():
            out["publish"].append(await node.post(s, "/v1/tenants/t0/events", body))
            await asyncio.sleep(0.01)

    task = asyncio.create_task(publisher())
    await asyncio.sleep(0.2)
    for _ in range(SAMPLES):
        out["tenant"].append(await node.tenant(s, with_endpoint=False))
        tid = f"t{node.tenants - 1}"
        out["endpoint"].append(await node.post(s, f"/v1/tenants/{tid}/endpoints", FIELDS))
    done.set()
    await task
    out["cluster"], out["page"] = [], []
    for _ in range(10):  # a publish moves a usage counter: the registry hash is stale
        await node.post(s, "/v1/tenants/t0/events", {"event_type": "audit.noop", "payload": {}})
        started = time.perf_counter()
        async with s.get(node.base + "/v1/cluster") as r:
            assert r.status == 200, await r.text()
            await r.read()
        out["cluster"].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        async with s.get(node.base + "/v1/tenants?limit=50") as r:
            assert r.status == 200, await r.text()
            await r.read()
        out["page"].append((time.perf_counter() - started) * 1000)
    return out


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[8]


async def run(args: argparse.Namespace, pythonpath: str | None, label: str) -> None:
    node = Node(pythonpath)
    try:
        async with aiohttp.ClientSession() as s:
            await wait_ready(s, node.base + "/readyz")
            figures = {}
            for size in (args.small, args.tenants):
                started = time.perf_counter()
                await node.fill(s, size)
                print(f"  [{label}] {size} tenants with an endpoint each "
                      f"(filled in {time.perf_counter() - started:.1f} s)", flush=True)  # fmt: skip
                figures[size] = await measure(node, s)
        small, large = figures[args.small], figures[args.tenants]
        for name, what in (("tenant", "tenant create"), ("endpoint", "endpoint create"),
                           ("cluster", "GET /v1/cluster after a publish"),
                           ("page", "GET /v1/tenants?limit=50")):  # fmt: skip
            a, b = statistics.median(small[name]), statistics.median(large[name])
            print(f"{label}: {what} median {a:.1f} ms at {args.small}, {b:.1f} ms at "
                  f"{args.tenants} tenants: {b / a:.2f}x (p90 {p90(small[name]):.1f} / "
                  f"{p90(large[name]):.1f} ms)")  # fmt: skip
        a, b = max(small["publish"]), max(large["publish"])
        print(f"{label}: longest publish of another tenant meanwhile {a:.1f} ms at "
              f"{args.small}, {b:.1f} ms at {args.tenants} tenants: {b / a:.2f}x")  # fmt: skip
    finally:
        node.close()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tenants", type=int, default=2000, help="the large registry")
    ap.add_argument("--small", type=int, default=100, help="the baseline registry")
    ap.add_argument("--pythonpath", help="another checkout's src, run first for comparison")
    args = ap.parse_args()
    if not 1 <= args.small < args.tenants:
        ap.error("need 1 <= --small < --tenants")
    print(f"registry_scale: {SAMPLES} tenant and endpoint creates at {args.small} and "
          f"{args.tenants} tenants (one endpoint each); a 100/s publisher meanwhile")  # fmt: skip
    if args.pythonpath:
        await run(args, args.pythonpath, "other")
    await run(args, None, "this")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
