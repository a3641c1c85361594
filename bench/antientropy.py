"""Anti-entropy with state that outgrows a rebuild (issue 17): time to the first round
trip of a repair between two nodes holding N keys, with the tree kept by commits vs
built from scratch per pass (the code before issue 17), measured in the same run.

Two Nodes (in-memory stores and network) hold the same N/2 events and N/2 final
deliveries (written straight into their stores in batches, as a restart finds them);
they then differ in one event and its delivery, committed on the pusher through its write
path. Baseline:
a from-scratch build of each node's tree (``AntiEntropy._build``, the O(items) work the
old ``state_tree`` did on both sides before the first answer could come back). Then both
trees are built once (what a node with peers does in the background at start) and the
pusher runs one anti-entropy pass: the time from its start to the first answer is the
figure (goal < 1 s), and the differing delivery must arrive. Also prints the tree's cost
per changed item (one commit of 20,000 delivery changes) and the resident memory the
two trees added.

    .venv/bin/python bench/antientropy.py [--keys 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time

from replication import node  # bench/replication.py: a node with unserved peers

from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.core.model import Delivery, DeliveryStatus, Event, WriteBatch
from regionsync.runtime.links import hello
from regionsync.runtime.repair import AntiEntropyPass
from regionsync.runtime.state import PeerStatus

GOAL_S = 1.0
PAYLOAD = b'{"action":"opened","number":1}'


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class FirstAnswer:
    """Wraps a PeerStream: when the first answer arrived (monotonic s), round trips."""

    def __init__(self, inner):
        self.inner, self.first_at, self.round_trips = inner, None, 0

    async def send(self, msg):
        self.round_trips += 1
        await self.inner.send(msg)

    async def recv(self):
        msg = await self.inner.recv()
        if self.first_at is None:
            self.first_at = time.monotonic()
        return msg

    async def close(self):
        await self.inner.close()


def delivery(i: int, status: DeliveryStatus = DeliveryStatus.DELIVERED) -> Delivery:
    return Delivery(
        id=f"dl_{i:08d}", event_id=f"ev_{i:08d}", endpoint_id="ep_1", tenant="acme",
        status=status, attempts=1, next_attempt_at_ms=None, region="a",
        created_at_ms=1_700_000_000_000 + i, updated_at_ms=1_700_000_000_000 + i,
    )  # fmt: skip


async def fill(stores: list[MemoryStore], n: int) -> None:
    """N/2 events and N/2 delivered deliveries into every store, 50,000 rows a commit."""
    half = n // 2
    for lo in range(0, half, 50_000):
        hi = min(half, lo + 50_000)
        batch = WriteBatch(
            events=[
                Event(f"ev_{i:08d}", "acme", "issues.opened", PAYLOAD, "a", 1_700_000_000_000)
                for i in range(lo, hi)
            ],
            deliveries=[delivery(i) for i in range(lo, hi)],
        )
        for s in stores:
            await s.commit(batch)


async def main(n: int) -> None:
    net = MemoryNetwork()
    store_a, store_b = MemoryStore(), MemoryStore()
    t0 = time.monotonic()
    await store_a.open("a", 1)
    await store_b.open("b", 1)
    await fill([store_a, store_b], n)
    a, b = node(net, "a", store_a), node(net, "b", store_b, ["a"])
    await a.start()
    await b.start()
    print(f"N = {n:,} keys per node ({n // 2:,} events, {n // 2:,} deliveries)")
    print(f"  setup {time.monotonic() - t0:.1f} s")

    await b.anti_entropy.warm()  # b started its build at start (it has a peer)
    rss0 = rss_mb()
    t = time.monotonic()
    await a.anti_entropy.warm()
    built_s, grew = time.monotonic() - t, rss_mb() - rss0
    print(f"  one node's tree built once (at start, in the background): {built_s:.2f} s, "
          f"+{grew:.0f} MB RSS")  # fmt: skip

    # baseline: the old per-pass work, a from-scratch tree on each side
    t = time.monotonic()
    old_a = await a.anti_entropy._build()
    old_b = await b.anti_entropy._build()
    old_s = time.monotonic() - t
    del old_a, old_b
    print(f"  from-scratch trees (old: built per pass, both sides): {old_s:.2f} s")

    # the cost of keeping the tree: 20,000 delivery changes in one commit
    changed = [
        dataclasses.replace(delivery(i), attempts=2, updated_at_ms=1_800_000_000_000)
        for i in range(0, min(n // 2, 20_000))
    ]
    batch = WriteBatch(deliveries=changed)
    await a.store.commit(batch)
    t = time.monotonic()
    a.anti_entropy._apply(a.anti_entropy.tree, batch)  # what a's commit observer does
    per_item_us = (time.monotonic() - t) / len(changed) * 1e6
    await b.store.commit(batch)  # b holds the same changes (they were replicated)
    b.anti_entropy._apply(b.anti_entropy.tree, batch)
    print(f"  tree upkeep: {per_item_us:.1f} us per changed delivery")

    # the difference: an event and its delivery that only a holds (through its write path)
    differing = delivery(n)
    event = Event(f"ev_{n:08d}", "acme", "issues.opened", PAYLOAD, "a", 1_700_000_000_000)
    await a.writer.submit(WriteBatch(events=[event], deliveries=[differing]))
    builds = (a.anti_entropy.builds, b.anti_entropy.builds)  # the baseline's and warm's

    raw = await a.transport.connect("b", 10.0)
    await raw.send(hello(a.links))  # the handshake is not part of the repair
    await raw.recv()
    stream = FirstAnswer(raw)
    t = time.monotonic()
    await AntiEntropyPass(a.links, PeerStatus("b", "b"), stream).run()
    total_s = time.monotonic() - t
    first_s = stream.first_at - t
    got = await b.store.get_delivery(differing.id)
    assert got is not None and got == differing, "not repaired"
    assert (a.anti_entropy.builds, b.anti_entropy.builds) == builds, "a tree was rebuilt"
    print(
        f"  repair pass: first round trip after {first_s * 1000:.1f} ms, whole pass "
        f"{total_s * 1000:.1f} ms, {stream.round_trips} round trips, "
        f"{b.counters['anti_entropy_items']} items merged"
    )
    print(
        f"  old: first round trip after >= {old_s:.2f} s (both trees built first); "
        f"ratio new/old {first_s / old_s:.4f}"
    )
    verdict = "PASS" if first_s < GOAL_S else "FAIL"
    print(f"{verdict}: first round trip {first_s:.3f} s < {GOAL_S} s at {n:,} keys")
    await stream.close()
    await a.stop()
    await b.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    asyncio.run(main(ap.parse_args().keys))
