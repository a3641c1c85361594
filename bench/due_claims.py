"""Cost of claiming due deliveries behind a blocked backlog (issue 14).

The delivery worker asks the store for due deliveries excluding the endpoints it cannot
start now (full lanes, a tenant at its cap). This measures one such ``due_deliveries``
call on a real SQLite store (and, with ``--postgres``, a throwaway PostgreSQL server,
tests/pgserver.py) as the excluded endpoints' due backlog grows, against the same call
with no backlog measured in the same run (interleaved batches, the fastest batch of each
size counts: the machine's other load adds only noise). Goal: the ratio at the largest backlog <= 2x
(the claim costs O(endpoints + rows claimed), not O(blocked backlog)).

    .venv/bin/python bench/due_claims.py [--backlog 10000] [--calls 300] [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent / "tests"))

from regionsync.adapters.postgres_store import PostgresStore  # noqa: E402
from regionsync.adapters.sqlite_store import SqliteStore  # noqa: E402
from regionsync.core.model import Delivery, DeliveryStatus, WriteBatch  # noqa: E402

REGION = "bench"
BLOCKED = [f"ep_noisy_{i}" for i in range(8)]


def _rows(backlog: int) -> list[Delivery]:
    """``backlog`` due deliveries of 8 blocked endpoints, due before 3 of an open one."""

    def d(did: str, ep: str, tenant: str, at: int) -> Delivery:
        return Delivery(did, "e" + did, ep, tenant, DeliveryStatus.PENDING, 0, at, REGION, 0, 0)

    rows = [d(f"n{i:07}", BLOCKED[i % 8], "noisy", i) for i in range(backlog)]
    return rows + [d(f"q{i}", "ep_quiet", "quiet", 10**9 + i) for i in range(3)]


async def _costs(stores: dict[int, object], calls: int) -> dict[int, float]:
    """Per-call ms of each store (key: its backlog), timed in interleaved batches of 10
    calls (so load from elsewhere hits every size alike); the fastest batch counts."""
    inflight = {n: [f"n{i:07}" for i in range(min(n, 32))] for n in stores}
    best = dict.fromkeys(stores, float("inf"))
    for _ in range(max(calls // 10, 1)):
        for n, store in stores.items():
            t = time.perf_counter()
            for _ in range(10):
                got = await store.due_deliveries(REGION, 2 * 10**9, 64, inflight[n], BLOCKED)  # type: ignore[attr-defined]
            best[n] = min(best[n], (time.perf_counter() - t) / 10 * 1000)
            assert [x.id for x in got] == ["q0", "q1", "q2"]
    return best


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backlog", type=int, default=10_000, help="largest blocked backlog")
    ap.add_argument("--calls", type=int, default=300, help="due_deliveries calls per size")
    ap.add_argument("--postgres", action="store_true", help="also a throwaway PostgreSQL")
    args = ap.parse_args()
    print(f"bench/due_claims.py: {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    sizes = [0, args.backlog // 10, args.backlog]
    server = None
    kinds = ["sqlite"]
    if args.postgres:
        from pgserver import PgServer

        server = PgServer()
        server.start()
        kinds.append("postgresql")
    ok = True
    try:
        for kind in kinds:
            stores: dict[int, object] = {}
            for n in sizes:
                if kind == "sqlite":
                    store: object = SqliteStore(Path(tempfile.mkdtemp()) / "n.db")
                else:
                    assert server is not None
                    store = PostgresStore(server.create_database(f"due_{n}"))
                await store.open(REGION, 1)  # type: ignore[attr-defined]
                await store.commit(WriteBatch(deliveries=_rows(n)))  # type: ignore[attr-defined]
                stores[n] = store
            try:
                cost = await _costs(stores, args.calls)
            finally:
                for store in stores.values():
                    await store.close()  # type: ignore[attr-defined]
            ratio = cost[args.backlog] / cost[0]
            ok = ok and ratio <= 2.0
            line = ", ".join(f"{n} blocked: {ms:.3f} ms" for n, ms in cost.items())
            print(f"  {kind:10s} per claim {line}  ratio {ratio:.2f}x  goal <= 2x "
                  f"{'PASS' if ratio <= 2.0 else 'FAIL'}")  # fmt: skip
    finally:
        if server is not None:
            server.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
