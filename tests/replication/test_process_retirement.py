"""Actors of stopped PostgreSQL processes retire (issue 40, runtime/removal.py): once a
process has been gone for failover_after_s and every region holds all its records, its
actor leaves the Hello of its region and of the peer, so the Hello's version vector is
bounded by the live processes plus a constant however often processes restart."""

from __future__ import annotations

from pathlib import Path

from memnodes import eventually
from test_cohort import node
from test_pruning import holds

from regionsync.demo import free_port
from regionsync.runtime.links import hello


def fast(n):  # noqa: ANN001, ANN201
    if hasattr(n.store, "process_name"):  # one ``processes`` row each, as real processes
        n.store.process_name = f"test/{n.settings.region}/{id(n)}"
    repl = n.settings.replication
    repl.failover_after_s, repl.heartbeat_s = 0.5, 0.1
    n.removals.grace_ms = 500
    return n


async def test_stopped_processes_actors_retire_everywhere(tmp_path: Path, pg_url: str) -> None:
    pg_port, lite_port = free_port(), free_port()
    a = fast(node(tmp_path, "pg", pg_port, "lite", lite_port, pg_url, "a"))
    lite = fast(node(tmp_path, "lite", lite_port, "pg", pg_port, "sqlite"))
    running = [a, lite]
    stopped_actors = []
    try:
        await a.start()
        await lite.start()
        for i in range(3):  # three processes, each started, writing, then stopped
            p = fast(node(tmp_path, "pg", pg_port, "lite", lite_port, pg_url, f"p{i}"))
            running.append(p)
            await p.start()
            await p.registry_ops.create_tenant(f"t{i}", "T")
            await eventually(lambda i=i: lite.catalog.registry.has_tenant(f"t{i}"))
            stopped_actors.append(p.writer.actor)
            await p.stop()
            running.remove(p)

        def retired_everywhere() -> bool:
            return all(
                x not in hello(n.links).hello.version_vector
                for n in (a, lite)
                for x in stopped_actors
            )

        await eventually(retired_everywhere, timeout_s=30)
        assert a.writer.actor in hello(a.links).hello.version_vector  # the live one stays
        for n in (a, lite):
            assert all(n.removals.is_retired(x) for x in stopped_actors)
            assert all(n.catalog.registry.has_tenant(f"t{i}") for i in range(3))
        # bounded: the live process, the peer's actor (and nothing per stopped process)
        assert len(hello(a.links).hello.version_vector) <= 2

        # pruned from the stored states and version vectors everywhere, alike, and the
        # marker compacted into its floor (bounded however many processes started)
        def pruned_everywhere() -> bool:
            return all(
                x not in n.writer.version_vector and not holds(n, x)
                for n in (a, lite)
                for x in stopped_actors
            )

        await eventually(pruned_everywhere, timeout_s=30)
        await eventually(lambda: not a.catalog.registry.process_markers()["pg"].retired)
        assert a.catalog.registry.process_markers()["pg"].floor >= max(
            int(x.rpartition(":")[2]) for x in stopped_actors
        )
        await eventually(lambda: a.catalog.registry.digest() == lite.catalog.registry.digest())
        assert not set(stopped_actors) & set(await lite.store.load_version_vector())
        # the stopped processes' rows leave ``processes`` and ``actors`` (the highest
        # incarnation stays: new actors count on from it); 917426d kept all of them
        incs = await a.store._fetch("SELECT incarnation FROM processes", ())
        assert sorted(r[0] for r in incs) == [a.writer.incarnation], incs
        last = max(int(x.rpartition(":")[2]) for x in stopped_actors)
        assert set(await a.store.actor_holders()) == {a.writer.incarnation, last}
        # records keep flowing after retirement
        await a.registry_ops.create_tenant("after", "A")
        await eventually(lambda: lite.catalog.registry.has_tenant("after"))
    finally:
        for n in running:
            await n.stop()
