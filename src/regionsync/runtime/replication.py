"""Delta replication sessions over a PeerStream (proto/regionsync/v1/replication.proto).

Each node dials each configured peer and pushes, in batches, every log record the peer
lacks (its own and forwarded ones of third regions), resuming from the version vector the
peer sends in its Hello; the peer acks with its applied version vector. Reconnects back
off exponentially with jitter. The accepting side (``serve_stream``) applies batches.

A peer whose Hello version vector is below this node's log floor for some origin (those
records were truncated) is first repaired by anti-entropy (``_anti_entropy``): both sides
build a hash tree over their state (per pass, core.hashtree), compare it top-down in
TreeLevel round trips, and the pusher sends the full states of its items in differing
buckets (StateChunk). A fresh peer answers empty buckets, so it gets a whole snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..config import ReplicationSettings
from ..core.hashtree import HashTree, children
from ..core.model import Record
from ..v1 import replication_pb2 as pb
from .ports import Clock, LocalLog, PeerStream, PeerTransport, RecordSink, Rng, StateSync, Store
from .state import PeerStatus

__all__ = ["PROTOCOL", "Links", "PeerLink", "serve_stream", "to_pb", "from_pb"]

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


@dataclass
class Links:
    """What the replication sessions of one node use: its log (``log``), where peers'
    records and state go (``replica``, ``state``), the peers' status table, the node's
    shared ``counters`` and ``on_ack`` (called whenever a peer acknowledged records)."""

    region: str
    opts: ReplicationSettings
    log: LocalLog
    store: Store
    replica: RecordSink
    state: StateSync
    peers: Mapping[str, PeerStatus]
    counters: dict[str, int]
    on_ack: Callable[[], None]
    clock: Clock
    rng: Rng
    transport: PeerTransport


def _hello(links: Links) -> pb.SyncMessage:
    return pb.SyncMessage(
        hello=pb.Hello(
            region=links.region,
            incarnation=links.log.incarnation,
            version_vector=links.log.durable_vv,
            protocol=PROTOCOL,
        )
    )


async def _recv(stream: PeerStream, timeout_s: float) -> pb.SyncMessage | None:
    async with asyncio.timeout(timeout_s):
        return await stream.recv()


async def serve_stream(links: Links, stream: PeerStream) -> None:
    """Accepting side of one Sync stream: Hello, then apply each Batch and Ack it."""
    timeout = links.opts.call_timeout_s
    try:
        first = await _recv(stream, timeout)
        if first is None or first.WhichOneof("kind") != "hello":
            log.warning("sync stream did not open with hello; closing")
            return
        peer = first.hello.region
        if peer not in links.peers:
            # membership: only configured peers replicate into this node
            log.warning("sync stream from %r, which is not a configured peer; closing", peer)
            return
        await stream.send(_hello(links))
        tree: HashTree | None = None  # this pass's tree, built on its first TreeLevel
        pass_ok = True  # no StateChunk of this anti-entropy pass was rejected
        while (msg := await stream.recv()) is not None:
            kind = msg.WhichOneof("kind")
            if kind == "tree":
                if tree is None:
                    tree, pass_ok = await links.state.state_tree(), True
                await stream.send(_tree_answer(tree, msg.tree))
                continue
            if kind == "state":
                items = [(i.kind, i.body) for i in msg.state.items]
                vv = dict(msg.state.version_vector) if msg.state.last and pass_ok else None
                reason = await links.state.apply_state(items, vv)
                if reason is not None:
                    pass_ok = False
                if msg.state.last:
                    tree = None
                await stream.send(
                    pb.SyncMessage(
                        ack=pb.Ack(
                            version_vector=links.log.durable_vv,
                            rejected=[]
                            if reason is None
                            else [pb.Rejected(origin="", origin_seq=0, reason=reason)],
                        )
                    )
                )
                continue
            if kind != "batch":
                log.warning("unexpected %s from %s; ignored", kind, peer)
                continue
            rejected = await links.replica.apply_records([from_pb(r) for r in msg.batch.records])
            await stream.send(
                pb.SyncMessage(
                    ack=pb.Ack(
                        version_vector=links.log.durable_vv,
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


def _tree_answer(tree: HashTree, req: pb.TreeLevel) -> pb.SyncMessage:
    """The buckets of ``req`` whose hash differs from ours, with our hashes."""
    out = pb.TreeLevel()
    for bucket, theirs in zip(req.buckets, req.hashes, strict=False):
        if len(bucket) > tree.depth:
            continue  # not a bucket of ours: answer nothing, the asker treats it as equal
        mine = tree.hash(bucket)
        if mine != theirs:
            out.buckets.append(bucket)
            out.hashes.append(mine)
    return pb.SyncMessage(tree=out)


_MAX_BUCKETS = 4096  # buckets per TreeLevel message (about 160 KiB)


class PeerLink:
    """The dialing side towards one peer: connect, push, reconnect with backoff."""

    def __init__(self, links: Links, status: PeerStatus):
        self.links = links
        self.status = status
        self.opts = links.opts

    async def run(self) -> None:
        backoff = self.opts.reconnect_min_s
        while True:
            try:
                stream = await self.links.transport.connect(
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
            delay = backoff * (0.5 + 0.5 * self.links.rng.random())
            backoff = min(backoff * 2, self.opts.reconnect_max_s)
            await self.links.clock.sleep(delay)

    async def _session(self, stream: PeerStream) -> None:
        links, status = self.links, self.status
        await stream.send(_hello(links))
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
        status.last_contact_at_ms = links.clock.wall_ms()
        if links.replica.behind_floor(acked):
            # records it lacks were truncated: repair by anti-entropy, then use the log
            links.counters["anti_entropy_passes"] += 1
            acked.update(await self._anti_entropy(stream))
            status.acked = dict(acked)
            status.last_ack_at_ms = links.clock.wall_ms()
            links.on_ack()
            if missing := links.replica.behind_floor(acked):
                raise ConnectionError(f"anti-entropy left the peer behind for {missing}")
        sent = dict(acked)
        inflight = 0
        progress = asyncio.Event()
        wake = links.log.log_waiter()
        closed = False
        refused = False  # the peer rejected a record: pause before resending it
        lingered = self.opts.linger_ms <= 0

        async def read_acks() -> None:
            nonlocal inflight, sent, closed, refused
            try:
                while (msg := await stream.recv()) is not None:
                    status.last_contact_at_ms = links.clock.wall_ms()
                    if msg.WhichOneof("kind") != "ack":
                        continue
                    for o, seq in msg.ack.version_vector.items():
                        acked[o] = max(acked.get(o, 0), seq)
                        sent[o] = max(sent.get(o, 0), seq)  # never send what it holds
                    status.acked = dict(acked)
                    status.last_ack_at_ms = links.clock.wall_ms()
                    for rej in msg.ack.rejected:
                        status.last_error = f"rejected {rej.origin}#{rej.origin_seq}: {rej.reason}"
                        refused = True
                    links.on_ack()
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
                    await links.clock.sleep(self.opts.reconnect_max_s)
                    refused = False
                if inflight == 0 and links.replica.behind_floor(acked):
                    # forced truncation passed this peer: a new session repairs it
                    raise ConnectionError("peer fell behind the log floor")
                wake.clear()
                progress.clear()
                sent[peer_actor] = 1 << 62  # a peer never lacks its own records
                records = await links.store.records_after(sent, self.opts.batch_records)
                if records and len(records) < self.opts.batch_records and not lingered:
                    # a short linger lets a burst fill the batch: far fewer messages
                    lingered = True
                    await links.clock.sleep(self.opts.linger_ms / 1000)
                    continue
                lingered = self.opts.linger_ms <= 0
                if records:
                    message = pb.SyncMessage(batch=pb.Batch(records=map(to_pb, records)))
                    async with asyncio.timeout(self.opts.call_timeout_s):  # a wedged link
                        await stream.send(message)
                    inflight += 1
                    for r in records:
                        sent[r.origin] = max(sent.get(r.origin, 0), r.seq)
                    continue
                waits = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(progress.wait())]
                beat = asyncio.ensure_future(links.clock.sleep(self.opts.heartbeat_s))
                try:
                    await asyncio.wait([*waits, beat], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in (*waits, beat):
                        w.cancel()
                if beat.done() and not beat.cancelled() and inflight == 0:
                    # idle for heartbeat_s: an empty Batch, acked like any, keeps contact
                    async with asyncio.timeout(self.opts.call_timeout_s):
                        await stream.send(pb.SyncMessage(batch=pb.Batch()))
                    inflight += 1
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                raise reader.exception()  # type: ignore[misc]
        finally:
            links.log.drop_log_waiter(wake)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _ask(self, stream: PeerStream, msg: pb.SyncMessage, kind: str) -> pb.SyncMessage:
        await stream.send(msg)
        reply = await _recv(stream, self.opts.call_timeout_s)
        if reply is None or reply.WhichOneof("kind") != kind:
            raise ConnectionError(f"peer did not answer anti-entropy with {kind}")
        return reply

    async def _anti_entropy(self, stream: PeerStream) -> dict[str, int]:
        """One anti-entropy pass towards the peer; returns its version vector after it.

        The version vector is taken before the tree is built, so the state the tree and
        the chunks carry holds at least every record up to it. Buckets are compared level
        by level from the root's children; a differing bucket is split into its 16
        children unless it is small (``leaf_items``), at the tree's depth, or empty at the
        peer (then all of it is sent). Raises ConnectionError if the peer rejects a chunk.
        """
        links, opts = self.links, self.opts
        vv = dict(links.log.durable_vv)
        tree = await links.state.state_tree()
        send: list[str] = []
        frontier = children("") if len(tree) else []
        while frontier:
            level, frontier = frontier, []
            for i in range(0, len(level), _MAX_BUCKETS):
                part = [b for b in level[i : i + _MAX_BUCKETS] if tree.count(b)]
                if not part:
                    continue
                req = pb.TreeLevel(buckets=part, hashes=[tree.hash(b) for b in part])
                reply = await self._ask(stream, pb.SyncMessage(tree=req), "tree")
                for bucket, theirs in zip(reply.tree.buckets, reply.tree.hashes, strict=False):
                    if tree.hash(bucket) == theirs or not tree.count(bucket):
                        continue
                    small = tree.count(bucket) <= opts.leaf_items
                    if not theirs or small or len(bucket) >= tree.depth:
                        send.append(bucket)
                    else:
                        frontier.extend(children(bucket))
        idents = tree.idents(send)
        chunk: list[pb.StateItem] = []
        size = 0
        for i in range(0, len(idents), 256):
            for kind, body in await links.state.state_items(idents[i : i + 256]):
                chunk.append(pb.StateItem(kind=kind, body=body))
                size += len(body) + 16
                if size >= opts.state_chunk_bytes:
                    await self._send_chunk(stream, chunk, None)
                    chunk, size = [], 0
        return await self._send_chunk(stream, chunk, vv)

    async def _send_chunk(
        self, stream: PeerStream, items: list[pb.StateItem], vv: dict[str, int] | None
    ) -> dict[str, int]:
        msg = pb.StateChunk(items=items, last=vv is not None, version_vector=vv or {})
        reply = await self._ask(stream, pb.SyncMessage(state=msg), "ack")
        for rej in reply.ack.rejected:
            self.status.last_error = f"state chunk rejected: {rej.reason}"
            raise ConnectionError(self.status.last_error)
        return dict(reply.ack.version_vector)
