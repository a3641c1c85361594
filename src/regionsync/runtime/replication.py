"""Delta replication sessions over a PeerStream (proto/regionsync/v1/replication.proto).

Each node dials each configured peer and pushes, in batches, every log record the peer
lacks (its own and forwarded ones of third regions), resuming from the version vector the
peer sends in its Hello; the peer acks with its applied version vector. Reconnects back
off exponentially with jitter. The accepting side (``serve_stream``) applies batches.

An idle link sends an empty Batch every ``replication.heartbeat_s``; every message from a
peer counts as contact with it, and Hello and Ack carry the contact table (``heard``)
that region failover decides on (runtime/custody.py).

A peer whose Hello version vector is below this node's log floor for some origin (those
records were truncated) is first repaired by anti-entropy (runtime/repair.py): both sides
build a hash tree over their state (per pass, core.hashtree), compare it top-down in
TreeLevel round trips, and the pusher sends the full states of its items in differing
buckets (StateChunk). A fresh peer answers empty buckets, so it gets a whole snapshot.

Silent stalls and divergence (issue 12 items 3, 4): every sent Batch must be acked within
``ack_timeout_s`` or the link is torn down, counted (``ack_timeouts``) and redialed; an
idle link sends a Digest (state root at its version vector) every
``digest_interval_s``, and roots that differ at equal version vectors mark the peer
``state_agrees=False`` and run an anti-entropy pass on the next session (the accepting
side asks its own link to do the same, so both directions are repaired). A record the
peer refuses for what it holds (not for clock drift, which passes) would block every
later record of its origin there, since records apply in order: the link then repairs
the peer by anti-entropy, whose last chunk raises its version vector past that record
(which stays unmerged; the peer counts it in ``records_rejected``). Every Hello is
shown to the write path, which renews this node's actor if the peer has seen more of it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging

from ..core.hashtree import HashTree
from ..core.peering import ack_overdue, refusal_pause
from ..core.wire import fit_batch, oversize_note
from ..v1 import replication_pb2 as pb
from .links import PROTOCOL, Links, from_pb, hello, recv, to_pb
from .ports import PeerStream
from .repair import AntiEntropyPass, digest_answer, note_digest, tree_answer
from .state import PeerStatus

__all__ = ["PROTOCOL", "Links", "PeerLink", "serve_stream", "to_pb", "from_pb"]

log = logging.getLogger("regionsync.replication")


async def serve_stream(links: Links, stream: PeerStream) -> None:
    """Accepting side of one Sync stream: Hello, then apply each Batch and Ack it."""
    timeout = links.opts.call_timeout_s
    try:
        first = await recv(stream, timeout)
        if first is None or first.WhichOneof("kind") != "hello":
            log.warning("sync stream did not open with hello; closing")
            return
        peer = first.hello.region
        if peer not in links.peers:
            # membership: only configured peers replicate into this node
            log.warning("sync stream from %r, which is not a configured peer; closing", peer)
            return
        links.contacts.contact(peer)
        links.contacts.merge_gossip(first.hello.heard)
        await links.log.peer_hello(peer, first.hello.version_vector)
        links.peers[peer].redial.set()  # it is up: our link to it need not back off
        await links.log.actor_checked.wait()  # our Hello must carry the checked actor
        await stream.send(hello(links))
        replies: asyncio.Queue[_Reply] = asyncio.Queue()
        sender = asyncio.create_task(_send_replies(links, stream, replies))
        receiver = asyncio.create_task(_receive(links, stream, peer, replies))
        try:
            done, _ = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_EXCEPTION)
            # the receiver ends when the peer closes; either fails on an error (raised here)
            for task in done:
                task.result()
            replies.put_nowait(None)  # the peer closed: send the acks still due, then stop
            await sender
        finally:
            for task in (sender, receiver):
                task.cancel()
            await asyncio.gather(sender, receiver, return_exceptions=True)
    except (TimeoutError, ConnectionError) as exc:
        log.info("sync stream closed: %r", exc)
    finally:
        await stream.close()


# a reply of the accepting side, sent in the order its message came: a ready message, or
# an ack of a batch (its commit's durability future, or None) with the batch's rejects;
# None ends the sender
_Reply = pb.SyncMessage | tuple[asyncio.Future[None] | None, list[pb.Rejected]] | None


async def _receive(
    links: Links, stream: PeerStream, peer: str, replies: asyncio.Queue[_Reply]
) -> None:
    """Read the peer's messages and apply them; replies go to ``replies`` in order. A
    batch's ack is queued with its commit's future, not awaited here, so the next batch
    is read and applied while it commits (batches of one stream share group commits)."""
    tree: HashTree | None = None  # this pass's tree, built on its first TreeLevel
    pass_ok = True  # no StateChunk of this anti-entropy pass was rejected
    while (msg := await stream.recv()) is not None:
        links.contacts.contact(peer)
        kind = msg.WhichOneof("kind")
        if kind == "tree":
            if tree is None:
                tree, pass_ok = await links.state.state_tree(), True
            replies.put_nowait(tree_answer(tree, msg.tree))
        elif kind == "state":
            items = [(i.kind, i.body) for i in msg.state.items]
            vv = dict(msg.state.version_vector) if msg.state.last and pass_ok else None
            reason = await links.state.apply_state(items, vv)
            if reason is not None:
                pass_ok = False
            if msg.state.last:
                tree = None
            rejected = (
                [] if reason is None else [pb.Rejected(origin="", origin_seq=0, reason=reason)]
            )
            replies.put_nowait((None, rejected))
        elif kind == "digest":
            replies.put_nowait(await digest_answer(links, links.peers[peer], msg.digest))
        elif kind == "batch":
            records = [from_pb(r) for r in msg.batch.records]
            rejects, durable = await links.replica.apply_records_nowait(records)
            rejected = [pb.Rejected(origin=e.origin, origin_seq=e.seq, reason=e.reason)
                        for e in rejects]  # fmt: skip
            replies.put_nowait((durable, rejected))
        else:
            log.warning("unexpected %s from %s; ignored", kind, peer)


async def _send_replies(links: Links, stream: PeerStream, replies: asyncio.Queue[_Reply]) -> None:
    """Send ``replies`` in order; an ack once its commit is durable, carrying the durable
    version vector as of sending (so acks never go backwards). Raises the commit's error."""
    while (item := await replies.get()) is not None:
        if isinstance(item, pb.SyncMessage):
            await stream.send(item)
            continue
        durable, rejected = item
        if durable is not None:
            await asyncio.shield(durable)
        ack = pb.Ack(version_vector=links.log.durable_vv, rejected=rejected,
                     heard=links.contacts.gossip())  # fmt: skip
        await stream.send(pb.SyncMessage(ack=ack))


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
            if await self._backoff(delay):
                backoff = self.opts.reconnect_min_s

    async def _backoff(self, delay: float) -> bool:
        """Sleep ``delay`` s, or less if the peer dialed in meanwhile (True then)."""
        redial = self.status.redial
        redial.clear()
        waits = [
            asyncio.ensure_future(self.links.clock.sleep(delay)),
            asyncio.ensure_future(redial.wait()),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return redial.is_set()

    async def _session(self, stream: PeerStream) -> None:
        links, status = self.links, self.status
        await stream.send(hello(links))
        first = await recv(stream, self.opts.call_timeout_s)
        if first is None or first.WhichOneof("kind") != "hello":
            raise ConnectionError("peer did not answer with hello")
        if first.hello.region != status.region:
            raise ConnectionError(
                f"peer at {status.address} is region {first.hello.region!r}, "
                f"configured as {status.region!r}"
            )
        links.contacts.contact(status.region)
        links.contacts.merge_gossip(first.hello.heard)
        await links.log.peer_hello(status.region, first.hello.version_vector)
        peer_actor = f"{first.hello.region}:{first.hello.incarnation}"
        acked = dict(first.hello.version_vector)
        status.acked, status.hello_vv = dict(acked), dict(acked)
        status.actor = peer_actor
        status.connected, status.last_error = True, None
        status.last_contact_at_ms = links.clock.wall_ms()
        if links.replica.behind_floor(acked) or status.repair_wanted:
            # records it lacks were truncated, or a digest differed: repair by
            # anti-entropy, then use the log
            status.repair_wanted = False
            links.counters["anti_entropy_passes"] += 1
            acked.update(await AntiEntropyPass(links, status, stream).run())
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
        malformed: pb.Rejected | None = None  # a rejection that resending cannot change
        shown: pb.Rejected | None = None  # the rejection ``last_error`` names
        refusals = 0  # acks in a row that rejected something (core.peering.refusal_pause)
        lingered = self.opts.linger_ms <= 0
        sent_at: collections.deque[float] = collections.deque()  # unacked batches, oldest first
        clock = links.clock
        next_digest = clock.monotonic() + self.opts.digest_interval_s
        next_beat = clock.monotonic() + self.opts.heartbeat_s
        asked: tuple[dict[str, int], bytes] | None = None  # the digest we sent, if any

        async def read_acks() -> None:
            nonlocal inflight, sent, closed, refused, refusals, malformed, shown
            try:
                while (msg := await stream.recv()) is not None:
                    status.last_contact_at_ms = links.clock.wall_ms()
                    links.contacts.contact(status.region)
                    kind = msg.WhichOneof("kind")
                    if kind == "digest" and asked is not None:
                        d = msg.digest
                        note_digest(links, status, *asked, d.version_vector, d.root)
                        progress.set()
                        continue
                    if kind != "ack":
                        continue
                    links.contacts.merge_gossip(msg.ack.heard)
                    if sent_at:
                        sent_at.popleft()
                    for o, seq in msg.ack.version_vector.items():
                        acked[o] = max(acked.get(o, 0), seq)
                        sent[o] = max(sent.get(o, 0), seq)  # never send what it holds
                    status.acked = dict(acked)
                    status.last_ack_at_ms = links.clock.wall_ms()
                    for rej in msg.ack.rejected:
                        status.last_error = f"rejected {rej.origin}#{rej.origin_seq}: {rej.reason}"
                        shown, refused = rej, True
                        if not rej.reason.startswith("clock_drift"):  # drift passes; this not
                            malformed = rej
                    if shown is not None and acked.get(shown.origin, 0) >= shown.origin_seq:
                        status.last_error, shown = None, None  # the peer took it since
                    refusals = refusals + 1 if msg.ack.rejected else 0
                    links.on_ack()
                    inflight = max(inflight - 1, 0)  # a duplicated ack is not a batch
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
                if ack_overdue(sent_at, clock.monotonic(), self.opts.ack_timeout_s) is not None:
                    links.counters["ack_timeouts"] += 1
                    raise TimeoutError(
                        f"no ack within ack_timeout_s={self.opts.ack_timeout_s}s "
                        f"({inflight} batches unacked)"
                    )
                if inflight >= self.opts.window_batches:
                    progress.clear()
                    until = (sent_at[0] if sent_at else clock.monotonic()) + self.opts.ack_timeout_s
                    await self._wait(progress, None, until)
                    continue
                if malformed is not None and inflight == 0:
                    # records apply in order per origin: the peer would never take another
                    # of that origin from us. Anti-entropy carries our state past it.
                    log.warning(
                        "peer %s refused record %s#%d (%s); repairing it by anti-entropy",
                        status.region, malformed.origin, malformed.origin_seq, malformed.reason,
                    )  # fmt: skip
                    status.repair_wanted = True
                if status.repair_wanted and inflight == 0:
                    return  # a digest differed: the next session starts with anti-entropy
                if refused and inflight == 0:
                    o = self.opts
                    await clock.sleep(
                        refusal_pause(max(refusals, 1), o.reconnect_min_s, o.reconnect_max_s)
                    )
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
                records = fit_batch(records, self.opts.max_message_bytes)  # bytes bound too
                if note := oversize_note(records, self.opts.max_message_bytes):
                    status.last_error = note  # impossible by config; never silent
                    log.error("peer %s: %s", status.region, note)
                if records:
                    message = pb.SyncMessage(batch=pb.Batch(records=map(to_pb, records)))
                    async with asyncio.timeout(self.opts.call_timeout_s):  # a wedged link
                        await stream.send(message)
                    inflight += 1
                    sent_at.append(clock.monotonic())  # acked by ack_timeout_s, or torn down
                    sent.update((r.origin, r.seq) for r in records)  # seq order per origin
                    next_beat = clock.monotonic() + self.opts.heartbeat_s
                    continue
                if inflight == 0 and clock.monotonic() >= next_digest:
                    next_digest = clock.monotonic() + self.opts.digest_interval_s
                    vv, root = await links.state.digest()
                    if root:  # else busy: no comparison this round
                        asked = (vv, root)
                        await stream.send(
                            pb.SyncMessage(digest=pb.Digest(root=root, version_vector=vv))
                        )
                    continue
                if inflight == 0 and clock.monotonic() >= next_beat:
                    # idle: an empty batch keeps contact (and its gossip) fresh both ways
                    async with asyncio.timeout(self.opts.call_timeout_s):
                        await stream.send(pb.SyncMessage(batch=pb.Batch()))
                    inflight += 1
                    sent_at.append(clock.monotonic())
                    next_beat = clock.monotonic() + self.opts.heartbeat_s
                    continue
                if sent_at:  # (a duplicated ack may leave inflight > 0 with none unacked)
                    until = sent_at[0] + self.opts.ack_timeout_s
                else:
                    until = min(next_digest, next_beat)
                await self._wait(wake, progress, until)
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                raise reader.exception()  # type: ignore[misc]
        finally:
            links.log.drop_log_waiter(wake)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _wait(self, a: asyncio.Event, b: asyncio.Event | None, until: float) -> None:
        """Until ``a`` or ``b`` is set or the clock's monotonic time reaches ``until``."""
        waits = [asyncio.ensure_future(e.wait()) for e in (a, b) if e is not None]
        clock = self.links.clock
        waits.append(asyncio.ensure_future(clock.sleep(max(until - clock.monotonic(), 0))))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
