"""Queries and CPU per event, by statement and by process, of a PostgreSQL region of N
processes (issue 44).

    .venv/bin/python bench/pg_statements.py [--processes 1 2 4] [--rate 200] [--seconds 10]
        [--top 25] [--ingest-to-one]

The scale-out row of cpu.py's set-up (bench/postgres.py's ``Region``, publishes spread
evenly over the processes, all delivered to one endpoint) on a durable server with
``pg_stat_statements``; prints, for each N, every statement's calls, execution time
(wall: lock waits included) and rows per call, per event; then CPU ms and context
switches per event of each node process, of their children (the sender processes), of
PostgreSQL's postmaster and of its backends (bench/cpumeter.py's ``Split``), and the
machine's busy cores. ``--ingest-to-one`` sends every publish to the first process (the
others follow and claim): what spreading the publishes costs, apart from running N
processes. What it is for: to see what a region's processes add per event as N grows
(bench/README.md, "Scale-out"). pg_stat_statements costs CPU of its own: compare CPU
figures within this script's runs, not with cpu.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent / "tests")]

import aiohttp  # noqa: E402
import psycopg  # noqa: E402
from cpu_delivery import (  # noqa: E402
    Receiver,
    arrived,
    loadgen,
    loadgen_result,
    paced,
    wait_ready,
)
from cpumeter import Split  # noqa: E402
from pgserver import PgServer  # noqa: E402
from postgres import Region  # noqa: E402

_TOP = (
    "SELECT calls, total_exec_time, rows, left(regexp_replace(query, '\\s+', ' ', 'g'), %s) "
    "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
    "WHERE datname = current_database()) ORDER BY calls DESC LIMIT %s"
)


async def one(server: PgServer, rcv: Receiver, s: aiohttp.ClientSession, n: int,
              args: argparse.Namespace) -> None:  # fmt: skip
    url = server.create_database(f"statements_{n}")
    region = Region(url, n)
    try:
        await region.setup(s, rcv)
        for base in region.bases:  # warm-up, as cpu.py's scale-out row
            await asyncio.to_thread(paced, base + "/v1/tenants/t/events", args.rate / n, 1.0)
        await asyncio.sleep(1.0)
        await rcv.arrivals(s, reset=True)
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            c.execute("SELECT pg_stat_statements_reset()")
        trees = {"node": [p.pid for p in region.procs], "postgres": [server._proc.pid]}
        split = Split(trees).start()
        targets = region.bases[:1] if args.ingest_to_one else region.bases
        gens = [loadgen(b + "/v1/tenants/t/events", args.rate / len(targets), args.seconds)
                for b in targets]  # fmt: skip
        got = [await asyncio.to_thread(loadgen_result, g) for g in gens]
        events = sum(g["statuses"].get("202", 0) for g in got)
        await arrived(s, rcv, events, 120)
        split.stop()
        with psycopg.connect(url, autocommit=True) as c:
            rows = c.execute(_TOP, (args.width, args.top)).fetchall()
    finally:
        region.close()
    print(f"\nN={n}: {events} events; per event: calls, exec ms (wall), rows per call")
    print(f"  all listed: {sum(r[0] for r in rows) / max(events, 1):.2f} calls")
    for calls, ms, nrows, query in rows:
        print(f"  {calls / events:7.3f} {ms / events:8.3f} {nrows / max(calls, 1):7.2f}  {query}")
    split.report(events, "event")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, nargs="*", default=[1, 2, 4])
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--width", type=int, default=110)
    ap.add_argument("--ingest-to-one", action="store_true",
                    help="every publish to the first process")  # fmt: skip
    args = ap.parse_args()
    stats = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all"}
    server = PgServer(durable=True, settings=stats)
    server.start()
    rcv = Receiver()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
            await wait_ready(s, rcv.url + "/count")
            for n in args.processes:
                await one(server, rcv, s, n, args)
    finally:
        server.stop()
        rcv.close()


if __name__ == "__main__":
    asyncio.run(main())
