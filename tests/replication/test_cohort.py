"""Two node processes of one region on one PostgreSQL database (runtime/cohort.py, issue
16), in-process with real gRPC on loopback to a SQLite region: actors of their own, one
replication holder, following the other's records (also after they were truncated), and
the role taken over when the holder stops."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from memnodes import RecordingSender, StaticResolver, eventually

from regionsync.adapters.grpc_transport import GrpcTransport
from regionsync.adapters.postgres_coordinator import PostgresCoordinator
from regionsync.adapters.postgres_store import PostgresStore
from regionsync.adapters.system import SystemClock, UlidSource, system_rng
from regionsync.adapters.wiring import build_store
from regionsync.config import load_settings
from regionsync.core.capabilities import ALL, BASELINE
from regionsync.core.records import decode_body
from regionsync.demo import free_port
from regionsync.runtime.node import Node


def node(tmp: Path, region: str, port: int, peer: str, peer_port: int, store: str,
         holder: str = "", follow_ms: float = 20.0) -> Node:  # fmt: skip
    settings = load_settings(
        None,
        region=region,
        data_dir=tmp / region,
        store=store,
        grpc_listen=f"127.0.0.1:{port}",
        peers=[{"region": peer, "address": f"127.0.0.1:{peer_port}"}],
        replication={"reconnect_min_s": 0.05, "reconnect_max_s": 0.2, "truncate_interval_s": 0.05,
                     "leader_poll_s": 0.05, "follow_interval_ms": follow_ms,
                     "custody_interval_s": 0.1, "heartbeat_s": 0.1},
    )  # fmt: skip
    clock, rng = SystemClock(), system_rng()
    st = build_store(settings)
    coordinator = None
    if isinstance(st, PostgresStore):
        coordinator = PostgresCoordinator(st, region, holder)
    return Node(
        settings,
        store=st,
        clock=clock,
        rng=rng,
        ids=UlidSource(clock, rng),
        transport=GrpcTransport(settings.grpc_listen),
        sender=RecordingSender(),
        resolver=StaticResolver(),
        coordinator=coordinator,
    )


def pg_and_lite(tmp_path: Path, pg_url: str) -> tuple[Node, Node, Node]:
    """Processes ``a`` and ``b`` of region pg and the SQLite region lite, peered, not
    started."""
    pg_port, lite_port = free_port(), free_port()
    a = node(tmp_path, "pg", pg_port, "lite", lite_port, pg_url, "a")
    b = node(tmp_path, "pg", pg_port, "lite", lite_port, pg_url, "b")
    return a, b, node(tmp_path, "lite", lite_port, "pg", pg_port, "sqlite")


@contextlib.asynccontextmanager
async def running(*nodes: Node) -> AsyncIterator[list[Node]]:
    """``nodes`` started in order; those in the yielded list at the end are stopped (a
    test may stop one itself and take it out, or start another and add it)."""
    live: list[Node] = []
    try:
        for n in nodes:
            await n.start()
            live.append(n)
        yield live
    finally:
        for n in live:
            await n.stop()
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def region_of_two(tmp_path: Path, pg_url: str) -> AsyncIterator[tuple[Node, Node, Node]]:
    """``pg_and_lite``, started (``a`` first: the replication holder); stopped at the end."""
    a, b, lite = pg_and_lite(tmp_path, pg_url)
    async with running(a, b, lite):
        assert a.cohort is not None and a.cohort.leading
        yield a, b, lite


async def test_a_holder_announces_what_its_region_reads_from_its_first_hello(
    tmp_path: Path, pg_url: str
) -> None:
    """A PostgreSQL process may take the replication role as it starts, and its peers keep
    what a Hello announced for the whole session. Before, it announced the baseline until
    its first look at the database's sessions (``older_sessions``, here slow), so the
    cluster's feature set stayed down for as long as those sessions lasted."""
    a, _, lite = pg_and_lite(tmp_path, pg_url)
    assert a.coordinator is not None
    real = a.coordinator.older_sessions

    async def slow() -> list[str]:
        await asyncio.sleep(1.0)
        return await real()

    a.coordinator.older_sessions = slow  # type: ignore[method-assign]
    async with running(a, lite):
        assert a.cohort is not None and a.cohort.leading
        await eventually(lambda: "pg" in lite.capabilities.heard and lite.peers["pg"].connected)
        assert lite.capabilities.heard["pg"].reads == ALL
        await asyncio.sleep(1.5)  # a's next checks change nothing
        assert lite.capabilities.heard["pg"].reads == ALL and lite.capabilities.effective == ALL


