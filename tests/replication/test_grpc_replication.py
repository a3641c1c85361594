"""Replication over real gRPC on loopback, with SQLite stores, and a hostile raw client."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from memnodes import RecordingSender, StaticResolver, eventually

from regionsync.adapters.grpc_transport import GrpcTransport
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.adapters.system import SystemClock, UlidSource, system_rng
from regionsync.config import load_settings
from regionsync.core.capabilities import ALL, RELEASE, announced
from regionsync.demo import free_port
from regionsync.runtime.node import Node
from regionsync.v1 import replication_pb2 as pb
from regionsync.v1 import replication_pb2_grpc as pb_grpc


def grpc_node(tmp_path: Path, region: str, port: int, peers: dict[str, int]) -> Node:
    settings = load_settings(
        None,
        region=region,
        data_dir=tmp_path / region,
        grpc_listen=f"127.0.0.1:{port}",
        peers=[{"region": r, "address": f"127.0.0.1:{p}"} for r, p in peers.items()],
        replication={"reconnect_min_s": 0.05, "reconnect_max_s": 0.2},
    )
    clock, rng = SystemClock(), system_rng()
    return Node(
        settings,
        store=SqliteStore(settings.data_dir / "node.db"),
        clock=clock,
        rng=rng,
        ids=UlidSource(clock, rng),
        transport=GrpcTransport(settings.grpc_listen),
        sender=RecordingSender(),
        resolver=StaticResolver(),
    )


@pytest.fixture
async def pair(tmp_path: Path):
    pa, pb_ = free_port(), free_port()
    a = grpc_node(tmp_path, "a", pa, {"b": pb_})
    b = grpc_node(tmp_path, "b", pb_, {"a": pa})
    await a.start()
    await b.start()
    yield a, b, pb_
    await a.stop()
    await b.stop()


async def test_two_nodes_converge_over_grpc(pair) -> None:
    a, b, _ = pair
    await a.registry_ops.create_tenant("acme", "Acme")
    for i in range(50):
        await a.ingest.publish("acme", "t", b'{"i":%d}' % i, None)
    await eventually(lambda: b.writer.durable_vv == a.writer.durable_vv)
    assert b.catalog.registry.state_hash() == a.catalog.registry.state_hash()
    assert (await b.store.counts("b"))["events"] == 50

    def caught_up() -> bool:  # b's ack of the last records follows its commit
        status = a.view.cluster()["peers"][0]
        return status["connected"] and status["records_behind"] == 0

    await eventually(caught_up)
    status = a.view.cluster()["peers"][0]
    # the Hello over gRPC carries the release and the features (core.capabilities)
    assert status["version"] == RELEASE and status["features"] == announced(ALL)
    assert a.capabilities.enabled("optional-fields")


async def test_raw_client_garbage_is_rejected_and_logged(pair) -> None:
    a, b, port = pair
    await eventually(lambda: a.peers["b"].connected)
    hash_before, vv_before = b.catalog.registry.state_hash(), dict(b.writer.version_vector)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.ReplicationStub(channel).Sync()
        await call.write(pb.SyncMessage(hello=pb.Hello(region="a", incarnation=1, protocol=1)))
        hello = await call.read()
        assert hello.hello.region == "b" and hello.hello.version == RELEASE
        assert list(hello.hello.features) == announced(ALL)
        bad = pb.DeltaRecord(origin="evil:1", origin_seq=1, kind="registry", body=b"\xff\x00")
        await call.write(pb.SyncMessage(batch=pb.Batch(records=[bad])))
        ack = await call.read()
        assert [(r.origin, r.origin_seq) for r in ack.ack.rejected] == [("evil:1", 1)]
        assert "msgpack" in ack.ack.rejected[0].reason
        # moved past (issue 41): its successors are not blocked; never merged
        assert ack.ack.version_vector["evil:1"] == 1
        await call.done_writing()
    assert b.catalog.registry.state_hash() == hash_before
    assert b.writer.version_vector == {**vv_before, "evil:1": 1}
    assert b.counters["records_rejected"] == 1 and b.replica.refusals["evil:1"].skipped == 1


async def test_stream_from_a_region_not_configured_is_closed(pair) -> None:
    _, b, port = pair
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.ReplicationStub(channel).Sync()
        await call.write(pb.SyncMessage(hello=pb.Hello(region="stranger", incarnation=1)))
        assert await call.read() is grpc.aio.EOF


async def test_stream_without_hello_is_closed(pair) -> None:
    _, b, port = pair
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.ReplicationStub(channel).Sync()
        await call.write(pb.SyncMessage(batch=pb.Batch()))
        assert await call.read() is grpc.aio.EOF


async def test_a_second_server_on_the_same_port_fails_to_start(pair) -> None:
    # gRPC shares a port between servers by default (SO_REUSEPORT): replication would
    # silently be split between two nodes. The transport refuses that.
    _, _, port = pair
    with pytest.raises(OSError, match="cannot listen"):
        await GrpcTransport(f"127.0.0.1:{port}").serve(lambda stream: None)  # type: ignore[arg-type,return-value]
