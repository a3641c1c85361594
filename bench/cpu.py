"""CPU per unit of work at a fixed offered rate (issue 44), against baselines measured the
same way in the same run.

Every figure is CPU seconds per 1,000 units (= CPU ms per unit) of the measured server's
whole process tree (bench/cpumeter.py: /proc, every thread, child processes included:
the node's sender process, PostgreSQL's backends), over a load sent on a schedule (open
loop, ``--rate`` per second, well under what every system here keeps up with on two
cores), after a second of warm-up. Throughput and p99 are printed beside each; every
measurement is run ``--runs`` times and the median run (by CPU per unit) is reported.

Rows (each a ratio with PASS/FAIL):

- ingest: CPU per durable publish (a 2 KB GitHub payload, 202 after the commit) of a
  node (SQLite) against the durable floor's CPU per request (bench/ingest.py's
  ``FLOOR_APP``: one fsync'd group commit of the body), without and with a new
  Idempotency-Key per publish (the floor ignores the header); goal <= 1.5x;
- delivery (bench/cpu_delivery.py): CPU per delivered, signed, durably recorded attempt,
  replay and live, against an aiohttp client loop's CPU per request to the same receiver
  at the same rate; goal <= 2.5x;
- scale-out (bench/cpu_delivery.py): one region on PostgreSQL with N = 1, 2, 4 processes,
  the same offered load (publish and deliver) spread over them; the region's CPU per
  event (nodes and PostgreSQL); goal N=4 <= 1.25x N=1;
- fan-in (bench/fanin.py's phases): quiet endpoints' delivery p99 during a 20,000-event
  burst to one endpoint against without; goal <= 1.5x, all 20,000 delivered once.

    .venv/bin/python bench/cpu.py [--rate 500] [--seconds 10] [--runs 3]
        [--only ingest delivery scaleout fanin] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]

import delivery_rate  # noqa: E402
from cpumeter import RECEIVER_APP, Meter, median_run, per_1000  # noqa: E402
from delivery_rate import Profiler, _stop, free_port  # noqa: E402
from ingest import BODIES, FLOOR_APP, wait_ready  # noqa: E402

delivery_rate.RECEIVER_APP = RECEIVER_APP  # the receiver also keeps delivery lags
BODY = BODIES["github"]  # {"event_type":"team.created","payload":<2,099 bytes>}
NODE_EXTRA = [""]  # --linger-ms: config lines of every SQLite node here
GOALS = {"ingest": 1.5, "delivery": 2.5, "scaleout": 1.25, "fanin": 1.5}


def loadgen(url: str, rate: float, seconds: float, keys: bool = False,
            connections: int = 32) -> subprocess.Popen:  # fmt: skip
    """bench/loadgen.py paced at ``rate``/s (open loop) posting BODY; its own process."""
    fd, path = tempfile.mkstemp()
    os.write(fd, BODY)
    os.close(fd)
    cmd = [sys.executable, str(ROOT / "bench/loadgen.py"), url, "--seconds", str(seconds),
           "--connections", str(connections), "--body", path, "--rate", str(rate)]  # fmt: skip
    proc = subprocess.Popen([*cmd, *(["--unique-keys"] if keys else [])],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    proc.body_path = path  # type: ignore[attr-defined]
    return proc


def loadgen_result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate()
    os.unlink(proc.body_path)  # type: ignore[attr-defined]
    if proc.returncode:
        raise RuntimeError(f"loadgen exited {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def paced(url: str, rate: float, seconds: float, keys: bool = False) -> dict:
    return loadgen_result(loadgen(url, rate, seconds, keys))


def node_config(tmp: Path, store: str = "sqlite", extra: str = "") -> tuple[Path, str]:
    """A node's config in ``tmp`` (no peers, loopback receivers allowed): (path, base)."""
    port = free_port()
    path = tmp / "node.toml"
    path.write_text(
        f'region = "bench-1"\ndata_dir = "{tmp}"\nhttp_listen = "127.0.0.1:{port}"\n'
        f'grpc_listen = "127.0.0.1:{free_port()}"\nlog_level = "warning"\nstore = "{store}"\n'
        '[delivery]\nallow_private_networks = ["127.0.0.0/8"]\ntenant_max_in_flight = 64\n'
        + extra
        + NODE_EXTRA[0]
    )
    return path, f"http://127.0.0.1:{port}"


