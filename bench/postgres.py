"""PostgreSQL store benchmark (issue 16): durable publishes/s of one node process on
PostgreSQL against the same node on SQLite, in one run, on this machine.

Starts a throwaway PostgreSQL server with its durable defaults (fsync on,
synchronous_commit on; tests/pgserver.py), then runs bench/ingest.py's node load (closed
loop, then paced at 5k/s) on a SQLite node and on a PostgreSQL node. Prints both, the
ratio PostgreSQL/SQLite and the core count. Several processes per region are not built
yet, so there is no 2-process figure.

    .venv/bin/python bench/postgres.py [--seconds 5] [--connections 64]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]

from ingest import node  # noqa: E402
from pgserver import PgServer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=64)
    args = ap.parse_args()
    print(f"store benchmark: {args.connections} connections, {args.seconds} s per run, "
          f"{os.cpu_count()} cores (load generator, node and database share them)")  # fmt: skip
    lite, lite_paced = node(args.seconds, args.connections, rate=5000)
    print("SQLite node (synchronous=FULL):", json.dumps(lite))
    print("SQLite node paced at 5000/s:   ", json.dumps(lite_paced))
    server = PgServer(durable=True)
    server.start()
    try:
        url = server.create_database("bench")
        pg, pg_paced = node(args.seconds, args.connections, store=url, rate=5000)
    finally:
        server.stop()
    print("PostgreSQL node (synchronous_commit=on, fsync on):", json.dumps(pg))
    print("PostgreSQL node paced at 5000/s:                  ", json.dumps(pg_paced))
    for name, r, p in (("SQLite", lite, lite_paced), ("PostgreSQL", pg, pg_paced)):
        acked = sum(x["statuses"].get("202", 0) for x in (r, p))
        verdict = "PASS" if r["events_stored"] >= acked else "FAIL"
        print(f"{name}: {acked} acknowledged, {r['events_stored']} stored: {verdict}")
    ratio = pg["rps"] / lite["rps"] if lite["rps"] else 0.0
    print(f"\ndurable publishes/s, 1 process: PostgreSQL {pg['rps']:.0f} vs SQLite "
          f"{lite['rps']:.0f} -> ratio {ratio:.2f}x on {os.cpu_count()} cores")  # fmt: skip


if __name__ == "__main__":
    main()
