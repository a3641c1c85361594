"""Issue 42: a snapshot or repair reads the registry a key at a time, so the cost of a
batch of state items does not grow with the registry (it copied the registry per batch
of 256 items: a snapshot cost the square of the registry)."""

from __future__ import annotations

import time

from memnodes import converged, eventually, make_node, start

from crdt import LWWRegister, ORSet, Timestamp
from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.peering import stream_pace
from regionsync.runtime import repair

FAST = {"truncate_interval_s": 0.02}


def fill_pairs(n: int) -> tuple[list[str], list[LWWRegister]]:
    """The tree idents and states of ``n`` endpoint url keys, in key order."""
    stamp = Timestamp(1, 0)
    keys = [f"e/ep{i:07d}/url" for i in range(n)]
    states = [LWWRegister.empty().set(f"https://x/{i}", actor="a", stamp=stamp) for i in range(n)]
    return ["r/" + k for k in keys], states


def fill(node, n: int) -> list[str]:
    """``n`` endpoint url keys straight into the registry; their tree idents."""
    idents, states = fill_pairs(n)
    node.catalog.registry.apply({i[2:]: s for i, s in zip(idents, states, strict=True)})
    return idents


class CountingDict(dict):
    """A registry's ``key -> bytes`` map that counts the entries read from it (a whole-map
    read counts every entry)."""

    reads = 0

    def _count(self, n: int) -> None:
        CountingDict.reads += n

    def get(self, key, default=None):  # type: ignore[no-untyped-def]
        self._count(1)
        return super().get(key, default)

    def __getitem__(self, key):  # type: ignore[no-untyped-def]
        self._count(1)
        return super().__getitem__(key)

    def __iter__(self):  # type: ignore[no-untyped-def]
        self._count(len(self))
        return super().__iter__()

    def items(self):  # type: ignore[no-untyped-def]
        self._count(len(self))
        return super().items()

    def keys(self):  # type: ignore[no-untyped-def]
        self._count(len(self))
        return super().keys()

    def values(self):  # type: ignore[no-untyped-def]
        self._count(len(self))
        return super().values()

    def copy(self):  # type: ignore[no-untyped-def]
        self._count(len(self))
        return super().copy()


async def touched_per_batch(net, region: str, n: int) -> tuple[int, int]:
    """(registry entries read, registry items returned) for one batch of 256 idents out
    of a registry of ``n`` keys."""
    node = make_node(net, region, [])
    idents = fill(node, n)
    registry = node.catalog.registry
    registry._raw = CountingDict(registry._raw)
    CountingDict.reads = 0
    items = await node.anti_entropy.state_items(idents[n // 2 : n // 2 + 256])
    reads = CountingDict.reads
    registry._raw = dict(registry._raw)
    assert [kind for kind, _ in items] == ["registry"]
    return reads, len(items)


async def test_a_batch_of_state_items_costs_the_batch_not_the_registry(net) -> None:
    small, _ = await touched_per_batch(net, "a", 1_000)
    large, _ = await touched_per_batch(net, "b", 20_000)
    # before issue 42: 1,000 and 20,000 (every state of the registry, per batch)
    assert 256 <= small == large <= 2 * 256


async def test_state_items_skip_absent_and_empty_states(net) -> None:
    node = make_node(net, "a", [])
    idents = fill(node, 10)
    node.catalog.registry.apply({"e/gone/event_types": ORSet.empty()})  # held, but empty
    items = await node.anti_entropy.state_items([*idents, "r/e/absent/url", "r/e/gone/event_types"])
    assert len(items) == 1
    assert node.catalog.registry.state("e/gone/event_types") is None
    assert node.catalog.registry.state("e/ep0000003/url") is not None


async def test_a_snapshot_cut_midway_resumes_where_it_stopped(net, started) -> None:
    """A fresh region's snapshot cut after a few chunks: the chunks it acked stay merged,
    so the next session's pass finds those buckets equal and sends only the rest."""
    n = 4_000
    store_b = MemoryStore()
    store_a = MemoryStore()  # n keys in a's store, as a restart finds them
    store_a._registry.update({k[2:]: v.to_bytes() for k, v in zip(*fill_pairs(n), strict=True)})
    a = make_node(net, "a", ["b"], store_a, state_chunk_bytes=1024, max_log_records=1, **FAST)
    await start(started, a)
    await a.registry_ops.create_tenant("acme", "Acme")
    await a.registry_ops.create_tenant("beta", "Beta")
    await eventually(lambda: a.replica.behind_floor({}) != [])  # a fresh peer needs repair
    asked: list[list[str]] = [[]]  # registry idents read by the pusher, per pass
    state_items = a.anti_entropy.state_items

    async def reading(idents):
        asked[-1].extend(i for i in idents if i.startswith("r/e/ep"))
        return await state_items(idents)

    a.anti_entropy.state_items = reading
    b = make_node(net, "b", ["a"], store_b, **FAST)
    chunks = 0
    apply_state = b.anti_entropy.apply_state

    async def cutting(items, version_vector=None):
        nonlocal chunks
        reason = await apply_state(items, version_vector)
        chunks += 1
        if chunks == 5 and len(asked) == 1:
            net.partition("a", "b")  # the link drops mid-snapshot
        return reason

    b.anti_entropy.apply_state = cutting
    await start(started, b)
    await eventually(lambda: bool(net.cut) and not a.peers["b"].connected)  # pass 1 over
    got = sum(1 for i in asked[0] if b.catalog.registry.state(i[2:]) is not None)
    asked.append([])
    net.heal()
    await eventually(lambda: converged(a, b))
    assert 0 < got < n, got
    # before (idents in key order, spread over every bucket): 3,700 of 4,000 again after
    # 1,280 merged; now what was not merged, and at most a bucket more (2,729 for 1,279)
    assert len(asked[1]) < n - got + n // 64, (got, len(asked[1]))


async def test_a_snapshot_is_paced_by_repair_bytes_per_s(net, started, monkeypatch) -> None:
    """A snapshot stream waits between chunks so that it sends at most
    ``repair_bytes_per_s`` (the serving side keeps answering while a region joins)."""
    n, rate = 1_000, 40_000
    store_a = MemoryStore()
    store_a._registry.update({k[2:]: v.to_bytes() for k, v in zip(*fill_pairs(n), strict=True)})
    opts = dict(state_chunk_bytes=1024, max_log_records=1, repair_bytes_per_s=rate, **FAST)
    a = make_node(net, "a", ["b"], store_a, **opts)
    await start(started, a)
    await a.registry_ops.create_tenant("acme", "Acme")
    await a.registry_ops.create_tenant("beta", "Beta")
    await eventually(lambda: a.replica.behind_floor({}) != [])
    waits: list[float] = []

    def recording(sent: int, elapsed: float, bytes_per_s: int) -> float:
        waits.append(stream_pace(sent, elapsed, bytes_per_s))
        return waits[-1]

    monkeypatch.setattr(repair, "stream_pace", recording)
    started_at = time.monotonic()
    b = make_node(net, "b", ["a"], MemoryStore(), **FAST)
    await start(started, b)
    await eventually(lambda: converged(a, b))
    size = sum(len(v.to_bytes()) for v in fill_pairs(n)[1])
    # the pass took at least what the rate asks for the bytes sent (all but the last
    # chunk), most of it in the paced waits
    assert time.monotonic() - started_at > 0.5 * size / rate
    assert sum(waits) > 0.25 * size / rate
