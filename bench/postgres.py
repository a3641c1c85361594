"""PostgreSQL store benchmark (issue 16): durable publishes/s and deliveries/s of a region
run by 1 and by 2 ``regionsync serve`` processes on one PostgreSQL database, against the
SQLite node, in one run, on this machine.

Starts a throwaway PostgreSQL server with its durable defaults (fsync on,
synchronous_commit on; tests/pgserver.py) and a bare receiver in its own process
(bench/delivery_rate.py's). For each setup: one tenant and one endpoint (rate limit
10,000/s, 64 in flight), then ``--events`` events published over HTTP (closed loop,
``--concurrency`` requests at a time, spread evenly over the processes), each answered
202 only once durable. With 2 processes, the time from the endpoint's 201 on one to the
other serving it is shown too (``registry_visible_ms``; issue 16 asks for 100 ms at
most). Publishes/s = events / publishing time; deliveries/s = events /
(first to last arrival at the receiver); duplicates are webhook-ids that arrived more
than once. Prints each setup, the ratios to the SQLite node and the core count (the load
generator, the receiver, the nodes and PostgreSQL share the cores).

    .venv/bin/python bench/postgres.py [--events 4000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]

from delivery_rate import PAYLOAD, Receiver, collect, free_port, wait_ready  # noqa: E402
from pgserver import PgServer  # noqa: E402


class Region:
    """``processes`` node processes of region ``bench-1`` on ``store`` ("sqlite" or a
    PostgreSQL URL), sharing one gRPC address (only the replication holder binds it)."""

    def __init__(self, store: str, processes: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="regionsync-pgbench-"))
        grpc = free_port()
        self.bases: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        for n in range(processes):
            port = free_port()
            cfg = self.dir / f"node-{n}.toml"
            cfg.write_text(
                f'store = "{store}"\nregion = "bench-1"\ndata_dir = "{self.dir}"\n'
                f'http_listen = "127.0.0.1:{port}"\ngrpc_listen = "127.0.0.1:{grpc}"\n'
                'log_level = "warning"\n[delivery]\nallow_private_networks = ["127.0.0.0/8"]\n'
            )
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "regionsync.cli", "serve", "--config", str(cfg)]
            ))  # fmt: skip
            self.bases.append(f"http://127.0.0.1:{port}")

    async def setup(self, s: aiohttp.ClientSession, rcv: Receiver) -> float | None:
        """Create the tenant and endpoint through the first process; returns how long
        (ms) after its 201 the last other process served the endpoint (None: one process)."""
        for base in self.bases:
            await wait_ready(s, base + "/readyz")
        async with s.post(self.bases[0] + "/v1/tenants", json={"id": "t", "name": "B"}) as r:
            assert r.status == 201, await r.text()
        ep = {"url": rcv.url + "/hook", "event_types": ["*"],
              "rate_limit_per_s": 10_000, "max_in_flight": 64}  # fmt: skip
        async with s.post(self.bases[0] + "/v1/tenants/t/endpoints", json=ep) as r:
            assert r.status == 201, await r.text()
            eid = (await r.json())["id"]
        created = time.perf_counter()
        for base in self.bases[1:]:  # the other processes see the endpoint
            while True:
                async with s.get(f"{base}/v1/tenants/t/endpoints/{eid}") as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(0.002)
        return (time.perf_counter() - created) * 1000 if len(self.bases) > 1 else None

    async def publish(self, s: aiohttp.ClientSession, n: int, concurrency: int) -> list[str]:
        """Publish ``n`` events, event i to process i mod count; returns their ids."""
        ids: list[str] = []
        body = json.dumps({"event_type": "order.created", "payload": PAYLOAD}).encode()
        todo = iter(range(n))

        async def worker() -> None:
            for i in todo:
                url = self.bases[i % len(self.bases)] + "/v1/tenants/t/events"
                async with s.post(url, data=body,
                                  headers={"content-type": "application/json"}) as r:  # fmt: skip
                    assert r.status == 202, await r.text()
                    ids.append((await r.json())["id"])

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return ids

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


async def run(store: str, processes: int, rcv: Receiver, events: int, concurrency: int) -> dict:
    region = Region(store, processes)
    conn = aiohttp.TCPConnector(limit=concurrency + 8)
    try:
        async with aiohttp.ClientSession(connector=conn) as s:
            visible_ms = await region.setup(s, rcv)
            await rcv.arrivals(s, reset=True)
            t0 = time.perf_counter()
            ids = await region.publish(s, events, concurrency)
            publish_s = time.perf_counter() - t0
            got = await collect(s, rcv, ids, timeout_s=300)
    finally:
        region.close()
    return {
        "publishes_per_s": round(events / publish_s, 1),
        "deliveries_per_s": got["rate"],
        "delivered": got["arrived"],
        "duplicates": got["duplicates"],
        "registry_visible_ms": None if visible_ms is None else round(visible_ms, 1),
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=4000)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()
    print(f"PostgreSQL benchmark: {args.events} events per setup, {args.concurrency} "
          f"publishes in flight, {os.cpu_count()} cores (load generator, receiver, nodes "
          "and database share them)")  # fmt: skip
    rcv = Receiver()
    server = PgServer(durable=True)
    server.start()
    results: dict[str, dict] = {}
    try:
        setups = [("SQLite, 1 process", "sqlite", 1, ""), ("PostgreSQL, 1 process", "", 1, "pg1"),
                  ("PostgreSQL, 2 processes", "", 2, "pg2")]  # fmt: skip
        for name, store, n, db in setups:
            url = store or server.create_database(db)
            results[name] = await run(url, n, rcv, args.events, args.concurrency)
            print(f"{name:26s}", json.dumps(results[name]), flush=True)
    finally:
        server.stop()
        rcv.close()
    base = results["SQLite, 1 process"]
    print()
    for name, r in results.items():
        pub = r["publishes_per_s"] / base["publishes_per_s"]
        dlv = r["deliveries_per_s"] / base["deliveries_per_s"] if base["deliveries_per_s"] else 0
        ok = "PASS" if r["delivered"] == args.events else "FAIL"
        print(f"{name:26s} publishes/s {r['publishes_per_s']:8.1f} ({pub:.2f}x SQLite), "
              f"deliveries/s {r['deliveries_per_s']:8.1f} ({dlv:.2f}x SQLite), "
              f"all delivered: {ok}, duplicates {r['duplicates']}")  # fmt: skip
    print(f"on {os.cpu_count()} cores")


if __name__ == "__main__":
    asyncio.run(main())
