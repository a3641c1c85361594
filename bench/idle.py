"""What an idle region costs (issue 44: "cheap to run"): CPU seconds per second of a
PostgreSQL region of N processes and of its PostgreSQL server, with one tenant and one
endpoint and no traffic, after the processes settled.

    .venv/bin/python bench/idle.py [--processes 1 2 4] [--seconds 20] [--runs 3]

Each figure is the median of ``--runs`` fresh regions (every run's value printed beside
it). Settings can be varied through the environment (``REGIONSYNC_<SECTION>__<NAME>``,
README "Configuration"), which the node processes inherit.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # pgserver
from cpumeter import Meter  # noqa: E402
from delivery_rate import Receiver, wait_ready  # noqa: E402


async def idle_once(server, rcv: Receiver, n: int, seconds: float, run: int) -> tuple[float, float]:
    """(nodes, PostgreSQL) CPU s per s of one fresh region of ``n`` processes at rest."""
    from postgres import Region

    region = Region(server.create_database(f"idle_{n}_{run}"), n)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
            await region.setup(s, rcv)
        await asyncio.sleep(3.0)  # the start's work (role, first checks) is over
        nodes = Meter([p.pid for p in region.procs]).start()
        pg = Meter([server._proc.pid]).start()
        await asyncio.sleep(seconds)
        return nodes.stop() / seconds, pg.stop() / seconds
    finally:
        region.close()


async def main() -> None:
    from pgserver import PgServer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, nargs="*", default=[1, 2, 4])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rcv, server = Receiver(), PgServer(durable=True)
    server.start()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
            await wait_ready(s, rcv.url + "/count")
        first = args.processes[0]
        print(f"| processes | nodes, CPU s/s | PostgreSQL, CPU s/s | region, CPU s/s | "
              f"region vs N={first} |")  # fmt: skip
        print("|---|---|---|---|---|")
        base = None
        for n in args.processes:
            runs = [await idle_once(server, rcv, n, args.seconds, i) for i in range(args.runs)]
            total = [a + b for a, b in runs]
            med = statistics.median_low(total)
            base = med if base is None else base
            i = total.index(med)
            print(f"| {n} | {runs[i][0]:.4f} | {runs[i][1]:.4f} | {med:.4f} "
                  f"({', '.join(f'{t:.4f}' for t in total)}) | {med / base:.2f}x |",
                  flush=True)  # fmt: skip
    finally:
        server.stop()
        rcv.close()


if __name__ == "__main__":
    asyncio.run(main())
