"""Ingest benchmark: durable publishes/s and latency of one node vs a bare handler.

In one run, on this machine: a bare Starlette app under the same uvicorn settings that
parses the JSON body and answers 202 without storing (the baseline), the same handler
answering only after one fsync'd SQLite group commit of the body (the durable floor),
then a regionsync node (SQLite, synchronous=FULL, group commit, no peers) answering 202
after the event is durable. All three are driven by bench/loadgen.py in its own process
with the same connections. Prints each result, the node's CPU use during its closed loop
(seconds of CPU per second: 1.0 is one core busy), the throughput ratio (goal >= 0.5x),
the floor's ratio to the bare handler and the node's to the floor, and the p99 paced at
half of its own closed-loop rate of the same run of the node (goal <= 10 ms) and of the
floor (for reference: the same goal for a handler that only commits).

    .venv/bin/python bench/ingest.py [--seconds 5] [--connections 64 256]
                                     [--payload small|github] [--pin] [--idempotency-keys]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from regionsync.demo import free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from delivery_rate import Profiler, cpu_seconds  # noqa: E402

GITHUB = ROOT / "bench/data/github-team.created.json"  # 2,099 bytes (bench/data/NOTICE)
BODIES = {
    # a synthetic 328-byte body (issue 5's runs and issue 17's tables up to 2026-12-01)
    "small": json.dumps(
        {"event_type": "order.created", "payload": {"id": "ord_1", "items": ["x"] * 50, "n": 1}}
    ).encode(),
    # issue 17's method: a real 2 KB GitHub payload
    "github": b'{"event_type":"team.created","payload":' + GITHUB.read_bytes() + b"}",
}
BODY = BODIES["small"]
UNIQUE_KEYS = False  # --idempotency-keys: loadgen sends a new Idempotency-Key per request
# --pin (issue 17's method): the load generator on core 0, the server on core 1
CLIENT_CPUS: list[str] = []
SERVER_CPUS: list[str] = []

BARE_APP = """
import json
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def publish(request):
    body = json.loads(await request.body())
    return JSONResponse({"id": "evt_x", "event_type": body["event_type"]}, status_code=202)

app = Starlette(routes=[Route("/v1/tenants/{t}/events", publish, methods=["POST"])])
"""

# The least a durable publish must do, as a second reference: the bare handler plus one
# SQLite group commit (one writer thread, WAL, synchronous=FULL, the node's page size)
# of an id and the body before the 202; no event record, log record, deliveries, HLC,
# idempotency, counters or telemetry. The node's ratio to it is the cost of those.
_BARE_HEAD = "async def publish(request):\n    body = json.loads(await request.body())"
if _BARE_HEAD not in BARE_APP:  # else the "floor" would silently be the bare handler
    raise RuntimeError("FLOOR_APP: BARE_APP's handler head changed")
FLOOR_APP = BARE_APP.replace(
    _BARE_HEAD,
    """import asyncio, itertools, sqlite3
from concurrent.futures import ThreadPoolExecutor

from regionsync.adapters.sqlite_store import PAGE_SIZE

db = sqlite3.connect("floor.db", isolation_level=None, check_same_thread=False)
db.execute(f"PRAGMA page_size={PAGE_SIZE}")
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=FULL")
db.execute("CREATE TABLE events(id TEXT PRIMARY KEY, body BLOB)")
writer, queued, committing, ids = ThreadPoolExecutor(1), [], False, itertools.count()

def commit(rows):
    db.execute("BEGIN IMMEDIATE")
    db.executemany("INSERT INTO events VALUES (?, ?)", rows)
    db.execute("COMMIT")

async def group_commit():
    global queued, committing
    while queued:  # every body queued while a commit ran goes into the next one
        batch, queued = queued, []
        await asyncio.get_running_loop().run_in_executor(writer, commit, [r for r, _ in batch])
        for _, done in batch:
            done.set_result(None)
    committing = False

