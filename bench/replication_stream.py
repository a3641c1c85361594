"""Replication stream benchmark (issue 3): batching and bytes on the wire.

In one run, on loopback gRPC:
1. raw messages/s of a bare bidi stream (small messages, the server just reads them) —
   the baseline;
2. records/s applied by a real node (SQLite, synchronous=FULL, group commit) receiving a
   backlog of event records from a real peer over one Sync stream (goal: >= 3x the raw
   message rate, which batching makes possible), judged against the mean of the bare
   stream measured just before and just after it (the machine is shared);
3. bytes on the wire per registry change vs the change's encoded delta (goal: <= 2x),
   for a change sent alone and inside a full batch (protobuf + gRPC 5-byte prefix +
   HTTP/2 9-byte frame header per message).

    .venv/bin/python bench/replication_stream.py [--records 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
from pathlib import Path

import grpc

from crdt import Timestamp
from regionsync.adapters.grpc_transport import GrpcTransport
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.adapters.system import SystemClock, SystemResolver, UlidSource, system_rng
from regionsync.adapters.wiring import GC_GEN0_THRESHOLD
from regionsync.config import load_settings
from regionsync.core.model import Record
from regionsync.core.records import encode_body
from regionsync.core.registry import Registry
from regionsync.demo import free_port
from regionsync.runtime.links import to_pb
from regionsync.runtime.node import Node
from regionsync.v1 import replication_pb2 as pb
from regionsync.v1 import replication_pb2_grpc as pb_grpc

GRPC_PREFIX = 5  # compressed flag + length
H2_FRAME = 9  # HTTP/2 DATA frame header


class _Sink(pb_grpc.ReplicationServicer):
    def __init__(self) -> None:
        self.count = 0

    async def Sync(self, request_iterator, context):  # noqa: N802
        async for _ in request_iterator:
            self.count += 1
        yield pb.SyncMessage(ack=pb.Ack())


async def raw_stream(n: int) -> float:
    """Messages/s of a bare bidi stream carrying one small record per message."""
    server = grpc.aio.server()
    sink = _Sink()
    pb_grpc.add_ReplicationServicer_to_server(sink, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    msg = pb.SyncMessage(
        batch=pb.Batch(
            records=[pb.DeltaRecord(origin="a:1", origin_seq=1, kind="event", body=b"x" * 200)]
        )  # fmt: skip
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.ReplicationStub(channel).Sync()
        t0 = time.perf_counter()
        for _ in range(n):
            await call.write(msg)
        await call.done_writing()
        await call.read()
        elapsed = time.perf_counter() - t0
    await server.stop(None)
    assert sink.count == n
    return n / elapsed


def node(tmp: Path, region: str, port: int, peers: dict[str, int], batch: int = 256) -> Node:
    settings = load_settings(
        None, region=region, grpc_listen=f"127.0.0.1:{port}", log_level="warning",
        peers=[{"region": r, "address": f"127.0.0.1:{p}"} for r, p in peers.items()],
        replication={"reconnect_min_s": 0.01, "reconnect_max_s": 0.02, "batch_records": batch},
    )  # fmt: skip
    clock, rng = SystemClock(), system_rng()
    resolver = SystemResolver()

    class NoSender:
        async def send(self, request):  # pragma: no cover - no endpoints here
            raise AssertionError("no deliveries in this benchmark")

    return Node(
        settings, store=SqliteStore(tmp / f"{region}.db"), clock=clock, rng=rng,
        ids=UlidSource(clock, rng), transport=GrpcTransport(settings.grpc_listen),
        sender=NoSender(), resolver=resolver,
    )  # fmt: skip


async def applied_per_second(n: int, batch: int) -> tuple[float, int]:
    """Records/s a node applies from one peer's backlog of ``n`` event records."""
    tmp = Path(tempfile.mkdtemp())
    pa, pb_ = free_port(), free_port()
    a = node(tmp, "a", pa, {"b": pb_}, batch)
    await a.start()
    await a.registry_ops.create_tenant("t", "T")
    sem = asyncio.Semaphore(256)

    async def one(i: int) -> None:
        async with sem:
            await a.ingest.publish(
                "t", "bench.event", b'{"i":%d,"pad":"%s"}' % (i, b"x" * 150), None
            )

    await asyncio.gather(*(one(i) for i in range(n)))
    target = dict(a.writer.durable_vv)
    b = node(tmp, "b", pb_, {"a": pa})
    caught_up = asyncio.Event()

    def check(_batch: object) -> None:
        if all(b.writer.durable_vv.get(o, 0) >= s for o, s in target.items()):
            caught_up.set()

    await b.start()
    b.writer.committer.on_commit = lambda batch: (b.writer._on_commit(batch), check(batch))
    # time the transfer, not the reconnect backoff (polling another task's flag)
    while not a.peers["b"].connected:  # noqa: ASYNC110
        await asyncio.sleep(0.001)
    t0 = time.perf_counter()
    await caught_up.wait()
    elapsed = time.perf_counter() - t0
    total = sum(target.values())
    await a.stop()
    await b.stop()
    return total / elapsed, total


