"""Issue 12 item 2 over real gRPC on loopback: records written while a peer is away, whose
batch would exceed the message limit, reach it after the heal (batches cut by bytes)."""

from __future__ import annotations

from pathlib import Path

from memnodes import RecordingSender, StaticResolver, eventually

from regionsync.adapters.grpc_transport import GrpcTransport
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.adapters.system import SystemClock, UlidSource, system_rng
from regionsync.config import load_settings
from regionsync.demo import free_port
from regionsync.runtime.node import Node

KIB = 1024
LIMIT = 512 * KIB  # small, so a few records exceed it
PAYLOAD = 60 * KIB


def _node(tmp_path: Path, region: str, port: int, peers: dict[str, int]) -> Node:
    settings = load_settings(
        None,
        region=region,
        data_dir=tmp_path / region,
        grpc_listen=f"127.0.0.1:{port}",
        peers=[{"region": r, "address": f"127.0.0.1:{p}"} for r, p in peers.items()],
        ingest={"max_payload_bytes": 64 * KIB},
        replication={
            "reconnect_min_s": 0.05,
            "reconnect_max_s": 0.2,
            "max_message_bytes": LIMIT,
            "state_chunk_bytes": 128 * KIB,
        },
    )
    clock, rng = SystemClock(), system_rng()
    return Node(
        settings,
        store=SqliteStore(settings.data_dir / "node.db"),
        clock=clock,
        rng=rng,
        ids=UlidSource(clock, rng),
        transport=GrpcTransport(
            settings.grpc_listen, max_message_bytes=settings.replication.max_message_bytes
        ),
        sender=RecordingSender(),
        resolver=StaticResolver(),
    )


async def test_records_over_the_message_limit_replicate_after_heal(tmp_path: Path) -> None:
    pa, pb_ = free_port(), free_port()
    a = _node(tmp_path, "a", pa, {"b": pb_})
    b = _node(tmp_path, "b", pb_, {"a": pa})
    await a.start()
    try:
        await a.registry_ops.create_tenant("acme", "Acme")
        payload = b'{"p":"' + b"x" * (PAYLOAD - 8) + b'"}'
        for _ in range(27):  # about 1.6 MB: one 256-record batch would be 3x the limit
            await a.ingest.publish("acme", "t", payload, None)
        await b.start()  # the heal
        try:
            await eventually(
                lambda: (
                    b.writer.durable_vv.get(a.writer.actor) == a.writer.durable_vv[a.writer.actor]
                )
            )
            assert (await b.store.counts("a"))["events"] == 27
            assert a.peers["b"].last_error is None or "exceeds" not in a.peers["b"].last_error
        finally:
            await b.stop()
    finally:
        await a.stop()
