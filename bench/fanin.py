"""Fan-in benchmark (issue 17, the GitLab case): one endpoint gets a
burst while a hundred others keep getting their trickle.

In one run, on this machine, two phases, each on a fresh ``regionsync serve`` process
(SQLite ``synchronous=FULL``, no peers, default delivery settings) and the same bare ASGI
receiver in its own process (bench/delivery_rate.py's, counting arrivals per
``webhook-id``):

1. baseline: tenant ``quiet`` has ``--quiet`` (100) endpoints, each subscribed to its own
   event type; every endpoint gets 1 event/s (published round-robin, evenly spaced) for
   ``--seconds``;
2. burst: the same quiet load for the same time, plus tenant ``gitlab`` publishing
   ``--events`` (20,000) events to its one endpoint (``rate_limit_per_s`` 1,000, 64 in
   flight) as fast as 16 connections go, at the start of the phase.

Delivery latency = arrival at the receiver minus the event's ``received_at`` (the 202's,
ms); every figure is computed from what arrived. The burst phase also reports the quiet
figures split by when the event was received: while the burst was being published
(``quiet_ingest_*``) or after (``quiet_after_*``: only its deliveries running), each with
the quiet publishes' round-trip p99 (which holds the wait for a group commit). Goals: the
burst is published within a minute, all of it arrives, none twice; the quiet endpoints'
delivery p99 in phase 2 is within 1.2x of phase 1. ``--profile FILE`` writes a py-spy
table of the node during the burst phase and prints the share of samples in lock,
semaphore and counter code.

    .venv/bin/python bench/fanin.py [--events 20000] [--seconds S] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from delivery_rate import (  # noqa: E402
    Profiler,
    Receiver,
    _stop,
    free_port,
    top_table,
    wait_ready,
)
from ingest import commit_stats  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GOAL_P99 = 1.2
BURST_RATE_LIMIT = 1000  # the burst endpoint's rate_limit_per_s
PAYLOAD = {"object_kind": "push", "ref": "refs/heads/main", "commits": [{"id": "c" * 40}] * 4}
# what counts as lock or counter contention in a profile's frames
CONTENTION = ("asyncio/locks.py", "threading.py:3", "Lock.acquire", "Semaphore", "Condition",
              "PNCounter", "Registry.count", "_before_commit")  # fmt: skip


class FanInNode:
    """``regionsync serve`` with tenants ``quiet`` (``n_quiet`` endpoints) and ``gitlab``."""

    def __init__(self, rcv: Receiver, n_quiet: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="regionsync-fanin-"))
        port = free_port()
        (self.dir / "node.toml").write_text(
            f'region = "bench-1"\ndata_dir = "{self.dir}"\nhttp_listen = "127.0.0.1:{port}"\n'
            f'grpc_listen = "127.0.0.1:{free_port()}"\nlog_level = "warning"\n'
            '[delivery]\nallow_private_networks = ["127.0.0.0/8"]\n'
        )
        self.proc = subprocess_node(self.dir / "node.toml")
        self.base = f"http://127.0.0.1:{port}"
        self.rcv, self.n_quiet = rcv, n_quiet
        self.quiet_publish_ms: dict[str, float] = {}  # event id -> round trip to the 202

    async def setup(self, s: aiohttp.ClientSession) -> None:
        await wait_ready(s, self.base + "/readyz")
        for tenant in ("quiet", "gitlab"):
            await self._post(s, "/v1/tenants", {"id": tenant, "name": tenant})
        await self._post(s, "/v1/tenants/gitlab/endpoints", {
            "url": self.rcv.url + "/burst", "event_types": ["push"],
            "rate_limit_per_s": BURST_RATE_LIMIT, "max_in_flight": 64})  # fmt: skip
        for i in range(self.n_quiet):
            await self._post(s, "/v1/tenants/quiet/endpoints", {
                "url": f"{self.rcv.url}/q{i}",
                "event_types": [f"quiet.e{i}"]})  # fmt: skip

    async def _post(self, s: aiohttp.ClientSession, path: str, body: dict) -> dict:
        async with s.post(self.base + path, json=body) as r:
            assert r.status in (201, 202), await r.text()
            return await r.json()

    async def publish(self, s: aiohttp.ClientSession, tenant: str, event_type: str) -> tuple:
        """One publish: ``(event id, received_at in unix seconds)``."""
        body = await self._post(s, f"/v1/tenants/{tenant}/events",
                                {"event_type": event_type, "payload": PAYLOAD})  # fmt: skip
        return body["id"], datetime.fromisoformat(body["received_at"]).timestamp()

    async def quiet_load(self, s: aiohttp.ClientSession, seconds: float) -> dict[str, float]:
        """Each quiet endpoint 1 event/s for ``seconds``, evenly spaced: id -> received_at."""
        out: dict[str, float] = {}
        interval = 1.0 / self.n_quiet
        t0 = time.monotonic()
        pending: set[asyncio.Task] = set()

        async def one(i: int) -> None:
            started = time.monotonic()
            eid, at = await self.publish(s, "quiet", f"quiet.e{i % self.n_quiet}")
            self.quiet_publish_ms[eid] = (time.monotonic() - started) * 1000
            out[eid] = at

        for i in range(int(seconds * self.n_quiet)):
            await asyncio.sleep(max(0.0, t0 + i * interval - time.monotonic()))
            task = asyncio.create_task(one(i))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)
        return out

    async def burst(self, s: aiohttp.ClientSession, n: int, connections: int = 16) -> tuple:
        """``n`` publishes to ``gitlab`` as fast as ``connections`` go: (ids, seconds)."""
        ids: list[str] = []
        todo = iter(range(n))
        t0 = time.monotonic()

        async def worker() -> None:
            for _ in todo:
                eid, _at = await self.publish(s, "gitlab", "push")
                ids.append(eid)

        await asyncio.gather(*(worker() for _ in range(connections)))
        return ids, time.monotonic() - t0

    def close(self) -> None:
        _stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def subprocess_node(config: Path):  # noqa: ANN201 - a subprocess.Popen
    import subprocess

    return subprocess.Popen([sys.executable, "-m", "regionsync.cli", "serve", "--config",
                             str(config)])  # fmt: skip


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 1000) - 1]


def latencies_ms(published: dict[str, float], arrivals: list) -> list[float]:
    """Arrival minus received_at (ms) of the first arrival of each published id."""
    first: dict[str, float] = {}
    for wid, t in arrivals:
        if wid in published and wid not in first:
            first[wid] = t
    return sorted((t - published[w]) * 1000 for w, t in first.items())


async def phase(rcv: Receiver, args: argparse.Namespace, burst: bool) -> dict:
    node = FanInNode(rcv, args.quiet)
    prof = out_prof = None
    try:
        conn = aiohttp.TCPConnector(limit=256)
        async with aiohttp.ClientSession(connector=conn) as s:
            await node.setup(s)
            await rcv.arrivals(s, reset=True)
            if burst and args.profile:
                prof = ContentionProfiler(node.proc.pid, args.profile)
            quiet_task = asyncio.create_task(node.quiet_load(s, args.seconds))
            burst_ids: list[str] = []
            published_s = 0.0
            window = (0.0, 0.0)  # unix seconds while the burst was being published
            if burst:
                started = time.time()
                burst_ids, published_s = await node.burst(s, args.events)
                window = (started, time.time())
            quiet = await quiet_task
            want = set(quiet) | set(burst_ids)
            arrivals = await rcv.wait_for(s, want, 60 + args.events / BURST_RATE_LIMIT, 0.5)
            commits = commit_stats(node.base)
            if prof:
                prof.stop()
                out_prof = prof
                prof = None
            await rcv.arrivals(s, reset=True)
    finally:
        if prof:
            prof.stop()
        node.close()
    seen = Counter(w for w, _ in arrivals)
    lat = latencies_ms(quiet, arrivals)
    burst_times = sorted(t for w, t in arrivals if w in set(burst_ids))
    out = {
        "quiet_published": len(quiet),
        "quiet_arrived": len(lat),
        "quiet_p50_ms": round(pct(lat, 0.5), 1),
        "quiet_p99_ms": round(pct(lat, 0.99), 1),
        "duplicates": sum(c - 1 for w, c in seen.items() if c > 1),
        # where a quiet delivery's time goes: its publish waits for a group commit
        "quiet_publish_p50_ms": round(pct(sorted(node.quiet_publish_ms.values()), 0.5), 1),
        "mean_commit_ms": commits["mean_commit_ms"],
        "commits": commits["commits"],
    }
    if burst:
        span = burst_times[-1] - burst_times[0] if len(burst_times) > 1 else 0.0
        # quiet events received while the burst was being published, and after it (while
        # only its deliveries ran): delivery latency, and the publish's round trip, which
        # holds the wait for its group commit
        during = {w: t for w, t in quiet.items() if window[0] <= t <= window[1]}
        after = {w: t for w, t in quiet.items() if t > window[1]}
        for name, part in (("ingest", during), ("after", after)):
            part_lat = latencies_ms(part, arrivals)
            trips = sorted(node.quiet_publish_ms[w] for w in part)
            out[f"quiet_{name}_p50_ms"] = round(pct(part_lat, 0.5), 1)
            out[f"quiet_{name}_p99_ms"] = round(pct(part_lat, 0.99), 1)
            out[f"quiet_{name}_publish_p99_ms"] = round(pct(trips, 0.99), 1)
        out.update({
            "burst_published": len(burst_ids),
            "burst_publish_s": round(published_s, 1),
            "burst_arrived": len(set(burst_ids) & set(seen)),
            "burst_delivery_rate": round(len(burst_times) / span, 1) if span else 0.0,
        })  # fmt: skip
    if out_prof is not None:
        out["contention_pct"] = round(out_prof.share, 2)
        out["contention_frames"] = [f"{pct:.2f}% {f}" for pct, f in out_prof.frames]
    return out


class ContentionProfiler(Profiler):
    """bench/delivery_rate.py's py-spy recorder that also counts, before dropping the raw
    stacks, the samples whose stack holds a lock, semaphore or counter frame."""

    def stop(self) -> None:
        self.proc.send_signal(2)  # SIGINT: py-spy writes its output and exits
        self.proc.wait(timeout=30)
        raw = self.raw.read_text()
        self.out.write_text(top_table(raw))
        self.raw.unlink()
        n, hits, frames = 0, 0, Counter()
        for line in raw.splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n += int(count)
            named = {f for f in stack.split(";") if any(c in f for c in CONTENTION)}
            if named:
                hits += int(count)
                frames.update({f: int(count) for f in named})
        self.share = 100 * hits / n if n else 0.0
        self.frames = [(100 * c / n, f) for f, c in frames.most_common(8)]


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000, help="burst size")
    ap.add_argument("--quiet", type=int, default=100, help="quiet endpoints, 1 event/s each")
    ap.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="quiet load per phase (default: the burst's delivery time + 25%% + 5)",
    )
    ap.add_argument("--profile", type=Path, help="py-spy top table of the burst phase")
    args = ap.parse_args()
    if args.seconds is None:
        args.seconds = round(args.events / BURST_RATE_LIMIT * 1.25 + 5, 1)
    print(f"bench/fanin.py: {os.cpu_count()} cores, burst {args.events} events to one endpoint "
          f"(limit {BURST_RATE_LIMIT}/s), {args.quiet} quiet endpoints at 1 event/s, "
          f"{args.seconds} s per phase")  # fmt: skip
    rcv = Receiver()
    try:
        async with aiohttp.ClientSession() as s:
            await wait_ready(s, rcv.url + "/stats")
        base = await phase(rcv, args, burst=False)
        print("  without the burst:", json.dumps(base))
        loaded = await phase(rcv, args, burst=True)
        shown = {k: v for k, v in loaded.items() if k != "contention_frames"}
        print("  with the burst:   ", json.dumps(shown))
    finally:
        rcv.close()
    ratio = loaded["quiet_p99_ms"] / base["quiet_p99_ms"] if base["quiet_p99_ms"] else 0.0
    complete = (loaded["burst_arrived"] == args.events and loaded["duplicates"] == 0
                and loaded["quiet_arrived"] == loaded["quiet_published"])  # fmt: skip
    in_time = loaded["burst_publish_s"] <= 60
    print(f"  burst published in {loaded['burst_publish_s']} s (goal <= 60 s): "
          f"{'PASS' if in_time else 'FAIL'}")  # fmt: skip
    print(f"  burst delivered: {loaded['burst_arrived']}/{args.events}, "
          f"{loaded['duplicates']} duplicates, {loaded['burst_delivery_rate']}/s: "
          f"{'PASS' if complete else 'FAIL'}")  # fmt: skip
    print(f"  quiet delivery p99: {loaded['quiet_p99_ms']} ms with the burst vs "
          f"{base['quiet_p99_ms']} ms without -> {ratio:.2f}x (goal <= {GOAL_P99}x): "
          f"{'PASS' if ratio <= GOAL_P99 else 'FAIL'}")  # fmt: skip
    if args.profile and "contention_pct" in loaded:
        print(
            f"  profile {args.profile}: {loaded['contention_pct']}% of the node's samples "
            "have a lock, semaphore or counter frame on the stack; the most sampled:"
        )
        for row in loaded["contention_frames"]:
            print("    " + row)
    return 0 if complete and in_time and ratio <= GOAL_P99 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
