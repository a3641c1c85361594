"""Log rows (issue 17): CPU per inserted replication-log record, WITHOUT ROWID vs rowid.

The log table once was ``WITHOUT ROWID``; its records carry their event's payload. SQLite
advises WITHOUT ROWID only for rows under about 1/20 of a page ("The WITHOUT ROWID
Optimization", section 4): larger rows live whole in the primary-key b-tree. In one run,
on this machine's file system (WAL, ``synchronous=FULL``, 8 KiB pages as the store uses):
for each body size, the writer thread's CPU per row (``time.thread_time``) and wall time
per row of committing batches of records into each table layout, alternating layouts so
drift hits both alike. Prints the ratio rowid / WITHOUT ROWID (below 1: rowid cheaper).

    .venv/bin/python bench/log_rows.py [--batch 128] [--batches 40]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

from regionsync.adapters.sqlite_schema import LOG_COLUMNS
from regionsync.adapters.sqlite_store import PAGE_SIZE

GITHUB = Path(__file__).resolve().parent / "data/github-team.created.json"  # data/NOTICE
LAYOUTS = {"WITHOUT ROWID": f"CREATE TABLE log({LOG_COLUMNS}) WITHOUT ROWID",
           "rowid": f"CREATE TABLE log({LOG_COLUMNS})"}  # fmt: skip


def insert_cost(layout: str, body: bytes, batch: int, batches: int) -> tuple[float, float]:
    """``(cpu_us, wall_us)`` per row of ``batches`` commits of ``batch`` records."""
    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite3.connect(Path(tmp) / "log.db", isolation_level=None)
        db.execute(f"PRAGMA page_size={PAGE_SIZE}")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute(LAYOUTS[layout])
        seq, cpu, wall = 0, 0.0, 0.0
        for _ in range(batches):
            rows = [("bench-1:1", seq + i + 1, "event", body, seq + i, 0) for i in range(batch)]
            seq += batch
            c0, t0 = time.thread_time(), time.perf_counter()
            db.execute("BEGIN")
            db.executemany("INSERT INTO log VALUES (?, ?, ?, ?, ?, ?)", rows)
            db.execute("COMMIT")
            cpu += time.thread_time() - c0
            wall += time.perf_counter() - t0
        db.close()
    n = batch * batches
    return 1e6 * cpu / n, 1e6 * wall / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=40)
    args = ap.parse_args()
    github = GITHUB.read_bytes()
    bodies = {"330 B": b"x" * 330, f"{len(github):,} B GitHub payload": github}
    print(f"log rows: {args.batches} commits of {args.batch} records, {PAGE_SIZE} B pages")
    for label, body in bodies.items():
        runs: dict[str, list[tuple[float, float]]] = {k: [] for k in LAYOUTS}
        for _ in range(2):
            for layout in LAYOUTS:
                runs[layout].append(insert_cost(layout, body, args.batch, args.batches))
        cost = {k: min(v) for k, v in runs.items()}  # the less disturbed of two runs
        for layout, (cpu, wall) in cost.items():
            print(f"  {label}, {layout}: {cpu:.1f} us CPU, {wall:.1f} us wall per row")
        ratio = cost["rowid"][0] / cost["WITHOUT ROWID"][0]
        print(f"  {label}: rowid / WITHOUT ROWID CPU per row = {ratio:.2f}x")


if __name__ == "__main__":
    main()