async def older_release_comes_and_goes(a: Node, lite: Node, dials: bool) -> None:
    """A process of an older release on the region's database (a stand-in session) holds
    ``a``'s Hello to the baseline; it stops, then one starts again: ``lite`` hears the
    region's features rise and fall within a check and a heartbeat each. ``dials``: ``a``
    reaches ``lite`` (else only ``lite`` dials ``a``)."""
    assert a.coordinator is not None
    older = ["regionsync-0.1.0"]

    async def sessions() -> list[str]:
        return list(older)

    a.coordinator.older_sessions = sessions  # type: ignore[method-assign]
    caps = lite.capabilities
    async with running(a, lite):
        await eventually(lambda: "pg" in caps.heard and lite.peers["pg"].connected)
        assert caps.heard["pg"].reads == BASELINE and caps.effective == BASELINE
        older.clear()  # the older process stopped
        await eventually(lambda: caps.heard["pg"].reads == ALL and caps.effective == ALL)
        older.append("regionsync-0.1.0")  # one started again
        await eventually(lambda: caps.effective == BASELINE)
        # the link that carried the change is up again and carries its dialer's writes
        writer, reader = (a, lite) if dials else (lite, a)
        await writer.registry_ops.create_tenant("after-both", "W")
        await eventually(lambda: reader.catalog.registry.has_tenant("after-both"))
        assert a.peers["lite"].connected == dials


async def test_a_change_of_what_its_region_reads_reaches_the_peers_in_session(
    tmp_path: Path, pg_url: str
) -> None:
    """Peers keep a Hello's features for the whole session; before, once the older
    process stopped, they heard of it only at the holder's next session (never, while
    the link stayed up), and when one started they went on writing features it cannot
    read. Now the holder's sessions end and its next Hello says it, both ways."""
    a, _, lite = pg_and_lite(tmp_path, pg_url)
    await older_release_comes_and_goes(a, lite, dials=True)


async def test_a_peer_that_only_dials_in_hears_a_change_of_what_the_region_reads(
    tmp_path: Path, pg_url: str
) -> None:
    """The same, heard over the peer's own link: the holder cannot dial the peer (its
    address is wrong), so the peer learns the region's features only from the answers
    to its Hellos. Before, it kept the first answer's for the whole session."""
    with socket.socket() as bound:  # a port held, never listening: dials are refused
        bound.bind(("127.0.0.1", 0))
        pg_port, lite_port = free_port(), free_port()
        a = node(tmp_path, "pg", pg_port, "lite", bound.getsockname()[1], pg_url, "a")
        lite = node(tmp_path, "lite", lite_port, "pg", pg_port, "sqlite")
        await older_release_comes_and_goes(a, lite, dials=False)


