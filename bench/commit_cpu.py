"""What a publish's log record adds to its group commit (issue 17): CPU of the SQLite
writer per event, and bytes stored per event, for group commits of GitHub events with
their ``event`` log records against the same events committed alone (the baseline,
measured in the same run).

Each round commits ``--batches`` group commits of 32 events (the 2,099-byte GitHub
payload of bench/data, bodies encoded as ingest encodes them) into a fresh store, once
with their records and once without, alternating; ``SqliteStore._commit`` is called on
this thread, so ``time.thread_time`` counts its CPU (SQLite's, the JSON's, and the
kernel's for the WAL writes, the fsyncs and the writer's own WAL checkpoints; the store as
a node opens it, ``synchronous=FULL``). Prints the median of the rounds and the ratio.

``--postgres`` runs the same commits through ``PostgresStore`` on a throwaway server
(tests/pgserver.py, durable) instead and prints bytes only, per event: WAL written
(``pg_current_wal_lsn`` before and after) and stored in the log and events tables
(``pg_total_relation_size``); the server's CPU is not this thread's.

    .venv/bin/python bench/commit_cpu.py [--batches 300] [--rounds 5] [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from regionsync.adapters.postgres_store import PostgresStore
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.core.model import Event, Record, WriteBatch
from regionsync.core.records import encode_body

ROOT = Path(__file__).resolve().parents[1]
PAYLOAD = (ROOT / "bench/data/github-team.created.json").read_bytes()
PER_BATCH = 32
WARMUP = 30  # batches committed before the clock starts


def batches(n: int, records: bool) -> list[WriteBatch]:
    """``n`` group commits of ``PER_BATCH`` events, with their log records if ``records``."""
    out, seq = [], 0
    for _ in range(n):
        events, recs = [], []
        for _ in range(PER_BATCH):
            seq += 1
            e = Event(f"evt_{seq:08}", "t", "team.created", PAYLOAD, "r", seq)
            events.append(e)
            recs.append(Record("r:1", seq, "event", encode_body(event=e), (seq, 0)))
        out.append(WriteBatch(events=events, records=recs if records else [],
                              version_vector={"r:1": seq} if records else {}))  # fmt: skip
    return out


async def one(n: int, records: bool) -> tuple[float, float]:
    """(CPU us per event, stored bytes per event) of one fresh store."""
    work = batches(n + WARMUP, records)
    tmp = Path(tempfile.mkdtemp(prefix="regionsync-commit-cpu-"))
    store = SqliteStore(tmp / "n.db")
    try:
        await store.open("r", new_incarnation=1)
        for b in work[:WARMUP]:
            store._commit(b)
        started = time.thread_time()
        for b in work[WARMUP:]:
            store._commit(b)
        cpu = (time.thread_time() - started) / (n * PER_BATCH) * 1e6
        (pages,) = store.db.execute("PRAGMA page_count").fetchone()
        (free,) = store.db.execute("PRAGMA freelist_count").fetchone()
        (size,) = store.db.execute("PRAGMA page_size").fetchone()
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return cpu, (pages - free) * size / ((n + WARMUP) * PER_BATCH)
    finally:
        await store.close()
        shutil.rmtree(tmp, ignore_errors=True)


_dbs = itertools.count(1)  # database names of one server


async def one_pg(server: object, n: int, records: bool) -> tuple[float, float]:
    """(WAL bytes per event, log and events bytes per event) of a fresh database."""
    url = server.create_database(f"b{next(_dbs)}")  # type: ignore[attr-defined]
    work = batches(n + WARMUP, records)
    store = PostgresStore(url)
    size = "SELECT pg_current_wal_lsn(), pg_total_relation_size('log') + " \
        "pg_total_relation_size('events')"  # fmt: skip
    try:
        await store.open("r", new_incarnation=1)
        for b in work[:WARMUP]:
            await store.commit(b)
        with psycopg.connect(url, autocommit=True) as c:
            lsn0, _ = c.execute(size).fetchone()  # type: ignore[misc]
            for b in work[WARMUP:]:
                await store.commit(b)
            lsn1, stored = c.execute(size).fetchone()  # type: ignore[misc]
            (wal,) = c.execute("SELECT %s::pg_lsn - %s::pg_lsn", (lsn1, lsn0)).fetchone()  # type: ignore[misc]
        return float(wal) / (n * PER_BATCH), stored / ((n + WARMUP) * PER_BATCH)
    finally:
        await store.close()


async def main_pg(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from pgserver import PgServer

    server = PgServer(durable=True)
    server.start()
    try:
        alone, logged = [], []
        for _ in range(args.rounds):
            alone.append(await one_pg(server, args.batches, records=False))
            logged.append(await one_pg(server, args.batches, records=True))
    finally:
        server.stop()
    a_wal, a_stored = (statistics.median(x[i] for x in alone) for i in (0, 1))
    l_wal, l_stored = (statistics.median(x[i] for x in logged) for i in (0, 1))
    print(f"bench/commit_cpu.py --postgres: {args.rounds} rounds of {args.batches} commits "
          f"of {PER_BATCH} events, {len(PAYLOAD)}-byte payload (medians)")  # fmt: skip
    print(f"  events alone (baseline):  {a_wal:7.0f} WAL bytes, {a_stored:7.0f} bytes stored "
          "per event")  # fmt: skip
    print(f"  events and their records: {l_wal:7.0f} WAL bytes, {l_stored:7.0f} bytes stored "
          "per event")  # fmt: skip
    print(f"  ratio: {l_wal / a_wal:.2f}x the WAL, {l_stored / a_stored:.2f}x the bytes stored")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--postgres", action="store_true", help="bytes of PostgresStore instead")
    args = ap.parse_args()
    if args.postgres:
        return await main_pg(args)
    alone, logged = [], []
    for _ in range(args.rounds):
        alone.append(await one(args.batches, records=False))
        logged.append(await one(args.batches, records=True))
    a_cpu = statistics.median(c for c, _ in alone)
    l_cpu = statistics.median(c for c, _ in logged)
    a_bytes, l_bytes = alone[-1][1], logged[-1][1]
    print(f"bench/commit_cpu.py: {args.rounds} rounds of {args.batches} commits of {PER_BATCH} "
          f"events, {len(PAYLOAD)}-byte payload (median CPU of the rounds)")  # fmt: skip
    print(f"  events alone (baseline):  {a_cpu:6.1f} us CPU per event, {a_bytes:7.0f} bytes "
          f"stored per event (rounds: {', '.join(f'{c:.1f}' for c, _ in alone)})")  # fmt: skip
    print(f"  events and their records: {l_cpu:6.1f} us CPU per event, {l_bytes:7.0f} bytes "
          f"stored per event (rounds: {', '.join(f'{c:.1f}' for c, _ in logged)})")  # fmt: skip
    print(f"  ratio: {l_cpu / a_cpu:.2f}x the CPU, {l_bytes / a_bytes:.2f}x the bytes")


if __name__ == "__main__":
    asyncio.run(main())