def wire_bytes() -> tuple[float, float]:
    """(alone, batched) wire bytes per registry change / encoded delta bytes."""
    reg = Registry()
    actor = "eu-central-1:1"
    reg.apply(reg.create_tenant("acme", "Acme", 1, actor, Timestamp(1, 0)))
    fields = {"url": "https://hooks.example.com/x", "secret": "whsec_" + "A" * 44}
    reg.apply(reg.create_endpoint("ep_1", "acme", fields, ["a"], 2, actor, Timestamp(2, 0)))
    records, delta_bytes = [], 0
    for i in range(256):
        deltas = reg.patch_endpoint(
            "ep_1", {"description": f"change {i}"}, (), (), 3 + i, actor, Timestamp(3 + i, 0)
        )
        reg.apply(deltas)
        delta_bytes += sum(len(k) + len(v.to_bytes()) for k, v in deltas.items())
        body = encode_body(deltas)
        records.append(Record(actor, i + 1, "registry", body, (3 + i, 0)))
    per_delta = delta_bytes / len(records)

    def wire(batch: list[Record]) -> int:
        size = len(pb.SyncMessage(batch=pb.Batch(records=[to_pb(r) for r in batch]))
                   .SerializeToString())  # fmt: skip
        return size + GRPC_PREFIX + H2_FRAME

    alone = wire(records[:1]) / per_delta
    batched = wire(records) / len(records) / per_delta
    return alone, batched


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20_000)
    args = ap.parse_args()
    # the nodes run in this process: with the young-generation threshold a serving node
    # sets (adapters/wiring.serve), not CPython's default
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
    print(f"replication stream benchmark: {args.records} records, loopback gRPC")
    # the machine is shared: the baseline is measured before and after each node run and
    # each run is judged against the mean of the two around it
    raws = [await raw_stream(args.records)]
    print(f"bare bidi stream: {raws[0]:,.0f} messages/s (one small record per message)")
    ratios = []
    for batch in (64, 256, 1024):
        applied, total = await applied_per_second(args.records, batch)
        raws.append(await raw_stream(args.records))
        base = (raws[-2] + raws[-1]) / 2
        ratios.append(applied / base)
        print(f"node applying a peer's backlog, {batch} records per message: "
              f"{applied:,.0f} records/s ({total} records, durable) vs bare "
              f"{base:,.0f} messages/s around it: {ratios[-1]:.1f}x")  # fmt: skip
    ratio = max(ratios)
    print(f"bare stream across the run: {min(raws):,.0f}-{max(raws):,.0f} messages/s")
    print(f"best: {ratio:.1f}x the raw message rate (goal >= 3x): "
          f"{'PASS' if ratio >= 3 else 'FAIL'}")  # fmt: skip
    alone, batched = wire_bytes()
    print(f"wire bytes per registry change / encoded delta: {alone:.2f}x alone, "
          f"{batched:.2f}x in a batch of 256 (goal <= 2x): "
          f"{'PASS' if batched <= 2 else 'FAIL'}")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
