"""A node restarted over a big SQLite store (issue 17: memory bounded by configuration,
not by data): time to serving, resident memory, and bytes on disk per event.

Builds ``<tmp>/bench-1.db`` through the Store API in big batches: N events of a real ~2 KB
GitHub payload (``team.created``, bench/data/), one delivery each (99 % delivered, 1 %
dead), an Idempotency-Key each, and each event's replication log record as the node writes it
(event and deliveries, core.records), which log truncation deletes after each batch (a
50th of N, at most 20,000), as a node does once every peer acked (the freed pages are
reused by the next batch). Then starts ``regionsync serve`` over it in its own process
and reports:

- time to serving: process start to the first 200 of ``/readyz`` (goal < 10 s; baseline:
  the same over a store of one event, in the same run), then a
  publish and a read-back of an old event (the node really serves);
- ``GET /v1/cluster`` (median of 5; its counts are kept rows, not a scan) against the
  same on the one-event store;
- resident memory: ``VmRSS`` and its peak ``VmHWM`` from ``/proc/<pid>/status`` once
  serving (goal < 500 MB); with ``--peer-settle-s S`` also a node with a peer, which builds
  its anti-entropy tree in the background: its memory S seconds after serving, and
  ``GET /v1/cluster`` every half second meanwhile (median, p90 and max: what the build
  costs the requests served during it);
- bytes on disk per event (database, WAL and shared-memory files, after the truncation
  and a checkpoint) against the payload size (goal <= 2x), and the bytes of the pages in
  use (without SQLite's free list, which a ``VACUUM`` would return to the file system).

    .venv/bin/python bench/restart.py [--events 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.core.model import Delivery, DeliveryStatus, Event, Record, WriteBatch
from regionsync.core.records import encode_body
from regionsync.demo import free_port

REGION = "bench-1"
ACTOR = f"{REGION}:1"
BATCH = 20_000
GOAL_READY_S, GOAL_RSS_MB, GOAL_DISK_RATIO = 10.0, 500.0, 2.0
SAMPLE = Path(__file__).resolve().parent / "data/github-team.created.json"  # data/NOTICE


def payload() -> bytes:
    return SAMPLE.read_bytes()  # minified, 2,099 bytes


def status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


async def build(path: Path, n: int, body: bytes) -> float:
    """The store of a node that accepted ``n`` events; returns seconds taken."""
    started = time.monotonic()
    store = SqliteStore(path)
    await store.open(REGION, new_incarnation=1)
    deleted = 0
    t0 = int(time.time() * 1000) - n - 60_000  # accepted within the Idempotency-Key TTL
    digest = hashlib.sha256(b"team.created\0" + body).hexdigest()  # as ingest computes it
    step = min(BATCH, max(1000, n // 50))
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        batch = WriteBatch(version_vector={ACTOR: hi})
        for i in range(lo, hi):
            at = t0 + i
            ev = Event(f"evt_{i:010d}", "acme", "team.created", body, REGION, at)
            final = DeliveryStatus.DEAD if i % 100 == 99 else DeliveryStatus.DELIVERED
            d = Delivery(
                f"dlv_{i:010d}", ev.id, "ep_1", "acme", final, 1, None, REGION, at, at + 50
            )
            batch.events.append(ev)
            batch.deliveries.append(d)
            batch.idempotency.append(("acme", f"key-{i}", ev.id, digest, at, REGION))
            body_rec = encode_body({}, ev, None, batch.idempotency[-1], [d])
            batch.records.append(Record(ACTOR, i + 1, "event", body_rec, (at, 0)))
        await store.commit(batch)
        # every peer acked: the log keeps only the last own record (as the node truncates)
        deleted += await store.truncate_log({ACTOR: hi - 1})
        if hi % 200_000 < step or hi == n:
            print(f"  built {hi:,} events ({time.monotonic() - started:.0f} s)", flush=True)
    await store.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    print(f"  log truncated: {deleted:,} records deleted")
    return time.monotonic() - started


def disk(path: Path) -> tuple[int, int]:
    """(bytes of the database files, bytes of the pages in use)."""
    files = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    with sqlite3.connect(path) as db:
        page = db.execute("PRAGMA page_size").fetchone()[0]
        used = db.execute("PRAGMA page_count").fetchone()[0]
        used -= db.execute("PRAGMA freelist_count").fetchone()[0]
    return files, used * page


def serve(
    tmp: Path, n: int, body: bytes, python: str = sys.executable, settle_s: float = 0.0
) -> tuple[float, int, int, float, list[float]]:
    """Start a node (``python -m regionsync.cli``) over the store; (seconds to serving,
    VmRSS kB, VmHWM kB, median ms of ``GET /v1/cluster`` over 5, ms of each ``GET
    /v1/cluster`` during the settle). ``settle_s`` > 0: the node has a peer (never up), so
    it builds its anti-entropy tree in the background; memory is sampled and the cluster
    read every half second that long after serving."""
    port = free_port()
    peer = (
        f'[[peers]]\nregion = "bench-2"\naddress = "127.0.0.1:{free_port()}"\n'
        "[replication]\nactor_check_s = 0\n"
        if settle_s > 0
        else ""
    )
    (tmp / "node.toml").write_text(
        f'region = "{REGION}"\ndata_dir = "{tmp}"\nhttp_listen = "127.0.0.1:{port}"\n'
        f'grpc_listen = "127.0.0.1:{free_port()}"\nlog_level = "warning"\n' + peer
    )
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    proc = subprocess.Popen(
        [python, "-m", "regionsync.cli", "serve", "--config", str(tmp / "node.toml")]
    )
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"node exited with {proc.returncode}")
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - started > 120:
                raise TimeoutError("node not serving within 120 s")
            time.sleep(0.02)
        ready_s = time.monotonic() - started
        rss, hwm = status_kb(proc.pid, "VmRSS"), status_kb(proc.pid, "VmHWM")
        with httpx.Client(base_url=base, timeout=30) as c:
            made = c.post("/v1/tenants", json={"id": "acme", "name": "Acme"})
            assert made.status_code in (201, 409), made.text  # 409: a reused --keep store
            r = c.post(
                "/v1/tenants/acme/events",
                content=b'{"event_type":"team.created","payload":' + body + b"}",
                headers={"Idempotency-Key": "key-0", "Content-Type": "application/json"},
            )  # a key accepted before the restart
            r.raise_for_status()
            assert r.json()["id"] == "evt_0000000000", r.json()  # answered from the store
            old = c.get(f"/v1/tenants/acme/events/evt_{(n - 1) // 2:010d}")
            print(f"  serving: repeat of a stored Idempotency-Key answered with its event; "
                  f"GET of an old event: {old.status_code}")  # fmt: skip
            took = []
            for _ in range(5):  # its counts come from kept rows, not a scan (issue 17)
                t0 = time.perf_counter()
                c.get("/v1/cluster").raise_for_status()
                took.append((time.perf_counter() - t0) * 1000)
            cluster_ms = sorted(took)[2]
            until = time.monotonic() + settle_s
            settle_ms = []
            while time.monotonic() < until:  # the tree's build, in the background
                time.sleep(0.5)
                t0 = time.perf_counter()
                c.get("/v1/cluster").raise_for_status()
                settle_ms.append((time.perf_counter() - t0) * 1000)
                rss, hwm = status_kb(proc.pid, "VmRSS"), status_kb(proc.pid, "VmHWM")
        return ready_s, rss, hwm, cluster_ms, settle_ms
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="build (or reuse) the store in this directory")
    ap.add_argument(
        "--before",
        help="also start this interpreter's regionsync over the store "
        "(e.g. another checkout's .venv/bin/python: the code before issue 17)",
    )
    ap.add_argument(
        "--peer-settle-s",
        type=float,
        default=0.0,
        help="also start the node with a peer and sample its memory this long",
    )
    args = ap.parse_args()
    body = payload()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="regionsync-restart-"))
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / f"{REGION}.db"
    print(f"restart benchmark: {args.events:,} events and deliveries, payload {len(body)} B, "
          f"{os.cpu_count()} cores, store {path}")  # fmt: skip
    try:
        if not path.exists():
            print(f"  store built in {asyncio.run(build(path, args.events, body)):.0f} s")
        files, used = disk(path)
        empty = Path(tempfile.mkdtemp(prefix="regionsync-restart-empty-"))
        try:  # baseline: the same process over an empty store, in this run
            asyncio.run(build(empty / f"{REGION}.db", 1, body))
            base_s, base_rss, _, base_cluster_ms, _ = serve(empty, 1, body)
        finally:
            shutil.rmtree(empty, ignore_errors=True)
        print(f"  baseline, a store of 1 event: serving after {base_s:.2f} s, "
              f"{base_rss / 1024:.0f} MB resident")  # fmt: skip
        if args.before:
            old_s, old_rss, old_hwm, old_cluster_ms, _ = serve(tmp, args.events, body, args.before)
            print(f"  before ({args.before}): serving after {old_s:.2f} s, "
                  f"{old_rss / 1024:.0f} MB resident (peak {old_hwm / 1024:.0f} MB), "
                  f"GET /v1/cluster {old_cluster_ms:.1f} ms")  # fmt: skip
        p_hwm = 0
        if args.peer_settle_s > 0:
            _, p_rss, p_hwm, _, during = serve(tmp, args.events, body,
                                               settle_s=args.peer_settle_s)  # fmt: skip
            print(f"  with a peer (anti-entropy tree built in the background), "
                  f"{args.peer_settle_s:.0f} s after serving: {p_rss / 1024:.0f} MB resident "
                  f"(peak {p_hwm / 1024:.0f} MB); GET /v1/cluster meanwhile: median "
                  f"{statistics.median(during):.1f} ms, p90 "
                  f"{statistics.quantiles(during, n=10)[-1]:.1f} ms, max {max(during):.1f} ms "
                  f"({len(during)} reads)")  # fmt: skip
        ready_s, rss, hwm, cluster_ms, _ = serve(tmp, args.events, body)
        per_event, per_used = files / args.events, used / args.events
        print(f"  time to serving: {ready_s:.2f} s ({ready_s / base_s:.2f}x the baseline)")
        ratio = cluster_ms / base_cluster_ms
        print(f"  GET /v1/cluster: {cluster_ms:.1f} ms median of 5 ({ratio:.2f}x the "
              f"1-event store's {base_cluster_ms:.1f} ms)")  # fmt: skip
        print(f"  resident memory once serving: {rss / 1024:.0f} MB (peak {hwm / 1024:.0f} MB)")
        print(f"  disk: {per_event:,.0f} B/event in files, {per_used:,.0f} B/event in used "
              f"pages, payload {len(body)} B: {per_event / len(body):.2f}x "
              f"({per_used / len(body):.2f}x used)")  # fmt: skip
        checks = [
            (ready_s < GOAL_READY_S, f"time to serving {ready_s:.2f} s < {GOAL_READY_S:.0f} s"),
            (hwm / 1024 < GOAL_RSS_MB, f"peak RSS {hwm / 1024:.0f} MB < {GOAL_RSS_MB:.0f} MB"),
            (
                per_event / len(body) <= GOAL_DISK_RATIO,
                f"disk {per_event / len(body):.2f}x payload <= {GOAL_DISK_RATIO:.0f}x",
            ),
        ]
        if p_hwm:
            what = f"peak RSS with a peer {p_hwm / 1024:.0f} MB < {GOAL_RSS_MB:.0f} MB"
            checks.append((p_hwm / 1024 < GOAL_RSS_MB, what))
        for ok, what in checks:
            print(f"{'PASS' if ok else 'FAIL'}: {what} at {args.events:,} events")
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
