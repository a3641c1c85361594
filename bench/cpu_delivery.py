"""bench/cpu.py's delivery, scale-out and fan-in rows (issue 44); run by bench/cpu.py.

- **delivery**: one receiver (bench/cpumeter.py's ``RECEIVER_APP`` under uvicorn, its own
  process, not measured). Baseline: an aiohttp ``ClientSession`` loop in its own process
  (``python bench/cpu_delivery.py client URL RATE COUNT``) sending the bytes and headers
  a delivery carries (the Standard Webhooks envelope of the GitHub payload), one request
  started every 1/RATE s (open loop), its CPU read from its own /proc around the loop. The
  node (SQLite, one endpoint, ``payload_format`` standard-webhooks so the receiver can
  time each delivery from the event's acceptance):
  1. ingest share: publishes paced at RATE to a tenant without endpoints: CPU per publish;
  2. replay: ``RATE x seconds`` events published while the endpoint is paused (skipped),
     then ``replay-missing`` with the endpoint's ``rate_limit_per_s`` = RATE (the
     schedule); CPU from the job's start to the last arrival, per delivery;
  3. live: publishes paced at RATE for ``seconds``, delivered as they come (limit
     10,000/s); CPU per event from the first publish to the last arrival, minus the
     ingest share of step 1 = CPU per delivery. The p99 is the delivery lag (arrival
     minus the event's acceptance).
- **scale-out**: a durable PostgreSQL server (tests/pgserver.py), region ``bench-1`` run
  by N processes (bench/postgres.py's ``Region``), publishes at RATE spread evenly over
  them (one loadgen per process), delivered to one endpoint. CPU of the nodes and of
  PostgreSQL (postmaster and backends) per event, from the first publish to the last
  arrival.
- **fan-in**: bench/fanin.py's two phases as they are (its receiver is this one); the
  ratio of the quiet endpoints' delivery p99 with the burst to without.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

sys.path[:0] = [
    str(Path(__file__).resolve().parent),
    str(Path(__file__).resolve().parents[1] / "tests"),
]

from cpu import BODY, loadgen, loadgen_result, median_run, node_config, paced, row  # noqa: E402
from cpumeter import Meter, pct, per_1000, tree_cpu  # noqa: E402
from delivery_rate import HEADERS, Profiler, Receiver, _stop, wait_ready  # noqa: E402

# what a delivery of BODY carries: the Standard Webhooks envelope of its payload
ENVELOPE = (b'{"type":"team.created","timestamp":"2026-01-01T00:00:00.000Z","data":'
            + BODY[BODY.index(b'"payload":') + 10 : -1] + b"}")  # fmt: skip


async def client_loop(url: str, rate: float, count: int) -> dict:
    """The baseline: ``count`` POSTs started every 1/``rate`` s; CPU of this process."""
    lat: list[float] = []
    ok = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256)) as s:

        async def one(i: int, due: float) -> None:
            nonlocal ok
            h = {**HEADERS, "webhook-id": f"msg_{i}"}
            async with s.post(url, data=ENVELOPE, headers=h) as r:
                await r.read()
                ok += r.status == 204
            lat.append((time.perf_counter() - due) * 1000)

        async def run(n: int, first: int) -> float:
            t0 = time.perf_counter()
            tasks = []
            for i in range(n):
                due = t0 + i / rate
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                tasks.append(asyncio.create_task(one(first + i, due)))
            await asyncio.gather(*tasks)
            return time.perf_counter() - t0

        await run(int(rate), 10**9)  # a second of warm-up
        lat.clear()
        ok = 0
        import os

        cpu0 = tree_cpu(os.getpid())
        wall = await run(count, 0)
        cpu = tree_cpu(os.getpid()) - cpu0
    return {"cpu_ms": per_1000(cpu, ok), "rps": round(ok / wall, 1),
            "p99_ms": round(pct(lat, 0.99), 2), "requests": ok}  # fmt: skip


def baseline(rcv: Receiver, rate: float, count: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "client", rcv.url + "/hook", str(rate), str(count)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


class Node:
    """``regionsync serve`` (SQLite) with tenant ``t`` (one endpoint to the receiver) and
    tenant ``solo`` (no endpoints)."""

    def __init__(self, rcv: Receiver) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="regionsync-cpu-dlv-"))
        config, self.base = node_config(self.tmp)
        self.proc = subprocess.Popen([sys.executable, "-m", "regionsync.cli", "serve",
                                      "--config", str(config)])  # fmt: skip
        self.rcv = rcv
        self.endpoint = ""

    async def setup(self, s: aiohttp.ClientSession, rate: float) -> None:
        await wait_ready(s, self.base + "/readyz")
        for t in ("t", "solo"):
            await self.call(s, "post", "/v1/tenants", {"id": t, "name": t})
        ep = await self.call(s, "post", "/v1/tenants/t/endpoints", {
            "url": self.rcv.url + "/hook", "event_types": ["*"], "rate_limit_per_s": rate,
            "max_in_flight": 64, "payload_format": "standard-webhooks"})  # fmt: skip
        self.endpoint = f"/v1/tenants/t/endpoints/{ep['id']}"

    async def call(self, s: aiohttp.ClientSession, method: str, path: str, body: dict) -> dict:
        async with s.request(method, self.base + path, json=body) as r:
            assert r.status in (200, 201, 202), await r.text()
            return await r.json()

    async def counts(self, s: aiohttp.ClientSession) -> dict:
        async with s.get(self.base + "/v1/cluster") as r:
            return (await r.json())["counts"]

    def close(self) -> None:
        _stop(self.proc)
        shutil.rmtree(self.tmp, ignore_errors=True)


async def arrived(s: aiohttp.ClientSession, rcv: Receiver, want: int, timeout_s: float) -> dict:
    """Wait for ``want`` arrivals (or the timeout): distinct ids, duplicates, the rate
    between the first and the last arrival and the delivery lags' p99."""
    deadline = time.monotonic() + timeout_s
    while await rcv.count(s) < want and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    arrivals = await rcv.arrivals(s)
    async with s.get(rcv.url + "/lags") as r:
        lags = await r.json()
    seen = Counter(w for w, _ in arrivals)
    times = sorted(t for _, t in arrivals)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return {"distinct": len(seen), "duplicates": sum(c - 1 for c in seen.values()),
            "rps": round(len(seen) / span, 1) if span else 0.0,
            "p99_ms": round(pct(lags, 0.99), 1), "complete": len(seen) == want}  # fmt: skip


