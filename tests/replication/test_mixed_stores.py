"""A SQLite region and a PostgreSQL region (the store chosen by ``store`` in the settings)
replicating over real gRPC on loopback: version vectors, log truncation, delivery,
restart and snapshot repair work across the two stores (issue 16)."""

from __future__ import annotations

from pathlib import Path

from memnodes import RecordingSender, StaticResolver, converged, eventually

from regionsync.adapters.grpc_transport import GrpcTransport
from regionsync.adapters.postgres_store import PostgresStore
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.adapters.system import SystemClock, UlidSource, system_rng
from regionsync.adapters.wiring import build_store
from regionsync.config import load_settings
from regionsync.demo import free_port
from regionsync.runtime.node import Node


def node(tmp: Path, region: str, port: int, peer: str, peer_port: int, store: str) -> Node:
    settings = load_settings(
        None,
        region=region,
        data_dir=tmp / region,
        store=store,
        grpc_listen=f"127.0.0.1:{port}",
        peers=[{"region": peer, "address": f"127.0.0.1:{peer_port}"}],
        replication={"reconnect_min_s": 0.05, "reconnect_max_s": 0.2, "truncate_interval_s": 0.05},
    )
    clock, rng = SystemClock(), system_rng()
    return Node(
        settings,
        store=build_store(settings),
        clock=clock,
        rng=rng,
        ids=UlidSource(clock, rng),
        transport=GrpcTransport(settings.grpc_listen),
        sender=RecordingSender(),
        resolver=StaticResolver(),
    )


async def test_sqlite_and_postgresql_regions_converge_truncate_and_repair(
    tmp_path: Path, pg_url: str
) -> None:
    pa, pb = free_port(), free_port()
    a = node(tmp_path, "pg", pa, "lite", pb, pg_url)
    b = node(tmp_path, "lite", pb, "pg", pa, "sqlite")
    assert isinstance(a.store, PostgresStore) and isinstance(b.store, SqliteStore)
    running = [a, b]
    try:
        for n in running:
            await n.start()
        await a.registry_ops.create_tenant("acme", "Acme")
        await eventually(lambda: b.catalog.registry.tenant("acme") is not None)
        await b.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
        await eventually(lambda: converged(a, b))
        for i in range(20):
            await (a, b)[i % 2].ingest.publish("acme", "t", b'{"i":%d}' % i, f"k{i}")
        await eventually(lambda: converged(a, b))

        async def same_events() -> bool:
            ids = [await n.store.list_event_ids() for n in (a, b)]
            return ids[0] == ids[1] and len(ids[0]) == 20

        await eventually(same_events)
        # each region delivers the events it accepted
        for n in (a, b):
            await eventually(lambda n=n: len(n.sender.requests) == 10)  # type: ignore[attr-defined]
        # both logs are truncated once the peer acked (the last own record is kept)
        await eventually(lambda: a.replica.log_floor.get(b.writer.actor, 0) > 0)
        assert await a.store.load_log_floor() == a.replica.log_floor

        async def delivered(n: Node) -> bool:
            return (await n.store.counts(n.region))["deliveries_delivered"] == 10

        await eventually(lambda: delivered(a))
        await eventually(lambda: delivered(b))
        # the PostgreSQL region restarts on its database: same actor, same state (a write
        # racing the stop may land after durable_vv was last read: at least as much)
        await a.stop()
        actor, vv = a.writer.actor, dict(a.writer.durable_vv)
        running.remove(a)
        a = node(tmp_path, "pg", pa, "lite", pb, pg_url)
        await a.start()
        running.append(a)
        assert a.writer.actor == actor
        assert all(a.writer.durable_vv.get(o, 0) >= s for o, s in vv.items())

        async def vv_is_the_stores() -> bool:
            # replication goes on: a record being committed is in the store before
            # durable_vv moves (WritePath._on_commit), so equal once none is under way
            return a.writer.durable_vv == await a.store.load_version_vector()

        await eventually(vv_is_the_stores)
        assert a.catalog.registry.tenant("acme") is not None

        # the SQLite region loses its disk: it rejoins by a snapshot from the PostgreSQL
        # one (a's log no longer starts at 1, so only anti-entropy can repair it)
        await eventually(lambda: a.replica.behind_floor({}) != [])
        await b.stop()
        running.remove(b)
        (tmp_path / "lite" / "lite.db").unlink()
        for suffix in ("-wal", "-shm"):
            (tmp_path / "lite" / f"lite.db{suffix}").unlink(missing_ok=True)
        b = node(tmp_path, "lite", pb, "pg", pa, "sqlite")
        await b.start()
        running.append(b)
        await eventually(lambda: converged(a, b))
        await eventually(same_events)
        assert b.counters["anti_entropy_items"] > 0
        await b.registry_ops.create_tenant("gamma", "Gamma")
        await eventually(lambda: a.catalog.registry.tenant("gamma") is not None)
    finally:
        for n in running:
            await n.stop()