async def publish(request):
    global committing
    raw = await request.body()
    body = json.loads(raw)
    done = asyncio.get_running_loop().create_future()
    queued.append(((f"evt_{next(ids)}", raw), done))
    if not committing:
        committing = True
        asyncio.ensure_future(group_commit())
    await done""",
)


def wait_ready(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(url)


def load(url: str, seconds: float, connections: int, rate: float | None = None) -> dict:
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(BODY)
    cmd = [*CLIENT_CPUS, sys.executable, str(ROOT / "bench/loadgen.py"), url, "--seconds",
           str(seconds), "--connections", str(connections), "--body", f.name]  # fmt: skip
    if rate:
        cmd += ["--rate", str(rate)]
    if UNIQUE_KEYS:
        cmd += ["--unique-keys"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    os.unlink(f.name)
    return json.loads(out.strip().splitlines()[-1])


def bare(seconds: float, connections: int, source: str = BARE_APP, paced: bool = False) -> dict:
    """loadgen's closed-loop result against ``source`` (an app module: BARE_APP or
    FLOOR_APP) under uvicorn (uvloop, httptools), in its own process, cwd a new
    temporary directory; ``paced``: then a load paced at half that rate, its result under
    ``"paced"``."""
    tmp = Path(tempfile.mkdtemp())
    (tmp / "bare_app.py").write_text(source)
    port = free_port()
    proc = subprocess.Popen(
        [*SERVER_CPUS, sys.executable, "-m", "uvicorn", "bare_app:app", "--port", str(port),
         "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "warning"],
        cwd=tmp,
    )  # fmt: skip
    try:
        wait_ready(f"http://127.0.0.1:{port}/")
        url = f"http://127.0.0.1:{port}/v1/tenants/t/events"
        closed = load(url, seconds, connections)
        if paced:
            closed["paced"] = load(url, seconds, connections, rate=round(closed["rps"] / 2))
        return closed
    finally:
        proc.terminate()
        proc.wait()


def disk_commit_ms(rows: int = 64, commits: int = 50) -> dict:
    """p50/p99 ms of a bare SQLite commit (WAL, synchronous=FULL, ``rows`` rows of 330
    bytes) in this data directory's file system: what one group commit cannot beat."""
    import sqlite3

    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite3.connect(Path(tmp) / "disk.db", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE t(a INTEGER, b BLOB)")
        times = []
        for i in range(commits):
            t0 = time.perf_counter()
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT INTO t VALUES (?, ?)", [(i, b"x" * 330)] * rows)
            db.execute("COMMIT")
            times.append((time.perf_counter() - t0) * 1000)
        db.close()
    times.sort()
    return {"p50_ms": round(times[len(times) // 2], 2), "p99_ms": round(times[-1], 2)}


def commit_stats(base: str) -> dict:
    """The node's group commits so far from /metrics: count and mean duration (ms)."""
    text = httpx.get(base + "/metrics").text
    values = {}
    for line in text.splitlines():
        if line.startswith("regionsync_commit_latency_seconds_"):
            name, _, value = line.rpartition(" ")
            values[name.rsplit("_", 1)[-1]] = float(value)
    n = values.get("count", 0.0)
    return {
        "commits": int(n),
        "mean_commit_ms": round(1000 * values.get("sum", 0) / n, 2) if n else 0,
    }


def node(
    seconds: float,
    connections: int,
    linger_ms: float = 0.0,
    profile: Path | None = None,
    store: str = "sqlite",
    rate: float | None = None,
) -> tuple[dict, dict]:
    """One node process on ``store`` (``sqlite`` or a PostgreSQL URL) under a closed load,
    then a load paced at ``rate`` per second (None: half of the closed loop's rate):
    ``(closed, paced)`` loadgen results (``closed["cpu"]``: the node's CPU seconds per
    second during it); ``profile``: write a py-spy table of the node's closed loop
    there."""
    tmp = Path(tempfile.mkdtemp())
    port = free_port()
    (tmp / "node.toml").write_text(
        f'region = "bench-1"\ndata_dir = "{tmp}"\nhttp_listen = "127.0.0.1:{port}"\n'
        f'grpc_listen = "127.0.0.1:{free_port()}"\nlog_level = "warning"\n'
        f'store = "{store}"\n[ingest]\ncommit_linger_ms = {linger_ms}\n'
    )
    proc = subprocess.Popen(
        [*SERVER_CPUS, sys.executable, "-m", "regionsync.cli", "serve", "--config",
         str(tmp / "node.toml")]
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base + "/readyz")
        httpx.post(base + "/v1/tenants", json={"id": "t", "name": "Bench"}).raise_for_status()
        url = base + "/v1/tenants/t/events"
        prof = Profiler(proc.pid, profile) if profile else None
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        closed = load(url, seconds, connections)
        closed["cpu"] = round((cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0), 2)
        stats = commit_stats(base)
        closed["mean_commit_ms"] = stats["mean_commit_ms"]
        closed["events_per_commit"] = round(closed["requests"] / max(stats["commits"], 1), 1)
        if prof:
            prof.stop()
        closed["paced_at"] = round(rate or closed["rps"] / 2)
        paced = load(url, seconds, connections, rate=closed["paced_at"])
        counts = httpx.get(base + "/v1/cluster").json()["counts"]
        closed["events_stored"] = counts["events"]
        return closed, paced
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, nargs="*", default=[64],
                    help="connection counts to compare (each runs bare and node)")  # fmt: skip
    ap.add_argument("--linger-ms", type=float, nargs="*", default=[2.0],
                    help="group commit linger values to compare (ms)")  # fmt: skip
    ap.add_argument("--payload", choices=sorted(BODIES), default="small",
                    help="publish body: 328 synthetic bytes or a 2 KB GitHub payload")  # fmt: skip
    ap.add_argument("--pin", action="store_true",
                    help="load generator on core 0, server on core 1 (taskset)")  # fmt: skip
    ap.add_argument(
        "--idempotency-keys",
        action="store_true",
        help="every publish with a new Idempotency-Key (every server is sent it)",
    )
    ap.add_argument("--profile", type=Path,
                    help="py-spy table of the node's closed loop (first count)")  # fmt: skip
    args = ap.parse_args()
    global BODY, UNIQUE_KEYS
    BODY, UNIQUE_KEYS = BODIES[args.payload], args.idempotency_keys
    if args.pin:
        CLIENT_CPUS[:], SERVER_CPUS[:] = ["taskset", "-c", "0"], ["taskset", "-c", "1"]
    for i, connections in enumerate(args.connections):
        run(args, connections, args.profile if i == 0 else None)


def run(args: argparse.Namespace, connections: int, profile: Path | None) -> None:
    """The bare handler and a node per linger value, ``connections`` connections each;
    ``profile``: a py-spy table of the node's closed loop (the last linger value's)."""
    print(f"ingest benchmark: {connections} connections, {args.seconds} s per run, "
          f"{len(BODY)}-byte publish body, {os.cpu_count()} cores")  # fmt: skip
    base = bare(args.seconds, connections)
    print("bare Starlette handler (parse JSON, 202, no storage):", json.dumps(base))
    print("bare SQLite commit of 64 rows here (WAL, synchronous=FULL):",
          json.dumps(disk_commit_ms()))  # fmt: skip
    floor = bare(args.seconds, connections, FLOOR_APP, paced=True)
    print("durable floor (the bare handler + one SQLite group commit of the body, then 202):",
          json.dumps(floor))  # fmt: skip
    runs = {}
    for linger in args.linger_ms:
        runs[linger] = node(args.seconds, connections, linger, profile)
        closed, paced = runs[linger]
        print(f"regionsync node (durable, group commit, linger {linger} ms):", json.dumps(closed))
        print(f"regionsync node paced at {closed['paced_at']}/s (linger {linger} ms):",
              json.dumps(paced))  # fmt: skip
    best = max(runs, key=lambda k: runs[k][0]["rps"])
    closed, paced = runs[best]
    ratio = closed["rps"] / base["rps"] if base["rps"] else 0.0
    print(
        f"\n{connections} connections: durable publishes/s: {closed['rps']:.0f} vs bare "
        f"{base['rps']:.0f} -> ratio {ratio:.2f}x (goal >= 0.50x): "
        f"{'PASS' if ratio >= 0.5 else 'FAIL'}"
    )
    if base["rps"] and floor["rps"]:
        print(f"{connections} connections: durable floor {floor['rps']:.0f}/s = "
              f"{floor['rps'] / base['rps']:.2f}x of bare; the node is "
              f"{closed['rps'] / floor['rps']:.2f}x of the floor; the floor's p99 at half "
              f"its max rate: {floor['paced']['p99_ms']} ms")  # fmt: skip
    ok = paced["p99_ms"] <= 10 and paced["rps"] >= 0.9 * closed["paced_at"]
    print(f"{connections} connections: p99 at half the node's max rate "
          f"({closed['paced_at']}/s): {paced['p99_ms']} ms at {paced['rps']} req/s "
          f"(goal <= 10 ms): {'PASS' if ok else 'FAIL'}\n")  # fmt: skip


if __name__ == "__main__":
    main()