async def test_two_processes_follow_each_other_and_hand_over_the_role(
    tmp_path: Path, pg_url: str
) -> None:
    a, b, lite = pg_and_lite(tmp_path, pg_url)
    async with running(a, b, lite) as live:
        assert a.cohort is not None and b.cohort is not None
        assert a.cohort.leading and not b.cohort.leading  # the first one took the role
        assert a.writer.actor != b.writer.actor  # one actor per process
        assert a.writer.actor.startswith("pg:") and b.writer.actor.startswith("pg:")

        # b's change is shipped by a (the holder) and truncated once lite acked it
        await b.registry_ops.create_tenant("made-in-b", "B")

        def lite_has_b() -> bool:
            return lite.catalog.registry.has_tenant("made-in-b")

        await eventually(lite_has_b)
        await eventually(lambda: a.replica.log_floor.get(b.writer.actor, 0) >= 1)

        # a recovery job started through b (not the holder) is run by a, once
        ep = await b.registry_ops.create_endpoint("made-in-b", {"url": "https://example.com/h"})
        job = await b.recovery.start_job("made-in-b", ep.id, "replay-missing", 0)
        assert job.id not in b.recovery._running

        def job_done() -> bool:
            return a.catalog.jobs.get(job.id, {}).get("status") == "succeeded"

        await eventually(job_done)
        assert job.id not in b.recovery._running

        # what b commits reaches the holder's anti-entropy tree (kept, not rebuilt): it
        # equals a tree built from the shared store, and the regions' digests agree
        for i in range(5):
            await b.ingest.publish("made-in-b", "x", b'{"i":%d}' % i, f"k{i}")
        kept = await a.anti_entropy.state_tree()

        async def kept_equals_built() -> bool:
            # the processes go on delivering (and recording) meanwhile: until both rest
            built = await a.anti_entropy._build()
            return (kept.hash(""), kept.replicated_root()) == (
                built.hash(""),
                built.replicated_root(),
            )

        await eventually(kept_equals_built)
        assert a.anti_entropy.tree is kept  # kept current, never replaced by a rebuild
        assert a.keys.pending == {}  # the keys b committed are the store's, not held here

        async def roots_agree() -> bool:
            da, dl = await a.anti_entropy.digest(), await lite.anti_entropy.digest()
            return da == dl and da[1] != b""

        await eventually(roots_agree)

        # a record of the SQLite region applied by a (the holder) reaches b's memory,
        # even though it left the log (truncated once every peer had it) before b read it
        (follow,) = [t for t in b._tasks if t.get_name() == "follow"]
        follow.cancel()  # b reads no more by itself (a NOTIFY would wake it at once)
        await lite.registry_ops.create_tenant("made-in-lite", "L")
        await eventually(lambda: a.replica.log_floor.get(lite.writer.actor, 0) >= 1)
        assert not b.catalog.registry.has_tenant("made-in-lite")
        await b.cohort.follow_once()
        assert b.catalog.registry.has_tenant("made-in-lite")
        assert b.cohort.reloads >= 1
        assert (
            b.writer.durable_vv[lite.writer.actor] == lite.writer.version_vector[lite.writer.actor]
        )

        # the holder stops: b takes the role, binds the gRPC port and ships its records
        await a.stop()
        live.remove(a)
        await eventually(lambda: b.cohort is not None and b.cohort.leading)
        await b.registry_ops.create_tenant("after-handover", "C")
        await eventually(lambda: lite.catalog.registry.has_tenant("after-handover"))
        await lite.registry_ops.create_tenant("after-handover-lite", "L2")
        await eventually(lambda: b.catalog.registry.has_tenant("after-handover-lite"))
        await eventually(
            lambda: b.catalog.registry.state_hash() == lite.catalog.registry.state_hash()
        )


