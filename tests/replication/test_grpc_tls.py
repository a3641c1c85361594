"""Mutual TLS between regions: certificates from ``regionsync certs``, peers converge, a
client without a valid client certificate is refused."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from memnodes import RecordingSender, StaticResolver, eventually

from regionsync.adapters.grpc_transport import GrpcTransport
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.adapters.system import SystemClock, UlidSource, system_rng
from regionsync.certs import make_certs
from regionsync.config import TlsSettings, load_settings
from regionsync.demo import free_port
from regionsync.runtime.node import Node
from regionsync.v1 import replication_pb2 as pb
from regionsync.v1 import replication_pb2_grpc as pb_grpc


def tls_node(tmp: Path, region: str, port: int, peers: dict[str, int]) -> Node:
    tls = TlsSettings(cert=tmp / f"{region}.pem", key=tmp / f"{region}.key", ca=tmp / "ca.pem")
    settings = load_settings(
        None,
        region=region,
        grpc_listen=f"127.0.0.1:{port}",
        peers=[{"region": r, "address": f"localhost:{p}"} for r, p in peers.items()],
        replication={"reconnect_min_s": 0.05, "reconnect_max_s": 0.2},
        tls=tls.model_dump(),
    )
    clock, rng = SystemClock(), system_rng()
    return Node(
        settings,
        store=SqliteStore(tmp / f"{region}.db"),
        clock=clock,
        rng=rng,
        ids=UlidSource(clock, rng),
        transport=GrpcTransport(settings.grpc_listen, settings.tls),
        sender=RecordingSender(),
        resolver=StaticResolver(),
    )


@pytest.fixture
async def tls_pair(tmp_path: Path):
    make_certs(tmp_path, ["a", "b"])
    pa, pb_ = free_port(), free_port()
    a = tls_node(tmp_path, "a", pa, {"b": pb_})
    b = tls_node(tmp_path, "b", pb_, {"a": pa})
    await a.start()
    await b.start()
    yield a, b, pb_, tmp_path
    await a.stop()
    await b.stop()


async def test_peers_converge_over_mutual_tls(tls_pair) -> None:
    a, b, _, _ = tls_pair
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: b.catalog.registry.tenant("acme") is not None)
    assert a.peers["b"].connected and b.peers["a"].connected


async def _try_sync(channel: grpc.aio.Channel) -> None:
    call = pb_grpc.ReplicationStub(channel).Sync()
    await call.write(pb.SyncMessage(hello=pb.Hello(region="evil", incarnation=1)))
    await call.read()


async def test_client_without_certificate_is_refused(tls_pair) -> None:
    a, b, port, tmp = tls_pair
    no_client_cert = grpc.ssl_channel_credentials(root_certificates=(tmp / "ca.pem").read_bytes())
    async with grpc.aio.secure_channel(f"localhost:{port}", no_client_cert) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await _try_sync(channel)
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    async with grpc.aio.insecure_channel(f"localhost:{port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError):
            await _try_sync(channel)
    other = tmp / "other"
    make_certs(other, ["evil"])  # a certificate from another CA is refused as well
    foreign = grpc.ssl_channel_credentials(
        root_certificates=(tmp / "ca.pem").read_bytes(),
        private_key=(other / "evil.key").read_bytes(),
        certificate_chain=(other / "evil.pem").read_bytes(),
    )
    async with grpc.aio.secure_channel(f"localhost:{port}", foreign) as channel:
        with pytest.raises(grpc.aio.AioRpcError):
            await _try_sync(channel)
    assert b.counters["records_rejected"] == 0 and "evil:1" not in b.writer.durable_vv