async def replay(s: aiohttp.ClientSession, node: Node, rate: float, seconds: float,
                 profile: Path | None) -> dict:  # fmt: skip
    await node.call(s, "patch", node.endpoint, {"paused": True, "rate_limit_per_s": rate})
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    got = await asyncio.to_thread(paced, node.base + "/v1/tenants/t/events", 2 * rate, seconds / 2)
    n = got["statuses"].get("202", 0)
    deadline = time.monotonic() + 120
    while (await node.counts(s)).get("deliveries_skipped", 0) < n:
        assert time.monotonic() < deadline, "deliveries were not all skipped"
        await asyncio.sleep(0.2)
    await node.call(s, "patch", node.endpoint, {"paused": False})
    await node.rcv.arrivals(s, reset=True)
    prof = Profiler(node.proc.pid, profile) if profile else None
    meter = Meter([node.proc.pid]).start()
    await node.call(s, "post", node.endpoint + "/replay-missing", {"since": since})
    out = await arrived(s, node.rcv, n, 60 + 3 * n / rate)
    cpu = meter.stop()
    if prof:
        prof.stop()
    out["p99_ms"] = "n/a"  # a replay's lag is the backlog's age, by design
    return {**out, "cpu_ms": per_1000(cpu, out["distinct"]), "events": n}