async def test_a_change_committed_while_a_process_loads_is_never_lost_to_it(
    tmp_path: Path, pg_url: str
) -> None:
    """A process loads the version vector and the registry in two reads; another process
    committing between them must not leave it counting a record whose change it lacks
    (the follow reads only records past the version vector, and repair compares only
    the replication holder). At start and at a reload after a failed commit."""
    a, b, lite = pg_and_lite(tmp_path, pg_url)
    async with running(a, lite) as live:
        await a.registry_ops.create_tenant("t-load", "before")
        between: list[str] = []  # the tenant a commits after b's first of the two reads
        real = {n: getattr(b.store, n) for n in ("load_registry", "load_version_vector")}

        def hooked(name: str) -> Any:
            async def read() -> Any:
                out = await real[name]()
                if len(between) % 2:  # armed: a commits now, once
                    tenant = f"made-between-{len(between)}"
                    await a.registry_ops.create_tenant(tenant, "M")
                    between.append(tenant)
                return out

            return read

        for name in real:
            setattr(b.store, name, hooked(name))
        between.append("armed")
        await b.start()
        live.append(b)
        assert b.catalog.registry.has_tenant(between[1])
        # b counts a's record once its follow task's first round has read it (it runs
        # beside start's last steps, which do not wait for it)
        actor = a.writer.actor
        await eventually(lambda: b.writer.version_vector[actor] == a.writer.version_vector[actor])

        between.append("armed")
        await b._reload()
        assert b.catalog.registry.has_tenant(between[3])

        # and nothing later mends a process that missed one, so the two agree once each has
        # followed the other (both go on committing: custody, heartbeats, process markers)
        # with no reload of the registry meanwhile (one would merge a missed change)
        assert b.cohort is not None and a.cohort is not None
        reloads = b.cohort.reloads

        async def followed_alike() -> bool:
            await b.cohort.follow_once()  # type: ignore[union-attr]
            await a.cohort.follow_once()  # type: ignore[union-attr]
            return b.catalog.registry.state_hash() == a.catalog.registry.state_hash()

        await eventually(followed_alike)
        assert b.cohort.reloads == reloads


async def test_the_tree_holds_what_a_reload_merged(tmp_path: Path, pg_url: str) -> None:
    """A reload (after a failed commit) merges the store's registry, and with it another
    process's change this one had not followed yet, which no commit observer sees: the
    replication holder's anti-entropy tree is built again, so it equals the store's and
    repair compares like with like."""
    async with region_of_two(tmp_path, pg_url) as (a, b, _lite):
        await eventually(lambda: a.anti_entropy.tree is not None)
        (follow,) = [t for t in a._tasks if t.get_name() == "follow"]
        follow.cancel()  # a has not read b's record when it reloads
        await b.registry_ops.create_tenant("made-in-b", "B")
        await a._reload()
        assert a.catalog.registry.has_tenant("made-in-b")
        kept = await a.anti_entropy.state_tree()

        async def kept_equals_built() -> bool:
            built = await a.anti_entropy._build()
            return kept.hash("") == built.hash("")

        await eventually(kept_equals_built)


async def test_the_holder_counts_a_followed_record_only_with_its_tree_items(
    tmp_path: Path, pg_url: str
) -> None:
    """The follow reads the rows it needs before it moves a version vector, and tells the
    anti-entropy tree in the same step: a digest or repair pass of the replication
    holder never sees a version vector counting a record whose event the tree lacks."""
    async with region_of_two(tmp_path, pg_url) as (a, b, _lite):
        await b.registry_ops.create_tenant("t", "T")
        await b.registry_ops.create_endpoint("t", {"url": "https://example.com/h"})
        await eventually(lambda: a.anti_entropy.tree is not None)
        actor = b.writer.actor
        lacking: list[tuple[int, str]] = []  # (counted seq, event id) missing from the tree
        real_get, real_records = a.store.get_deliveries, a.store.records_of

        async def watched(ids: Any) -> Any:
            counted = a.writer.durable_vv.get(actor, 0)  # both read before any await
            tree = a.anti_entropy.tree
            held = set() if tree is None else {i for v in tree._leaves.values() for i in v}
            for r in await real_records({actor: 0}, 10_000):
                event = decode_body(r.kind, r.body).event
                if r.seq <= counted and event is not None and "e/" + event.id not in held:
                    lacking.append((r.seq, event.id))
            return await real_get(ids)

        a.store.get_deliveries = watched  # type: ignore[method-assign]
        for i in range(5):
            await b.ingest.publish("t", "x", b'{"i":%d}' % i, None)
        await eventually(lambda: a.writer.durable_vv.get(actor) == b.writer.version_vector[actor])
        assert lacking == []


