"""Noisy-neighbour benchmark (issue 14): one tenant's flood must neither starve nor slow
another tenant's publishes and deliveries.

Each phase runs a fresh ``regionsync serve`` process (SQLite, no peers, default
``delivery.concurrency`` 64 and ``delivery.tenant_max_in_flight`` 32) with two tenants:

- ``quiet`` (``publish_rate_per_s`` = ``--quiet-limit``) publishes at half its limit,
  open loop, from ``bench/loadgen.py`` in its own process, to one endpoint on a receiver
  that answers at once;
- ``noisy`` (``publish_rate_per_s`` = ``--noisy-limit``) has 8 endpoints on a receiver
  that answers after ``--noisy-delay`` seconds (together they could hold 8 x 16 = 128
  attempts, twice the node's workers) and, when it floods, publishes at 10x its limit
  from another loadgen process, starting 4 s before ``quiet`` so its backlog is built.

Phases: ``alone`` (noisy idle), ``noisy`` (noisy floods; the default tenant cap holds it
to 32 attempts in flight) and, for comparison only, ``uncapped`` (the same flood with
noisy's ``delivery_max_in_flight`` = 10000). Quiet's publish latency is the loadgen's
(request written to answer read); its delivery latency is receiver arrival minus the
event's ``received_at``. Goal: quiet's p99 of both with the noisy neighbour within 1.2x of
alone.

``--rounds N`` runs N (alone, noisy) pairs one after the other and judges the median of
their ratios (on a shared machine one pair's p99s move by 2x either way).
``--profile DIR`` attaches ``py-spy record`` to the node while quiet publishes in the
``noisy`` phase and writes ``DIR/tenants_noisy.txt`` (a top table, as bench/delivery_rate.py).

    .venv/bin/python bench/tenants.py [--seconds 15] [--quiet-limit 40] [--noisy-limit 20]
        [--rounds 1] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from delivery import Receivers, _pct  # noqa: E402
from delivery_rate import Profiler  # noqa: E402

from regionsync.demo import free_port, wait_ready  # noqa: E402

NOISY_ENDPOINTS = 8


def _ms(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000


def _loadgen(url: str, rate: float, seconds: float, connections: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "loadgen.py"), url, "--rate", str(rate), "--seconds",
         str(seconds), "--connections", str(connections)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def _serve(config: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "regionsync.cli", "serve", "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def phase(name: str, args: argparse.Namespace, flood: bool, noisy_cap: int | None) -> dict:
    rcv = Receivers(0.0, args.noisy_delay)
    quiet_port, noisy_port = rcv.ports
    tmp = tempfile.TemporaryDirectory(prefix="regionsync-bench-tenants-")
    http = free_port()
    config = Path(tmp.name) / "node.toml"
    config.write_text(
        f'region = "bench"\ndata_dir = "{tmp.name}"\nhttp_listen = "127.0.0.1:{http}"\n'
        f'grpc_listen = "127.0.0.1:{free_port()}"\nlog_level = "warning"\n'
        '[delivery]\nallow_private_networks = ["127.0.0.0/8"]\ntimeout_s = 30\n'
    )
    node = _serve(config)
    base = f"http://127.0.0.1:{http}"
    noisy_gen = None
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30.0, trust_env=False) as c:
            await wait_ready(c, base, time.monotonic() + 30)
            noisy = {"id": "noisy", "name": "N", "publish_rate_per_s": args.noisy_limit}
            if noisy_cap is not None:
                noisy["delivery_max_in_flight"] = noisy_cap
            quiet = {"id": "quiet", "name": "Q", "publish_rate_per_s": args.quiet_limit}
            for body in (noisy, quiet):
                assert (await c.post("/v1/tenants", json=body)).status_code == 201
            for i in range(NOISY_ENDPOINTS):
                ep = {"url": f"http://127.0.0.1:{noisy_port}/n{i}", "rate_limit_per_s": 1000}
                assert (await c.post("/v1/tenants/noisy/endpoints", json=ep)).status_code == 201
            ep = {"url": f"http://127.0.0.1:{quiet_port}/q", "rate_limit_per_s": 1000}
            assert (await c.post("/v1/tenants/quiet/endpoints", json=ep)).status_code == 201
            if flood:
                noisy_gen = _loadgen(f"{base}/v1/tenants/noisy/events",
                                     10 * args.noisy_limit, args.seconds + 6, 16)  # fmt: skip
                await asyncio.sleep(4)
            started_ms = time.time() * 1000
            prof = None
            if args.profile is not None and flood and noisy_cap is None:
                args.profile.mkdir(parents=True, exist_ok=True)
                prof = Profiler(node.pid, args.profile / "tenants_noisy.txt")
            quiet_gen = _loadgen(f"{base}/v1/tenants/quiet/events", 0.5 * args.quiet_limit,
                                 args.seconds, 4)  # fmt: skip
            out, _ = await asyncio.to_thread(quiet_gen.communicate)
            if prof is not None:
                prof.stop()
            publish = json.loads(out)
            events: dict[str, float] = {}
            cursor = None
            while True:
                params = {"limit": 1000, "since": datetime.fromtimestamp(
                    started_ms / 1000 - 1).astimezone().isoformat()}  # fmt: skip
                if cursor:
                    params["cursor"] = cursor
                page = (await c.get("/v1/tenants/quiet/events", params=params)).json()
                events.update((e["id"], _ms(e["received_at"])) for e in page["items"])
                cursor = page["next"]
                if not cursor:
                    break
            arrivals: dict[str, float] = {}
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                arrivals.update(await rcv.arrivals(quiet_port))
                if all(e in arrivals for e in events):
                    break
                await asyncio.sleep(0.2)
            noisy_done = len(await rcv.arrivals(noisy_port))
            usage = (await c.get("/v1/tenants/noisy")).json()["usage"]
    finally:
        if noisy_gen is not None:
            noisy_gen.kill()
            noisy_gen.wait()
        node.terminate()
        node.wait()
        rcv.close()
        tmp.cleanup()
    warm = min(events.values(), default=0) + 1000
    lat = [arrivals[e] - t for e, t in events.items() if t >= warm and e in arrivals]
    measured = sum(1 for t in events.values() if t >= warm)
    return {
        "name": name,
        "publish": publish,
        "events": measured,
        "delivered": len(lat),
        "delivery_p50": _pct(lat, 0.50),
        "delivery_p99": _pct(lat, 0.99),
        "noisy_published": usage["events_published"],
        "noisy_arrivals": noisy_done,
    }


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="quiet publishing, per phase")
    ap.add_argument("--quiet-limit", type=float, default=40.0, help="quiet's events/s limit")
    ap.add_argument("--noisy-limit", type=float, default=20.0, help="noisy's events/s limit")
    ap.add_argument("--noisy-delay", type=float, default=2.0, help="noisy receiver's answer, s")
    ap.add_argument("--rounds", type=int, default=1, help="alone/noisy pairs (median ratio)")
    ap.add_argument("--profile", type=Path, help="write a py-spy table of the noisy phase here")
    args = ap.parse_args()
    print(f"bench/tenants.py: {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    print(
        f"quiet publishes {0.5 * args.quiet_limit:.0f}/s (limit {args.quiet_limit:.0f}/s) for "
        f"{args.seconds:.0f} s to one fast endpoint; noisy floods {10 * args.noisy_limit:.0f}/s "
        f"(limit {args.noisy_limit:.0f}/s) to {NOISY_ENDPOINTS} endpoints answering after "
        f"{args.noisy_delay:.1f} s"
    )
    runs: dict[str, list[dict]] = {"alone": [], "noisy": [], "uncapped": []}
    plan = [("alone", False, None), ("noisy", True, None)] * args.rounds
    plan.append(("uncapped", True, 10_000))
    for name, flood, cap in plan:
        r = await phase(name, args, flood, cap)
        runs[name].append(r)
        p = r["publish"]
        print(
            f"  {name:9s} quiet publish p50 {p['p50_ms']:6.1f} ms p99 {p['p99_ms']:6.1f} ms "
            f"({p['statuses']})  delivery p50 {r['delivery_p50']:7.1f} ms "
            f"p99 {r['delivery_p99']:7.1f} ms ({r['delivered']}/{r['events']})  "
            f"noisy accepted {r['noisy_published']}, delivered {r['noisy_arrivals']}"
        )
    # per round (alone, then noisy right after it) the ratio; the median of the rounds
    pubs = [n["publish"]["p99_ms"] / a["publish"]["p99_ms"]
            for a, n in zip(runs["alone"], runs["noisy"], strict=True)]  # fmt: skip
    dlvs = [n["delivery_p99"] / a["delivery_p99"]
            for a, n in zip(runs["alone"], runs["noisy"], strict=True)]  # fmt: skip
    pub, dlv = statistics.median(pubs), statistics.median(dlvs)
    complete = all(r["delivered"] == r["events"] > 0 for r in runs["alone"] + runs["noisy"])
    each = "" if args.rounds == 1 else " (median of rounds: {})"
    print("results (quiet tenant, with the noisy neighbour / alone)")
    print(
        f"  publish p99   {pub:5.2f}x  goal <= 1.2x  {'PASS' if pub <= 1.2 else 'FAIL'}"
        + each.format(", ".join(f"{x:.2f}x" for x in pubs))
    )
    ok = dlv <= 1.2 and complete
    print(
        f"  delivery p99  {dlv:5.2f}x  goal <= 1.2x  {'PASS' if ok else 'FAIL'}"
        + each.format(", ".join(f"{x:.2f}x" for x in dlvs))
        + ("" if complete else "  (not every quiet delivery arrived)")
    )
    p50 = statistics.median(
        n["delivery_p50"] / a["delivery_p50"]
        for a, n in zip(runs["alone"], runs["noisy"], strict=True)
    )
    print(f"  delivery p50  {p50:5.2f}x  (no goal; less noisy than p99 on a shared machine)")
    alone = runs["alone"][-1]
    unc = runs["uncapped"][0]
    print(f"  for comparison, without the tenant cap: delivery p99 "
          f"{unc['delivery_p99'] / alone['delivery_p99']:.2f}x alone "
          f"({unc['delivered']}/{unc['events']} delivered)")  # fmt: skip
    return 0 if pub <= 1.2 and ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
