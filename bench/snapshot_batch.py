"""Issue 42: the cost of one batch of 256 anti-entropy state items against the
registry's size. Before: ``state_items`` copied the registry per batch (``states()``),
so a snapshot cost the square of the registry; now it looks each key up. Prints, per
registry size, the time of one batch read the old way (a copy, as before) and the new
way (``AntiEntropy.state_items``), and the whole snapshot's projected cost.

    .venv/bin/python bench/snapshot_batch.py [--keys 10000 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from replication import node  # bench/replication.py: a node with unserved peers

from crdt import LWWRegister, Timestamp
from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.memory_transport import MemoryNetwork

BATCH = 256


async def one(n: int) -> tuple[float, float]:
    nd = node(MemoryNetwork(), "a", MemoryStore())
    stamp = Timestamp(1, 0)
    reg = nd.catalog.registry
    reg.apply(
        {
            f"e/ep{i:07d}/url": LWWRegister.empty().set(f"https://x/{i}", actor="a", stamp=stamp)
            for i in range(n)
        }
    )
    idents = ["r/" + k for k in sorted(reg.states())][n // 2 : n // 2 + BATCH]
    t = time.perf_counter()
    states = reg.states()  # what each batch did before issue 42
    _ = {i[2:]: states[i[2:]] for i in idents if i[2:] in states}
    old = time.perf_counter() - t
    t = time.perf_counter()
    items = await nd.anti_entropy.state_items(idents)
    new = time.perf_counter() - t
    assert len(items) == 1
    return old, new


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, nargs="+", default=[10_000, 100_000])
    args = ap.parse_args()
    print(
        f"{'keys':>9} {'old batch ms':>13} {'new batch ms':>13}"
        f" {'old snapshot s':>15} {'new snapshot s':>15}"
    )
    for n in args.keys:
        old, new = asyncio.run(one(n))
        batches = n / BATCH
        print(
            f"{n:>9} {old * 1e3:>13.2f} {new * 1e3:>13.3f}"
            f" {old * batches:>15.1f} {new * batches:>15.2f}"
        )


if __name__ == "__main__":
    main()
