"""A registry of a million keys (issue 42): a region joins, restarts and answers while
it does.

Builds region ``m-1``'s SQLite store straight through the Store API (not the HTTP API):
``--tenants`` tenants of ``--per-tenant`` endpoints each (10 registry keys an endpoint,
4 a tenant: 10k x 10 gives 1.04M keys), made with the registry's own mutators, then one
own record and a truncated log, so a region that joins from nothing is behind the log
floor and gets the registry by anti-entropy (a snapshot). Then:

1. ``m-1`` starts over it (peered with ``m-2``, not up yet): time to serving (first 200
   of ``/readyz``), resident memory (``VmRSS``) once serving, ``GET /v1/cluster`` (median
   and max of 10, each after a publish, so the registry changed);
2. ``m-2`` starts from an empty store: time until its ``registry_digest`` equals
   ``m-1``'s (joined, ready); meanwhile a publisher on ``m-1`` (10/s, a type no endpoint
   takes) and ``/healthz`` every 100 ms: their p99 and max; whether ``m-1`` suspects
   ``m-2`` (custody) at any sample; both nodes' memory at the end.

PASS/FAIL against the issue's goals. ``--keep DIR`` builds there (or reuses a built one);
``--no-join`` stops after step 1 (restart and memory only).

    .venv/bin/python bench/million.py [--tenants 10000] [--per-tenant 10] [--no-join]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from crdt import Timestamp
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.core.model import Record, WriteBatch
from regionsync.core.records import encode_body
from regionsync.core.registry import Registry
from regionsync.demo import free_port

REGION, JOINER = "m-1", "m-2"
ACTOR = f"{REGION}:1"
GOALS = {"join_s": 300.0, "publish_p99_ms": 100.0, "healthz_ms": 50.0, "rss_mb": 1024.0,
         "ready_s": 10.0, "cluster_ms": 50.0}  # fmt: skip
FIELDS = {"url": "http://127.0.0.1:9/in", "description": "bench", "max_in_flight": 10,
          "paused": False, "rate_limit_per_s": 10.0}  # fmt: skip


async def build(path: Path, tenants: int, per: int) -> tuple[int, float]:
    """The store; returns (registry keys, seconds)."""
    started = time.monotonic()
    reg = Registry()
    store = SqliteStore(path)
    await store.open(REGION, new_incarnation=1)
    now = int(time.time() * 1000)
    stamp = Timestamp(now, 0)
    pending: dict[str, bytes] = {}
    for t in range(tenants):
        tid = f"t{t:05d}"
        changed = reg.apply(reg.create_tenant(tid, tid, now, ACTOR, stamp))
        for e in range(per):
            deltas = reg.create_endpoint(
                f"ep{t:05d}x{e:02d}", tid, FIELDS, ["order.created"], now, ACTOR, stamp
            )
            changed.update(reg.apply(deltas))
        # the tenant set (one key of every tenant) is written once, at the end
        pending.update((k, v.to_bytes()) for k, v in changed.items() if k != "tenants")
        if t == tenants - 1:
            pending["tenants"] = reg.state("tenants").to_bytes()  # type: ignore[union-attr]
        if len(pending) >= 50_000 or t == tenants - 1:
            await store.commit(WriteBatch(registry=pending))
            pending = {}
    # one own record, then the log truncated: a region joining from nothing is behind
    body = encode_body(registry={"t/t00000/name": reg.state("t/t00000/name")})
    for seq in (1, 2):
        rec = Record(ACTOR, seq, "registry", body, (now, seq))
        await store.commit(WriteBatch(records=[rec], version_vector={ACTOR: seq}))
    await store.truncate_log({ACTOR: 1})
    await store.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return len(reg), time.monotonic() - started


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Proc:
    """``regionsync serve`` of ``region`` over ``data``, peered with ``peer``."""

    def __init__(self, region: str, data: Path, peer: str, grpc: dict[str, int]) -> None:
        self.region, self.port = region, free_port()
        data.mkdir(parents=True, exist_ok=True)
        (data / "node.toml").write_text(
            f'region = "{region}"\ndata_dir = "{data}"\nhttp_listen = "127.0.0.1:{self.port}"\n'
            f'grpc_listen = "127.0.0.1:{grpc[region]}"\nlog_level = "warning"\n'
            f'[[peers]]\nregion = "{peer}"\naddress = "127.0.0.1:{grpc[peer]}"\n'
        )
        self.base = f"http://127.0.0.1:{self.port}"
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "regionsync.cli", "serve", "--config", str(data / "node.toml")]
        )

    def wait_ready(self, limit_s: float = 600) -> float:
        while time.monotonic() - self.started < limit_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.region} exited with {self.proc.returncode}")
            try:
                if httpx.get(self.base + "/readyz", timeout=1).status_code == 200:
                    return time.monotonic() - self.started
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        raise TimeoutError(f"{self.region} not serving within {limit_s} s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def timed(c: httpx.Client, method: str, url: str, **kw: object) -> tuple[float, httpx.Response]:
    t0 = time.perf_counter()
    r = c.request(method, url, **kw)  # type: ignore[arg-type]
    return (time.perf_counter() - t0) * 1000, r


def publish(c: httpx.Client) -> float:
    ms, r = timed(c, "POST", "/v1/tenants/t00000/events",
                  json={"event_type": "bench.ping", "payload": {"n": 1}})  # fmt: skip
    r.raise_for_status()
    return ms


def p99(xs: list[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, int(len(xs) * 0.99))] if xs else float("nan")


def sampler(base: str, stop: threading.Event, out: dict[str, list[float]]) -> None:
    """Publishes at 10/s and /healthz at 10/s on ``base`` until ``stop``."""
    with httpx.Client(base_url=base, timeout=60) as c:
        while not stop.is_set():
            try:
                sample(c, out)
            except httpx.HTTPError as exc:  # counted, not fatal: the figures show it
                out["errors"].append(0.0)
                print(f"  sample failed: {exc!r}", flush=True)
            stop.wait(0.1)


def sample(c: httpx.Client, out: dict[str, list[float]]) -> None:
    """One publish, one /healthz and the regions suspected, into ``out``."""
    out["publish"].append(publish(c))
    out["healthz"].append(timed(c, "GET", "/healthz")[0])
    suspected = c.get("/v1/cluster").json()["custody"].get("suspected", [])
    out["suspected"].append(float(len(suspected)))


def join(m1: Proc, m2: Proc, limit_s: float) -> tuple[float | None, dict[str, list[float]]]:
    """Seconds until m-2's registry_digest equals m-1's (None: not within ``limit_s``)."""
    out: dict[str, list[float]] = {"publish": [], "healthz": [], "suspected": [], "errors": []}
    stop = threading.Event()
    th = threading.Thread(target=sampler, args=(m1.base, stop, out))
    th.start()
    joined = None
    try:
        with httpx.Client(timeout=60) as c:
            while time.monotonic() - m2.started < limit_s:
                time.sleep(1)
                try:  # (a keep-alive connection the server closed: ask again)
                    want = c.get(m1.base + "/v1/cluster").json()["registry_digest"]
                    got = c.get(m2.base + "/v1/cluster").json()["registry_digest"]
                except httpx.HTTPError:
                    continue
                if got == want:
                    joined = time.monotonic() - m2.started
                    break
    finally:
        stop.set()
        th.join()
    return joined, out


def verdict(name: str, value: float | None, goal: float, unit: str) -> bool:
    ok = value is not None and value <= goal
    shown = "never" if value is None else f"{value:.1f} {unit}"
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {shown} (goal <= {goal:g} {unit})")
    return ok


def restart_only(ready_s: float, rss_ready: float, rss_after: float, cluster: list[float]) -> int:
    """``--no-join``: the verdicts of step 1 (memory: once serving and after 10 publishes)."""
    print(f"m-1 RSS after 10 publishes and /v1/cluster reads: {rss_after:.0f} MB")
    ok = all([
        verdict("resident memory per node", max(rss_ready, rss_after), GOALS["rss_mb"], "MB"),
        verdict("restart to serving", ready_s, GOALS["ready_s"], "s"),
        verdict("/v1/cluster median", statistics.median(cluster), GOALS["cluster_ms"], "ms"),
    ])  # fmt: skip
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tenants", type=int, default=10_000)
    ap.add_argument("--per-tenant", type=int, default=10)
    ap.add_argument("--join-limit-s", type=float, default=600)
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--no-join", action="store_true", help="restart and memory only")
    args = ap.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="regionsync-million-"))
    d1, d2 = tmp / REGION, tmp / JOINER
    shutil.rmtree(d2, ignore_errors=True)
    if not (d1 / f"{REGION}.db").exists():
        d1.mkdir(parents=True, exist_ok=True)
        keys, took = asyncio.run(build(d1 / f"{REGION}.db", args.tenants, args.per_tenant))
        print(f"built {keys:,} registry keys ({args.tenants:,} tenants, "
              f"{args.tenants * args.per_tenant:,} endpoints) in {took:.0f} s")  # fmt: skip
    grpc = {REGION: free_port(), JOINER: free_port()}
    m1 = Proc(REGION, d1, JOINER, grpc)
    m2: Proc | None = None
    try:
        ready_s = m1.wait_ready()
        rss1 = rss_mb(m1.proc.pid)
        with httpx.Client(base_url=m1.base, timeout=60) as c:
            cluster = []
            for _ in range(10):
                publish(c)
                cluster.append(timed(c, "GET", "/v1/cluster")[0])
        print(
            f"m-1 serving after {ready_s:.1f} s, RSS {rss1:.0f} MB; /v1/cluster after a "
            f"publish: median {statistics.median(cluster):.1f} ms, max {max(cluster):.1f} ms"
        )
        if args.no_join:
            return restart_only(ready_s, rss1, rss_mb(m1.proc.pid), cluster)
        m2 = Proc(JOINER, d2, REGION, grpc)
        m2.wait_ready()
        joined, during = join(m1, m2, args.join_limit_s)
        rss1, rss2 = rss_mb(m1.proc.pid), rss_mb(m2.proc.pid)
        pub, hz = during["publish"], during["healthz"]
        print(f"join: {'never' if joined is None else f'{joined:.1f} s'}; during it on m-1: "
              f"publish p99 {p99(pub):.1f} ms max {max(pub):.1f} ms ({len(pub)}), /healthz "
              f"p99 {p99(hz):.1f} ms max {max(hz):.1f} ms; RSS m-1 {rss1:.0f} MB, "
              f"m-2 {rss2:.0f} MB; failed samples {len(during['errors'])}")  # fmt: skip
        ok = all([
            verdict("empty region joined", joined, GOALS["join_s"], "s"),
            verdict("publish p99 during the join", p99(pub), GOALS["publish_p99_ms"], "ms"),
            verdict("/healthz max during the join", max(hz), GOALS["healthz_ms"], "ms"),
            verdict("regions suspected during the join", max(during["suspected"]), 0, ""),
            verdict("resident memory per node", max(rss1, rss2), GOALS["rss_mb"], "MB"),
            verdict("restart to serving", ready_s, GOALS["ready_s"], "s"),
            verdict("/v1/cluster median", statistics.median(cluster), GOALS["cluster_ms"], "ms"),
        ])  # fmt: skip
    finally:
        m1.stop()
        if m2 is not None:
            m2.stop()
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
