"""Delta replication sessions over a PeerStream (proto/regionsync/v1/replication.proto).

Each node dials each configured peer and pushes, in batches, every log record the peer
lacks (its own and forwarded ones of third regions), resuming from the version vector the
peer sends in its Hello; the peer acks with its applied version vector. Reconnects back
off exponentially with jitter. The accepting side (``serve_stream``) applies batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ..core.model import Record
from ..v1 import replication_pb2 as pb
from .node import Node, PeerStatus
from .ports import PeerStream

__all__ = ["PROTOCOL", "PeerLink", "serve_stream", "to_pb", "from_pb"]

PROTOCOL = 1
log = logging.getLogger("regionsync.replication")


def to_pb(r: Record) -> pb.DeltaRecord:
    return pb.DeltaRecord(
        origin=r.origin,
        origin_seq=r.seq,
        kind=r.kind,
        body=r.body,
        hlc_wall_ms=r.hlc[0],
        hlc_logical=r.hlc[1],
    )


def from_pb(r: pb.DeltaRecord) -> Record:
    return Record(r.origin, r.origin_seq, r.kind, r.body, (r.hlc_wall_ms, r.hlc_logical))


def _hello(node: Node) -> pb.SyncMessage:
    return pb.SyncMessage(
        hello=pb.Hello(
            region=node.region,
            incarnation=node.incarnation,
            version_vector=node.durable_vv,
            protocol=PROTOCOL,
        )
    )


async def _recv(stream: PeerStream, timeout_s: float) -> pb.SyncMessage | None:
    async with asyncio.timeout(timeout_s):
        return await stream.recv()


async def serve_stream(node: Node, stream: PeerStream) -> None:
    """Accepting side of one Sync stream: Hello, then apply each Batch and Ack it."""
    timeout = node.settings.replication.call_timeout_s
    try:
        first = await _recv(stream, timeout)
        if first is None or first.WhichOneof("kind") != "hello":
            log.warning("sync stream did not open with hello; closing")
            return
        peer = first.hello.region
        await stream.send(_hello(node))
        while (msg := await stream.recv()) is not None:
            if msg.WhichOneof("kind") != "batch":
                log.warning("unexpected %s from %s; ignored", msg.WhichOneof("kind"), peer)
                continue
            rejected = await node.apply_records([from_pb(r) for r in msg.batch.records])
            await stream.send(
                pb.SyncMessage(
                    ack=pb.Ack(
                        version_vector=node.durable_vv,
                        rejected=[
                            pb.Rejected(origin=e.origin, origin_seq=e.seq, reason=e.reason)
                            for e in rejected
                        ],
                    )
                )
            )
    except (TimeoutError, ConnectionError) as exc:
        log.info("sync stream closed: %r", exc)
    finally:
        await stream.close()


class PeerLink:
    """The dialing side towards one peer: connect, push, reconnect with backoff."""

    def __init__(self, node: Node, status: PeerStatus):
        self.node = node
        self.status = status
        self.opts = node.settings.replication

    async def run(self) -> None:
        backoff = self.opts.reconnect_min_s
        while True:
            try:
                stream = await self.node.transport.connect(
                    self.status.address, self.opts.call_timeout_s
                )
                try:
                    await self._session(stream)
                    backoff = self.opts.reconnect_min_s
                finally:
                    self.status.connected = False
                    await stream.close()
            except (ConnectionError, TimeoutError, OSError) as exc:
                self.status.last_error = f"{type(exc).__name__}: {exc}"
                log.debug("peer %s: %s", self.status.region, self.status.last_error)
            except Exception as exc:  # a bug must not end replication to this peer
                self.status.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("peer %s: session failed", self.status.region)
            delay = backoff * (0.5 + 0.5 * self.node.rng.random())
            backoff = min(backoff * 2, self.opts.reconnect_max_s)
            await self.node.clock.sleep(delay)

    async def _session(self, stream: PeerStream) -> None:
        node, status = self.node, self.status
        await stream.send(_hello(node))
        first = await _recv(stream, self.opts.call_timeout_s)
        if first is None or first.WhichOneof("kind") != "hello":
            raise ConnectionError("peer did not answer with hello")
        if first.hello.region != status.region:
            raise ConnectionError(
                f"peer at {status.address} is region {first.hello.region!r}, "
                f"configured as {status.region!r}"
            )
        peer_actor = f"{first.hello.region}:{first.hello.incarnation}"
        acked = dict(first.hello.version_vector)
        status.acked = dict(acked)
        status.actor = peer_actor
        status.connected, status.last_error = True, None
        sent = dict(acked)
        inflight = 0
        progress = asyncio.Event()
        wake = node.log_waiter()
        closed = False
        refused = False  # the peer rejected a record: pause before resending it

        async def read_acks() -> None:
            nonlocal inflight, sent, closed, refused
            try:
                while (msg := await stream.recv()) is not None:
                    if msg.WhichOneof("kind") != "ack":
                        continue
                    for o, seq in msg.ack.version_vector.items():
                        acked[o] = max(acked.get(o, 0), seq)
                        sent[o] = max(sent.get(o, 0), seq)  # never send what it holds
                    status.acked = dict(acked)
                    status.last_ack_at_ms = node.clock.wall_ms()
                    for rej in msg.ack.rejected:
                        status.last_error = f"rejected {rej.origin}#{rej.origin_seq}: {rej.reason}"
                        refused = True
                    node.notify_ack()
                    inflight -= 1
                    if inflight == 0:
                        # everything sent was answered: resend whatever the peer still lacks
                        sent = dict(acked)
                    progress.set()
            finally:
                closed = True
                progress.set()

        reader = asyncio.create_task(read_acks())
        try:
            while not closed:
                if inflight >= self.opts.window_batches:
                    progress.clear()
                    async with asyncio.timeout(self.opts.call_timeout_s):
                        await progress.wait()
                    continue
                if refused and inflight == 0:
                    await node.clock.sleep(self.opts.reconnect_max_s)
                    refused = False
                wake.clear()
                progress.clear()
                sent[peer_actor] = 1 << 62  # a peer never lacks its own records
                records = await node.store.records_after(sent, self.opts.batch_records)
                if records:
                    message = pb.SyncMessage(batch=pb.Batch(records=map(to_pb, records)))
                    async with asyncio.timeout(self.opts.call_timeout_s):  # a wedged link
                        await stream.send(message)
                    inflight += 1
                    for r in records:
                        sent[r.origin] = max(sent.get(r.origin, 0), r.seq)
                    continue
                waits = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(progress.wait())]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waits:
                        w.cancel()
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                raise reader.exception()  # type: ignore[misc]
        finally:
            node.drop_log_waiter(wake)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