class Server:
    """The durable floor (uvicorn, uvloop, httptools) or a node (``regionsync serve``),
    in its own process; ``url``: where publishes go."""

    def __init__(self, kind: str) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix=f"regionsync-cpu-{kind}-"))
        if kind == "floor":
            (self.tmp / "floor_app.py").write_text(FLOOR_APP)
            port = free_port()
            cmd = ["-m", "uvicorn", "floor_app:app", "--port", str(port), "--loop", "uvloop",
                   "--http", "httptools", "--no-access-log", "--log-level", "warning"]  # fmt: skip
            self.base = f"http://127.0.0.1:{port}"
        else:
            config, self.base = node_config(self.tmp)
            cmd = ["-m", "regionsync.cli", "serve", "--config", str(config)]
        self.proc = subprocess.Popen([sys.executable, *cmd], cwd=self.tmp)
        wait_ready(self.base + ("/readyz" if kind == "node" else "/"))
        if kind == "node":
            r = httpx.post(self.base + "/v1/tenants", json={"id": "t", "name": "Bench"})
            r.raise_for_status()
        self.url = self.base + "/v1/tenants/t/events"

    def close(self) -> None:
        _stop(self.proc)


def ingest_once(kind: str, keys: bool, rate: float, seconds: float,
                profile: Path | None = None) -> dict:  # fmt: skip
    """One measured paced load of ``kind`` ("floor" or "node") on a fresh server."""
    server = Server(kind)
    try:
        paced(server.url, rate, 1.0, keys)  # warm-up: connections, caches, first commits
        prof = Profiler(server.proc.pid, profile) if profile else None
        meter = Meter([server.proc.pid]).start()
        got = paced(server.url, rate, seconds, keys)
        cpu = meter.stop()
        if prof:
            prof.stop()
    finally:
        server.close()
    ok = got["statuses"].get("202", 0)
    return {"cpu_ms": per_1000(cpu, ok), "rps": got["rps"], "p99_ms": got["p99_ms"],
            "accepted": ok, "requests": got["requests"], "errors": got["errors"]}  # fmt: skip


def ingest_rows(args: argparse.Namespace) -> list[dict]:
    """The floor's and the node's runs alternate (floor, node, floor, ...), so a drift of
    the machine's speed during the row weighs on both alike; each pair's ratio is printed
    beside the ratio of the medians."""
    rows = []
    for keys in (False, True):
        runs: dict[str, list[dict]] = {"floor": [], "node": []}
        for _ in range(args.runs):
            for kind in ("floor", "node"):
                runs[kind].append(ingest_once(kind, keys, args.rate, args.seconds))
        got = {kind: median_run(runs[kind], "cpu_ms") for kind in runs}
        for kind in runs:
            print(f"  ingest {kind} keys={keys}:", json.dumps(got[kind]), flush=True)
        pairs = ", ".join(f"{n['cpu_ms'] / f['cpu_ms']:.2f}x"
                          for f, n in zip(runs["floor"], runs["node"], strict=True))  # fmt: skip
        rows.append(row(f"ingest, 2 KB GitHub payload, {'with' if keys else 'no'} "
                        "Idempotency-Keys", "durable floor", got["node"], got["floor"],
                        "ingest", "publish", f"(each pair: {pairs})"))  # fmt: skip
    if args.profile:
        ingest_once("node", False, args.rate, args.seconds, args.profile / "cpu_ingest.txt")
    return rows


