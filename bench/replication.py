"""Anti-entropy cost: bytes and round trips to repair 1 differing key among N.

Two Nodes (in-memory store and network) hold the same N registry keys except one whose
state differs; the pusher runs one anti-entropy pass (runtime.replication) towards the
other over a stream that counts serialized bytes and request/answer round trips.

    .venv/bin/python bench/replication.py [N]      # default 1,000,000
"""

from __future__ import annotations

import asyncio
import sys
import time

from crdt import LWWRegister, Timestamp
from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.adapters.system import SystemClock, UlidSource, system_rng
from regionsync.config import load_settings
from regionsync.core.model import WriteBatch
from regionsync.runtime.links import hello
from regionsync.runtime.node import Node
from regionsync.runtime.repair import AntiEntropyPass


class Counting:
    """Wraps a PeerStream: bytes sent each way and round trips (sends by the pusher)."""

    def __init__(self, inner):
        self.inner, self.sent, self.received, self.round_trips = inner, 0, 0, 0

    async def send(self, msg):
        self.sent += msg.ByteSize()
        self.round_trips += 1
        await self.inner.send(msg)

    async def recv(self):
        msg = await self.inner.recv()
        if msg is not None:
            self.received += msg.ByteSize()
        return msg

    async def close(self):
        await self.inner.close()


def node(net: MemoryNetwork, region: str, store: MemoryStore, peers: list[str] = ()) -> Node:
    # a peer at an address nobody serves: accepted when it dials in, never dialed
    settings = load_settings(
        None, region=region, peers=[{"region": p, "address": "nowhere"} for p in peers]
    )
    clock = SystemClock()
    rng = system_rng()
    return Node(
        settings, store=store, clock=clock, rng=rng, ids=UlidSource(clock, rng),
        transport=net.transport(region), sender=None, resolver=None,  # type: ignore[arg-type]
    )  # fmt: skip


async def main(n: int) -> None:
    net = MemoryNetwork()
    store_a, store_b = MemoryStore(), MemoryStore()
    t0 = time.monotonic()
    states = {
        f"e/ep_{i:07d}/description": LWWRegister.empty().set(
            f"endpoint {i}", actor="a:1", stamp=Timestamp(1_700_000_000_000, i)
        )
        for i in range(n)
    }
    key = "e/ep_0000042/description"
    # the states are in the stores when the nodes start (their trees are built from them)
    await store_b.open("b", 1)
    await store_b.commit(WriteBatch(registry={k: v.to_bytes() for k, v in states.items()}))
    # a holds a later write of one key (it dominates b's state of that key)
    newer = states[key].set("newer", actor="a:1", stamp=Timestamp(1_800_000_000_000, 0))
    await store_a.open("a", 1)
    await store_a.commit(
        WriteBatch(registry={k: v.to_bytes() for k, v in {**states, key: newer}.items()})
    )
    a, b = node(net, "a", store_a), node(net, "b", store_b, ["a"])
    await a.start()
    await b.start()
    a.replica.log_floor = {"a:1": 1}  # b is behind a's log floor: anti-entropy
    t1 = time.monotonic()
    raw = await a.transport.connect("b", 10.0)
    await raw.send(hello(a.links))  # the handshake is not part of the repair
    await raw.recv()
    stream = Counting(raw)
    vv = await AntiEntropyPass(a.links, a.peers.get("b") or _status(), stream).run()
    t2 = time.monotonic()
    assert a.catalog.registry.state_hash() == b.catalog.registry.state_hash(), "not repaired"
    print(f"N={n:,} keys, 1 differing")
    print(f"  setup {t1 - t0:.1f} s, repair {t2 - t1:.1f} s (a's tree built by it, b's at start)")
    print(f"  round trips: {stream.round_trips}")
    print(
        f"  bytes: {stream.sent:,} sent + {stream.received:,} received = "
        f"{stream.sent + stream.received:,} ({(stream.sent + stream.received) / 1024:.1f} KiB)"
    )
    print(f"  items transferred: {b.counters['anti_entropy_items']}, peer vv after: {vv}")
    await stream.close()
    await a.stop()
    await b.stop()


def _status():
    from regionsync.runtime.node import PeerStatus

    return PeerStatus("b", "b")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000))