async def live(s: aiohttp.ClientSession, node: Node, rate: float, seconds: float) -> dict:
    await node.call(s, "patch", node.endpoint, {"rate_limit_per_s": 10_000})
    await node.rcv.arrivals(s, reset=True)
    meter = Meter([node.proc.pid]).start()
    got = await asyncio.to_thread(paced, node.base + "/v1/tenants/t/events", rate, seconds)
    n = got["statuses"].get("202", 0)
    out = await arrived(s, node.rcv, n, 60)
    cpu = meter.stop()
    return {**out, "cpu_ms_event": per_1000(cpu, n), "events": n}


async def delivery_once(rcv: Receiver, args: argparse.Namespace, profile: Path | None) -> dict:
    node = Node(rcv)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
            await node.setup(s, args.rate)
            await asyncio.to_thread(paced, node.base + "/v1/tenants/solo/events", args.rate, 1.0)
            meter = Meter([node.proc.pid]).start()
            got = await asyncio.to_thread(
                paced, node.base + "/v1/tenants/solo/events", args.rate, args.seconds
            )
            ingest = per_1000(meter.stop(), got["statuses"].get("202", 0))
            rep = await replay(s, node, args.rate, args.seconds, profile)
            liv = await live(s, node, args.rate, args.seconds)
    finally:
        node.close()
    liv["cpu_ms"] = liv["cpu_ms_event"] - ingest
    liv["ingest_cpu_ms"] = ingest
    return {"replay": rep, "live": liv}


async def delivery_rows(args: argparse.Namespace) -> list[dict]:
    rcv = Receiver()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
            await wait_ready(s, rcv.url + "/count")
            bases, nodes = [], []
            for _ in range(args.runs):
                bases.append(
                    await asyncio.to_thread(baseline, rcv, args.rate, int(args.rate * args.seconds))
                )
                await rcv.arrivals(s, reset=True)
                print("  aiohttp loop:", json.dumps(bases[-1]), flush=True)
                nodes.append(await delivery_once(rcv, args, None))
                print("  node:", json.dumps(nodes[-1]), flush=True)
            if args.profile:
                await delivery_once(rcv, args, args.profile / "cpu_replay.txt")
    finally:
        rcv.close()
    base = median_run(bases, "cpu_ms")
    rows = []
    for phase in ("replay", "live"):
        node = median_run([n[phase] for n in nodes], "cpu_ms")
        extra = (f"({node['distinct']}/{node['events']} delivered, {node['duplicates']} "
                 "duplicates" + (f"; per event {node['cpu_ms_event']:.3f} incl. ingest "
                                 f"{node['ingest_cpu_ms']:.3f}" if phase == "live" else "")
                 + ")")  # fmt: skip
        rows.append(row(f"delivery, {phase}", "aiohttp loop, same receiver", node, base,
                        "delivery", "delivery", extra))  # fmt: skip
    return rows


async def scale_once(server, rcv: Receiver, n: int, rate: float, seconds: float,
                     run: int, profile: Path | None = None) -> dict:  # fmt: skip
    from postgres import Region

    region = Region(server.create_database(f"scale_{n}_{run}"), n)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
            await region.setup(s, rcv)
            for base in region.bases:  # warm-up: every process publishes and delivers
                await asyncio.to_thread(paced, base + "/v1/tenants/t/events", rate / n, 1.0)
            await asyncio.sleep(1.0)
            await rcv.arrivals(s, reset=True)
            nodes = Meter([p.pid for p in region.procs]).start()
            pg = Meter([server._proc.pid]).start()
            prof = Profiler(region.procs[-1].pid, profile) if profile else None
            gens = [loadgen(b + "/v1/tenants/t/events", rate / n, seconds) for b in region.bases]
            got = [await asyncio.to_thread(loadgen_result, g) for g in gens]
            events = sum(g["statuses"].get("202", 0) for g in got)
            out = await arrived(s, rcv, events, 120)
            node_cpu, pg_cpu = nodes.stop(), pg.stop()
            if prof:
                prof.stop()
    finally:
        region.close()
    offered = round(rate / n) * n * seconds
    out["p99_ms"] = max(g["p99_ms"] for g in got)  # publish round trip (raw payloads)
    out["kept_up"] = events >= 0.95 * offered
    return {**out, "events": events, "cpu_ms": per_1000(node_cpu + pg_cpu, events),
            "nodes_cpu_ms": per_1000(node_cpu, events), "pg_cpu_ms": per_1000(pg_cpu, events),
            "offered": offered}  # fmt: skip


