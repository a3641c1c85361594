"""Issue 17: the accepting side of a Sync stream applies the next batch while the previous
one commits, so back-to-back batches share a group commit; each batch still gets its own
ack, in order, only once it is durable, and acks never go backwards."""

from __future__ import annotations

import time

from memnodes import make_node

from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.core.model import Event, Record
from regionsync.core.records import encode_body
from regionsync.runtime.links import PROTOCOL, to_pb
from regionsync.runtime.node import Node
from regionsync.v1 import replication_pb2 as pb


def _batch(first: int, n: int) -> pb.SyncMessage:
    now = int(time.time() * 1000)
    records = [
        Record("a:1", seq, "event",
               encode_body(event=Event(f"evt_{seq}", "t", "x", b"{}", "a", now)), (now, seq))
        for seq in range(first, first + n)
    ]  # fmt: skip
    return pb.SyncMessage(batch=pb.Batch(records=[to_pb(r) for r in records]))


async def test_back_to_back_batches_share_commits_and_are_acked_in_order(
    net: MemoryNetwork, started: list[Node]
) -> None:
    b = make_node(net, "b", ["a"])
    started.append(b)
    await b.start()
    stream = await net.transport("a").connect("b", 1.0)
    await stream.send(pb.SyncMessage(hello=pb.Hello(region="a", incarnation=1,
                                                    protocol=PROTOCOL)))  # fmt: skip
    reply = await stream.recv()
    assert reply is not None and reply.WhichOneof("kind") == "hello"
    assert b.writer.committer is not None
    commits_before = b.writer.committer.commits
    for i in range(5):  # five batches of four, none waiting for an ack
        await stream.send(_batch(1 + 4 * i, 4))
    acked = []
    for _ in range(5):
        msg = await stream.recv()
        assert msg is not None and msg.WhichOneof("kind") == "ack"
        assert not msg.ack.rejected
        acked.append(msg.ack.version_vector["a:1"])
        # acked only once durable: the store holds everything the ack names
        assert (await b.store.load_version_vector())["a:1"] >= acked[-1]
    assert acked == sorted(acked) and acked[-1] == 20
    assert b.writer.committer.commits - commits_before < 5
    assert await b.store.get_event("evt_20") is not None
    await stream.close()
