"""The pruning hook's cost per publish (issue 40): ``Pruner.apply`` is the registry's merge
for every record and state a node applies once a removal record or process marker exists
(runtime/pruning.py), so every publish's usage-counter delta goes through it.

Three regions on in-memory stores and network (the real node code, bench/membership.py's
nodes); ``c`` writes, stops and is removed; once ``a`` pruned it (a retired actor exists,
so the hook takes its slow path), ``a`` runs, in alternating rounds with the hook and with
``Catalog.merge_hook = None`` (the plain merge):

- ``apply``: ``Catalog.apply`` of one usage-counter delta (what a publish merges), N times;
- ``publish``: N publishes to ``a`` at ``--rate`` per second (a fixed rate: the CPU of a
  publish, not the loop's idle time, is what is compared).

Prints the median CPU (``time.process_time``) per operation of each, and the difference.

    .venv/bin/python bench/prune_hook.py [--n 20000] [--publishes 2000] [--rate 500]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from membership import make, until  # noqa: E402

from crdt import PNCounter  # noqa: E402
from regionsync.adapters.memory_store import MemoryStore  # noqa: E402
from regionsync.adapters.memory_transport import MemoryNetwork  # noqa: E402

USAGE = "t/acme/usage/events_published"


async def setup() -> tuple[object, list[object]]:
    net = MemoryNetwork()
    nodes = [
        make(net, r, MemoryStore(), [p for p in "abc" if p != r]) for r in "abc"
    ]  # fmt: skip
    for n in nodes:
        await n.start()
    a, b, c = nodes
    await a.registry_ops.create_tenant("acme", "Acme")
    await until(lambda: c.catalog.registry.has_tenant("acme"), "acme at c")
    for _ in range(3):
        await c.ingest.publish("acme", "x", b"{}", None)
    await until(lambda: a.catalog.registry.get(USAGE, PNCounter).value() == 3, "c's publishes")
    gone = c.writer.actor
    await c.stop()
    await a.removals.remove("c")
    await until(lambda: gone not in a.writer.version_vector, f"{gone} pruned at a", 60)
    assert a.removals.any_retired()
    return a, [a, b]


def apply_round(a, hook, n: int) -> float:  # noqa: ANN001
    a.catalog.merge_hook = hook
    counter = a.catalog.registry.get(USAGE, PNCounter)
    deltas = [counter.increment(a.writer.actor, i + 1) for i in range(n)]
    t0 = time.process_time()
    for d in deltas:
        a.catalog.apply({USAGE: d})
    return (time.process_time() - t0) / n


async def publish_round(a, hook, n: int, rate: float) -> float:  # noqa: ANN001
    a.catalog.merge_hook = hook
    t0, start = time.process_time(), time.monotonic()
    for i in range(n):
        await a.ingest.publish("acme", "x", b'{"i":1}', None)
        ahead = start + (i + 1) / rate - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)
    return (time.process_time() - t0) / n


async def main(args: argparse.Namespace) -> None:
    a, running = await setup()
    hook = a.catalog.merge_hook
    res: dict[str, list[float]] = {k: [] for k in ("apply+", "apply-", "pub+", "pub-")}
    try:
        for _ in range(args.rounds):
            res["apply+"].append(apply_round(a, hook, args.n))
            res["apply-"].append(apply_round(a, None, args.n))
            res["pub+"].append(await publish_round(a, hook, args.publishes, args.rate))
            res["pub-"].append(await publish_round(a, None, args.publishes, args.rate))
    finally:
        a.catalog.merge_hook = hook
        for n in running:
            await n.stop()
    med = {k: statistics.median(v) * 1e6 for k, v in res.items()}
    print(f"apply of one counter delta: {med['apply+']:.1f} us with the hook, "
          f"{med['apply-']:.1f} us without (+{med['apply+'] - med['apply-']:.1f} us)")  # fmt: skip
    print(f"publish at {args.rate:g}/s: {med['pub+']:.0f} us CPU with the hook, "
          f"{med['pub-']:.0f} us without (+{med['pub+'] - med['pub-']:.0f} us, "
          f"{100 * (med['pub+'] / med['pub-'] - 1):+.1f} %)")  # fmt: skip


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--publishes", type=int, default=2_000)
    p.add_argument("--rate", type=float, default=500.0)
    p.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(p.parse_args()))
