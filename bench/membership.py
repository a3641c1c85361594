"""Regions added and removed, processes restarted (issue 40): the version vector and the
Hello stay bounded.

Two regions ``a`` and ``b`` (in-memory stores and network, the real node code). Then, R
times: a rolling restart of ``a`` and ``b`` with a new region ``r<i>`` in their peers, ``r<i>``
starts from an empty store and creates a tenant (so its actor enters every clock), stops,
is removed (``Removals.remove``, what ``POST /v1/cluster/regions/{name}/removal`` runs),
its actor is retired once both acknowledged, and ``a`` and ``b`` are restarted again
without it. Then N restarts of ``a`` over its store, each creating a tenant. Prints the
entries of ``a``'s Hello version vector and the Hello's bytes (protobuf ``ByteSize``) at
the start, at each region's peak and at the end, and PASS/FAIL: after every region left,
the Hello holds no more entries than at the start (the removed actors' are retired) and
is at most ``--max-hello-bytes``.

These restarts are of a single-process region (SQLite-like), which keeps its
incarnation. With ``--pg-restarts N`` a throwaway PostgreSQL server (tests/pgserver.py)
runs a region ``pg`` of one long-lived process peered with ``b``, and N processes are
started on its database one after another, each writing a tenant and stopping: each is
a new actor, retired once gone for ``failover_after_s`` (0.5 s here) and held by ``b``.

    .venv/bin/python bench/membership.py [--regions 5] [--restarts 1000] [--pg-restarts 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import msgpack

from crdt import ORSet
from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.adapters.system import SystemClock, UlidSource, system_rng
from regionsync.config import load_settings
from regionsync.core.pruning import actors_of
from regionsync.runtime.links import hello
from regionsync.runtime.node import Node

TESTS = str(Path(__file__).resolve().parents[1] / "tests")  # tests/pgserver.py


def make(
    net: MemoryNetwork,
    region: str,
    store: MemoryStore | None,
    peers: list[str],
    pg: tuple[str, str, str] | None = None,
) -> Node:
    """A node on ``store``, or with ``pg`` = (url, data dir, holder) a PostgreSQL process."""
    extra = {"store": pg[0], "data_dir": pg[1]} if pg else {}
    settings = load_settings(
        None, region=region, peers=[{"region": p, "address": p} for p in peers],
        # retired counter entries compacted into the sink 2 s after pruning (600 s by
        # default), so the stored clocks settle within the run
        replication={"reconnect_min_s": 0.01, "reconnect_max_s": 0.05, "heartbeat_s": 0.2,
                     "failover_after_s": 0.5, "leader_poll_s": 0.05, "retired_compact_s": 2.0},
        **extra,
    )  # fmt: skip
    clock, rng = SystemClock(), system_rng()
    coordinator = None
    if pg is not None:
        from regionsync.adapters.postgres_coordinator import PostgresCoordinator
        from regionsync.adapters.wiring import build_store

        store = build_store(settings)  # type: ignore[assignment]
        coordinator = PostgresCoordinator(store, region, pg[2])  # type: ignore[arg-type]
    return Node(
        settings, store=store, clock=clock, rng=rng, ids=UlidSource(clock, rng),  # type: ignore[arg-type]
        transport=net.transport(region), sender=None, resolver=None,  # type: ignore[arg-type]
        coordinator=coordinator,
    )  # fmt: skip


async def until(check, what: str, timeout_s: float = 30.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"FAIL: {what} not reached in {timeout_s} s")
        await asyncio.sleep(0.01)


def stored(node: Node) -> tuple[int, int, int]:
    """(stored version vector entries, actors with an entry in a stored registry clock or
    counter, the stopped-process markers' bytes). An OR-Set element's own dot is its
    identity, not a clock entry: a tenant created by a stopped process keeps it."""
    actors: set[str] = set()
    for _key, state in node.catalog.registry.non_empty():
        found = actors_of(state)
        if isinstance(state, ORSet):
            found -= {d[0] for dots in state.entries.values() for d in dots}
        actors |= found
    markers = sum(
        len(msgpack.packb(m.to_value())) for m in node.catalog.registry.process_markers().values()
    )
    return len(node.writer.version_vector), len(actors), markers


def pinned(node: Node) -> int:
    """Actors no longer in the version vector (retired and pruned) that an OR-Set still
    names because an element they created exists: its dot is its identity (a tenant's
    or endpoint's generation), so that set's context keeps the actor too."""
    vv, out = node.writer.version_vector, set()
    for _key, state in node.catalog.registry.non_empty():
        if isinstance(state, ORSet):
            out |= {d[0] for dots in state.entries.values() for d in dots if d[0] not in vv}
    return len(out)


def size(node: Node) -> tuple[int, int]:
    """(entries of the Hello's version vector, the Hello's bytes)."""
    h = hello(node.links)
    return len(h.hello.version_vector), h.ByteSize()


class Cluster:
    def __init__(self) -> None:
        self.net = MemoryNetwork()
        self.stores = {"a": MemoryStore(), "b": MemoryStore()}
        self.nodes: dict[str, Node] = {}

    async def restart(self, region: str, peers: list[str]) -> Node:
        if region in self.nodes:
            await self.nodes.pop(region).stop()
        node = make(self.net, region, self.stores[region], peers)
        await node.start()
        self.nodes[region] = node
        return node

    async def rolling(self, extra: list[str]) -> None:
        """Restart a, then b, each with the other and ``extra`` as peers (config change)."""
        await self.restart("a", ["b", *extra])
        await self.restart("b", ["a", *extra])

    async def add_and_remove(self, name: str) -> tuple[int, int]:
        await self.rolling([name])
        self.stores[name] = MemoryStore()
        new = await self.restart(name, ["a", "b"])
        await new.registry_ops.create_tenant(f"t-{name}", name)
        a, b = self.nodes["a"], self.nodes["b"]
        await until(lambda: all(n.catalog.registry.tenant(f"t-{name}") for n in (a, b)), "sync")
        actor = new.writer.actor
        await until(lambda: actor in a.writer.durable_vv, "the new actor in a's durable vector")
        peak = size(a)
        await self.nodes.pop(name).stop()
        await a.removals.remove(name)
        await until(lambda: actor in a.removals.retired() and actor in b.removals.retired(),
                    f"{actor} retired")  # fmt: skip
        await a.removals.publish()
        await until(lambda: actor in b.catalog.registry.removals()[name].retired, "marker")
        await self.rolling([])  # the removed region leaves both peers lists
        return peak


async def run(regions: int, restarts: int, max_bytes: int) -> bool:
    c = Cluster()
    await c.rolling([])
    await c.nodes["a"].registry_ops.create_tenant("t-a", "a")
    await c.nodes["b"].registry_ops.create_tenant("t-b", "b")
    a = c.nodes["a"]
    await until(lambda: len(a.writer.durable_vv) == 2, "a and b in a's vector")
    start = size(a)
    print(f"start: {start[0]} entries, {start[1]} bytes")
    for i in range(1, regions + 1):
        peak = await c.add_and_remove(f"r{i}")
        print(f"r{i}: peak {peak[0]} entries, {peak[1]} bytes; after removal {size(c.nodes['a'])}")
    t0 = time.monotonic()
    for i in range(restarts):
        node = await c.restart("a", ["b"])
        await node.registry_ops.create_tenant(f"restart-{i}", "x")
    if restarts:
        print(f"{restarts} restarts of a in {time.monotonic() - t0:.1f} s")
    a = c.nodes["a"]
    await until(lambda: a.writer.durable_vv == a.writer.version_vector, "a's vv durable")
    end = size(a)
    # the removed regions' actors leave the stored state once pruned everywhere
    await until(lambda: stored(a)[:2] == (2, 2) and stored(c.nodes["b"])[:2] == (2, 2),
                "the removed actors pruned from the stored state", timeout_s=60)  # fmt: skip
    vv, clocks, _ = stored(a)
    print(f"end: {end[0]} entries, {end[1]} bytes; stored: version vector {vv} entries, "
          f"{clocks} actors in registry clocks")  # fmt: skip
    ok_entries, ok_bytes = end[0] <= start[0], end[1] <= max_bytes
    ok_stored = vv <= start[0] and clocks <= start[0]
    print(f"{'PASS' if ok_entries else 'FAIL'}: Hello entries {end[0]} <= {start[0]} at start")
    print(f"{'PASS' if ok_bytes else 'FAIL'}: Hello {end[1]} bytes <= {max_bytes}")
    print(f"{'PASS' if ok_stored else 'FAIL'}: stored {vv} vv entries, {clocks} clock actors "
          f"<= {start[0]}")  # fmt: skip
    for n in c.nodes.values():
        await n.stop()
    return ok_entries and ok_bytes and ok_stored


async def run_pg(
    restarts: int, max_bytes: int, settle_s: float = 120.0, keep_every: int = 100
) -> bool:
    """``--pg-restarts``: N PostgreSQL process starts in one region; its Hello at the end.
    Every ``keep_every``-th process leaves the tenant it created (the others delete it)."""
    sys.path.insert(0, TESTS)
    from pgserver import PgServer

    server = PgServer()
    server.start()
    tmp = tempfile.mkdtemp(prefix="membership-")
    try:
        url = server.create_database("restarts")
        net = MemoryNetwork()
        keeper = make(net, "pg", None, ["b"], (url, tmp, "keeper"))
        b = make(net, "b", MemoryStore(), ["pg"])
        await keeper.start()
        await b.start()
        await keeper.registry_ops.create_tenant("t-pg", "pg")
        await until(lambda: b.catalog.registry.tenant("t-pg") is not None, "sync")
        start = size(keeper)
        print(f"pg start: {start[0]} entries, {start[1]} bytes")
        t0 = time.monotonic()
        peak = (0, 0, 0)
        for i in range(restarts):
            p = make(net, "pg", None, ["b"], (url, tmp, f"p{i}"))
            await p.start()
            # a process's writes: a tenant's name (a clock), a counter, a set's context
            await p.registry_ops.patch_tenant("t-pg", {"name": f"by p{i}"})
            await p.ingest.publish("t-pg", "x", b"{}", None)
            await p.registry_ops.create_tenant(f"p{i}", "x")
            if (i + 1) % keep_every:
                await p.registry_ops.delete_tenant(f"p{i}")
            await p.stop()
            peak = max(peak, stored(keeper))
            if (i + 1) % 100 == 0:
                print(f"  {i + 1} starts, {time.monotonic() - t0:.1f} s: keeper's Hello "
                      f"{size(keeper)}, stored {stored(keeper)}", flush=True)  # fmt: skip
        print(f"{restarts} PostgreSQL process starts in {time.monotonic() - t0:.1f} s")
        t1 = time.monotonic()
        # bounded by what is live: the keeper's actor and b's (b may write custody
        # records under load), plus the counter sink in the stored clocks
        live = 2

        def settled() -> bool:
            return all(stored(n)[0] <= live and stored(n)[1] <= live + 1 for n in (keeper, b))

        try:
            await until(
                lambda: size(keeper)[0] <= live and size(b)[0] <= live and settled(),
                "stopped processes retired and pruned", timeout_s=settle_s,
            )  # fmt: skip
        except SystemExit:
            for n in (keeper, b):
                print(n.region, size(n), stored(n), sorted(n.writer.version_vector.items())[:8],
                      n.catalog.registry.process_markers(), file=sys.stderr)  # fmt: skip
            raise
        end, kept = size(keeper), stored(keeper)
        print(f"pg end ({time.monotonic() - t1:.1f} s after the last start): Hello {end[0]} "
              f"entries, {end[1]} bytes; b's Hello {size(b)[0]} entries; stored (vv entries, "
              f"clock actors, marker bytes) {kept}, b {stored(b)}, peak {peak}")  # fmt: skip
        ok = end[0] <= live and end[1] <= max_bytes and kept[2] <= max_bytes
        print(f"{'PASS' if ok else 'FAIL'}: pg Hello {end[0]} entries <= {live}, "
              f"{end[1]} bytes <= {max_bytes}, marker {kept[2]} bytes <= {max_bytes}")  # fmt: skip
        left = restarts // keep_every  # tenants of stopped processes that still exist
        held = pinned(keeper)
        print(f"{'PASS' if held <= left else 'FAIL'}: OR-Set contexts name {held} retired "
              f"actors, one per creator of the {left} tenants left by stopped processes "
              f"(<= {left}: bounded by what exists, not by the starts)")  # fmt: skip
        ok = ok and held <= left
        for n in (keeper, b):
            await n.stop()
        return ok
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--regions", type=int, default=5)
    p.add_argument("--restarts", type=int, default=1000)
    p.add_argument("--max-hello-bytes", type=int, default=200)
    p.add_argument("--pg-restarts", type=int, default=0)
    p.add_argument("--pg-keep-every", type=int, default=100,
                   help="every Nth PostgreSQL process leaves the tenant it created")  # fmt: skip
    p.add_argument(
        "--settle-s",
        type=float,
        default=120.0,
        help="wait this long after the last start for retirement and pruning",
    )
    args = p.parse_args()
    ok = asyncio.run(run(args.regions, args.restarts, args.max_hello_bytes))
    if args.pg_restarts:
        pg = run_pg(args.pg_restarts, args.max_hello_bytes, args.settle_s, args.pg_keep_every)
        ok = asyncio.run(pg) and ok
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