async def scaleout_rows(args: argparse.Namespace) -> list[dict]:
    from pgserver import PgServer

    rate = args.scale_rate or args.rate
    rcv = Receiver()
    server = PgServer(durable=True)
    server.start()
    got: dict[int, dict] = {}
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
            await wait_ready(s, rcv.url + "/count")
        for n in args.processes:
            runs = []
            for i in range(args.runs):
                prof = args.profile / f"cpu_scale_{n}.txt" if args.profile and i == 0 else None
                runs.append(await scale_once(server, rcv, n, rate, args.seconds, i, prof))
                print(f"  PostgreSQL region, {n} processes:", json.dumps(runs[-1]), flush=True)
            got[n] = median_run(runs, "cpu_ms")
    finally:
        server.stop()
        rcv.close()
    one, rows = got[min(got)], []
    for n in sorted(got)[1:]:
        r = got[n]
        extra = (
            f"(nodes {r['nodes_cpu_ms']:.3f} vs {one['nodes_cpu_ms']:.3f}, PostgreSQL "
            f"{r['pg_cpu_ms']:.3f} vs {one['pg_cpu_ms']:.3f}; {r['distinct']}/"
            f"{r['events']} delivered, {r['duplicates']} duplicates; p99 = publish round trip"
            + ("" if r["kept_up"] and one["kept_up"] else "; DID NOT KEEP UP")
            + ")"
        )
        rows.append(row(f"scale-out, PostgreSQL region, N={n} vs N={min(got)}, publish + "
                        f"deliver at {rate:.0f}/s", f"same region, N={min(got)}", r, one,
                        "scaleout", "event", extra))  # fmt: skip
    return rows


async def fanin_rows(args: argparse.Namespace) -> list[dict]:
    import fanin

    ns = argparse.Namespace(
        events=args.fanin_events,
        quiet=100,
        profile=None,
        seconds=round(args.fanin_events / fanin.BURST_RATE_LIMIT * 1.25 + 5, 1),
    )
    rcv = Receiver()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
            await wait_ready(s, rcv.url + "/count")
        base = await fanin.phase(rcv, ns, burst=False)
        print("  fan-in without the burst:", json.dumps(base), flush=True)
        loaded = await fanin.phase(rcv, ns, burst=True)
        print("  fan-in with the burst:", json.dumps(loaded), flush=True)
    finally:
        rcv.close()
    ratio = loaded["quiet_p99_ms"] / base["quiet_p99_ms"] if base["quiet_p99_ms"] else 0.0
    complete = (loaded["burst_arrived"] == args.fanin_events and loaded["duplicates"] == 0
                and loaded["quiet_arrived"] == loaded["quiet_published"])  # fmt: skip
    return [{"name": f"fan-in: quiet delivery p99 during a {args.fanin_events}-event burst",
             "base_name": "without the burst", "unit": "p99", "goal": 1.5, "ratio": ratio,
             "pass": ratio <= 1.5 and complete, "latency": True,
             "node": {"p99_ms": loaded["quiet_p99_ms"], "rps": loaded["burst_delivery_rate"]},
             "base": {"p99_ms": base["quiet_p99_ms"], "rps": 0.0},
             "extra": (f"(burst {loaded['burst_arrived']}/{args.fanin_events} delivered, "
                       f"{loaded['duplicates']} duplicates, quiet {loaded['quiet_arrived']}/"
                       f"{loaded['quiet_published']})")}]  # fmt: skip


if __name__ == "__main__" and sys.argv[1:2] == ["client"]:
    print(json.dumps(asyncio.run(client_loop(sys.argv[2], float(sys.argv[3]), int(sys.argv[4])))))