def row(name: str, base_name: str, node: dict, base: dict, goal: str, unit: str,
        extra: str = "") -> dict:  # fmt: skip
    ratio = node["cpu_ms"] / base["cpu_ms"] if base["cpu_ms"] else float("inf")
    complete = node.get("complete", True) and node.get("kept_up", True)
    return {"name": name, "base_name": base_name, "node": node, "base": base, "unit": unit,
            "ratio": ratio, "goal": GOALS[goal], "extra": extra,
            "pass": ratio <= GOALS[goal] and complete}  # fmt: skip


def show(rows: list[dict], args: argparse.Namespace) -> None:
    print(f"\nCPU per 1,000 units (CPU ms per unit), offered {args.rate}/s, {args.seconds} s, "
          f"median of {args.runs}; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| goal | node: CPU s/1,000 | node: rate, p99 | baseline | baseline: CPU s/1,000 | "
          "baseline: rate, p99 | ratio | goal | verdict |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        n, b = r["node"], r["base"]
        if r.get("latency"):  # fan-in: a p99 ratio, not CPU
            print(f"| {r['name']} | | quiet p99 {n['p99_ms']} ms (burst delivered at "
                  f"{n['rps']:.0f}/s) | {r['base_name']} | | quiet p99 {b['p99_ms']} ms | "
                  f"**{r['ratio']:.2f}x** | <= {r['goal']}x | {'PASS' if r['pass'] else 'FAIL'}"
                  f" | {r['extra']}")  # fmt: skip
            continue
        print(f"| {r['name']} | {n['cpu_ms']:.3f} ({_runs(n)}) | {n['rps']:.0f}/s, "
              f"p99 {n['p99_ms']} ms | {r['base_name']} | {b['cpu_ms']:.3f} ({_runs(b)}) | "
              f"{b['rps']:.0f}/s, p99 {b['p99_ms']} ms | **{r['ratio']:.2f}x** | "
              f"<= {r['goal']}x | {'PASS' if r['pass'] else 'FAIL'} |"
              + (f" {r['extra']}" if r["extra"] else ""))  # fmt: skip


def _runs(d: dict) -> str:
    return ", ".join(f"{v:.3f}" for v in d.get("cpu_ms_runs", [d["cpu_ms"]]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=500.0, help="offered units per second")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per run")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (median reported)")
    ap.add_argument("--only", nargs="*", default=["ingest", "delivery", "scaleout", "fanin"])
    ap.add_argument("--scale-rate", type=float, default=200.0,
                    help="offered rate of the scale-out rows (4 processes on 2 cores)")  # fmt: skip
    ap.add_argument("--processes", type=int, nargs="*", default=[1, 2, 4])
    ap.add_argument("--fanin-events", type=int, default=20_000)
    ap.add_argument("--profile", type=Path, help="py-spy top tables of ingest and replay here")
    ap.add_argument(
        "--linger-ms",
        type=float,
        default=None,
        help="the SQLite nodes' [ingest] commit_linger_ms (default: the node's)",
    )
    args = ap.parse_args()
    if args.linger_ms is not None:
        NODE_EXTRA[0] = f"[ingest]\ncommit_linger_ms = {args.linger_ms}\n"
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    import cpu  # the module cpu_delivery imports (this file runs as __main__)
    import cpu_delivery

    cpu.NODE_EXTRA[0] = NODE_EXTRA[0]

    print(
        f"bench/cpu.py: {os.cpu_count()} cores, offered {args.rate}/s, {args.seconds} s "
        f"per run, {args.runs} runs, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows: list[dict] = []
    if "ingest" in args.only:
        rows += ingest_rows(args)
    if "delivery" in args.only:
        rows += asyncio.run(cpu_delivery.delivery_rows(args))
    if "scaleout" in args.only:
        rows += asyncio.run(cpu_delivery.scaleout_rows(args))
    if "fanin" in args.only:
        rows += asyncio.run(cpu_delivery.fanin_rows(args))
    show(rows, args)
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"\n{time.monotonic() - started:.0f} s")
    sys.exit(code)