class _RowReads:
    """A store whose ``get_deliveries`` calls are counted (the rest passes through)."""

    def __init__(self, store: Any):
        self._store, self.calls = store, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get_deliveries(self, ids: Any) -> Any:
        self.calls += 1
        return await self._store.get_deliveries(ids)


async def test_only_a_process_that_keeps_the_tree_reads_followed_delivery_rows(
    tmp_path: Path, pg_url: str, monkeypatch: Any
) -> None:
    """A follower reads the rows of the deliveries another process committed only for
    the anti-entropy tree, which only the replication holder keeps: the others skip
    that read (issue 44), a holder that gives up the role drops its tree, and one that
    takes the role builds it from the store, equal to a tree built afresh."""
    async with region_of_two(tmp_path, pg_url) as (a, b, lite):
        assert a.cohort is not None and b.cohort is not None
        await a.registry_ops.create_tenant("t", "T")
        await a.registry_ops.create_endpoint("t", {"url": "https://example.com/h"})
        await eventually(lambda: a.anti_entropy.tree is not None)
        # each follows and steps the role only in the explicit rounds below, and a
        # truncates nothing (b would find a's records gone and reload the registry)
        for t in [*a._tasks, *b._tasks]:
            if t.get_name() in ("follow", "replication-role"):
                t.cancel()
        monkeypatch.setattr(a.replica, "truncation_point", dict)
        reloads = (a.cohort.reloads, b.cohort.reloads)
        reads = {n: _RowReads(n.cohort.store) for n in (a, b)}  # type: ignore[union-attr]
        for n, r in reads.items():
            n.cohort.store = r  # type: ignore[union-attr]

        async def publish_and_follow(by: Node, follower: Node) -> None:
            for i in range(3):
                await by.ingest.publish("t", "x", b'{"i":%d}' % i, None)
            assert follower.cohort is not None
            assert await follower.cohort.follow_once() > 0

        await publish_and_follow(a, b)
        assert reads[b].calls == 0 and b.anti_entropy.tree is None  # no tree: no rows
        await publish_and_follow(b, a)
        assert reads[a].calls > 0  # the holder's tree learns them from the rows

        # a gives up the role (its lock session lost): its tree goes, its rounds skip rows
        held = a.coordinator.is_leader  # type: ignore[union-attr]

        async def lost() -> bool:
            return False

        a.coordinator.is_leader = lost  # type: ignore[union-attr,method-assign]
        await a.cohort.step_leader()
        assert not a.cohort.leading and not a.anti_entropy.kept()
        calls = reads[a].calls
        await publish_and_follow(b, a)
        assert reads[a].calls == calls

        # it takes the role again: a tree built from the store, kept by its next rounds
        a.coordinator.is_leader = held  # type: ignore[union-attr,method-assign]
        await a.cohort.step_leader()
        assert a.cohort.leading
        kept = await a.anti_entropy.state_tree()
        await publish_and_follow(b, a)
        assert reads[a].calls > calls

        async def kept_equals_built() -> bool:
            await a.cohort.follow_once()  # type: ignore[union-attr]
            built = await a.anti_entropy._build()
            return (kept.hash(""), kept.replicated_root()) == (
                built.hash(""),
                built.replicated_root(),
            )

        await eventually(kept_equals_built)
        assert a.anti_entropy.tree is kept

        async def roots_agree() -> bool:
            await a.cohort.follow_once()  # type: ignore[union-attr]
            da, dl = await a.anti_entropy.digest(), await lite.anti_entropy.digest()
            return da == dl and da[1] != b""

        await eventually(roots_agree)
        assert (a.cohort.reloads, b.cohort.reloads) == reloads
