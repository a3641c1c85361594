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
peer refuses for what it holds (not for clock drift, which passes) does not block the
later records of its origin there (issue 41): the peer keeps it opaque in its log, moves
its version vector past it and says so in its Ack; this side notes it per origin
(``PeerStatus.refused``) and compares digests at once, so a state that differs is
repaired by anti-entropy. A pass after which the digests still differ is futile: the
next waits ``repair_backoff`` (core/peering.py), doubling. Every Hello is shown to the
write path, which renews this node's actor if the peer has seen more of it.

The dialing side's decisions are a state table (core/peer_session.py); ``_Dialer`` here
is its I/O: it runs the actions each step returns and feeds back what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ..core import peer_session as ps
from ..core.capabilities import announced as announced_features
from ..core.clock_offset import one_way_sample, round_trip_sample
from ..core.hashtree import HashTree
from ..core.peering import check_read
from ..core.removal import RETIRED_SEQ
from ..v1 import replication_pb2 as pb
from .links import PROTOCOL, Links, batch_for, from_pb, hello, note_hello, recv, to_pb
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
        h = first.hello
        if (reason := links.refusal(peer, h.incarnation, h.version_vector)) is not None:
            log.warning("sync stream from %s refused: %s", peer, reason)
            return
        links.incoming_vv(peer, h.version_vector)  # what it has, for retirement
        links.contacts.contact(peer)
        links.contacts.merge_gossip(first.hello.heard)
        links.log.peer_clock(peer, one_way_sample(first.hello.sent_wall_ms, links.clock.wall_ms()))
        note_hello(links, first.hello)
        await links.log.peer_hello(peer, first.hello.version_vector)
        links.peers[peer].redial.set()  # it is up: our link to it need not back off
        await links.log.actor_checked.wait()  # our Hello must carry the checked actor
        answer, announced = hello(links), links.log.capabilities.region_reads
        await stream.send(answer)
        replies: asyncio.Queue[_Reply] = asyncio.Queue()
        sender = asyncio.create_task(_send_replies(links, stream, replies))
        receiver = asyncio.create_task(_receive(links, stream, peer, replies, announced))
        try:
            done, _ = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
            # the receiver ends when the peer closes or our answer's features went stale
            # (the sender only on an error); either fails on an error (raised here)
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
    links: Links,
    stream: PeerStream,
    peer: str,
    replies: asyncio.Queue[_Reply],
    announced: frozenset[str],
) -> None:
    """Read the peer's messages and apply them; replies go to ``replies`` in order. A
    batch's ack is queued with its commit's future, not awaited here, so the next batch
    is read and applied while it commits (batches of one stream share group commits).
    Ends, so the session does, once the region reads other than ``announced`` (what our
    answer said), between anti-entropy passes (a cut pass would count as futile and be
    redone): the peer redials and hears it, as our dialer's ``Ready.reannounce`` does
    the other way (a peer we cannot dial learns it too). An idle peer sends a heartbeat
    every ``heartbeat_s`` (its own), so this is seen at the latest one after that unless
    a pass, a refusal pause or a full window holds its messages."""
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
        if tree is None and (reads := links.log.capabilities.region_reads) != announced:
            log.warning(
                "sync stream from %s ended: this region's features changed (%s -> %s); "
                "its next Hello hears them", peer, announced_features(announced),
                announced_features(reads),
            )  # fmt: skip
            return


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
        ack = pb.Ack(version_vector=links.outgoing_vv(), rejected=rejected,
                     heard=links.contacts.gossip(), sent_wall_ms=links.clock.wall_ms())  # fmt: skip
        await stream.send(pb.SyncMessage(ack=ack))


class PeerLink:
    """The dialing side towards one peer: connect, push, reconnect with backoff.

    The backoff (``reconnect_min_s`` doubling up to ``reconnect_max_s``, jittered) grows
    only while attempts fail to reach the peer: a session that was established (the
    peers exchanged Hellos) starts it again from ``reconnect_min_s``, and the peer
    dialing in (``PeerStatus.redial``, also while this link was connecting or in a
    session) cuts the next wait short, so a link to a restarted peer is up about one
    backoff step after the peer is (issue 43: it kept a backoff grown long before and
    dropped the peer's dial-in, ~50 s down). The link's down and up transitions are
    logged once each, with the reason and the time down."""

    def __init__(self, links: Links, status: PeerStatus):
        self.links = links
        self.status = status
        self.opts = links.opts
        self.down_since: float | None = None  # monotonic s since the link is down, if it was up
        self.failures = 0  # attempts since it went down
        self.ever_up = False

    async def run(self) -> None:
        backoff = self.opts.reconnect_min_s
        while True:
            self.status.redial.clear()  # a dial-in from now on shortens the next wait
            established = False
            try:
                stream = await self.links.transport.connect(
                    self.status.address, self.opts.call_timeout_s
                )
                try:
                    await _Dialer(self.links, self.status, stream, self._up).run()
                finally:
                    established = self.status.connected
                    self.status.connected = False
                    await stream.close()
            except (ConnectionError, TimeoutError, OSError) as exc:
                self.status.last_error = f"{type(exc).__name__}: {exc}"
                log.debug("peer %s: %s", self.status.region, self.status.last_error)
            except Exception as exc:  # a bug must not end replication to this peer
                self.status.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("peer %s: session failed", self.status.region)
            if established:
                backoff = self.opts.reconnect_min_s
            delay = backoff * (0.5 + 0.5 * self.links.rng.random())
            backoff = min(backoff * 2, self.opts.reconnect_max_s)
            self._down(established, delay)
            if await self._backoff(delay):
                backoff = self.opts.reconnect_min_s

    def _up(self) -> None:
        """The peers exchanged Hellos: the link is up (logged when that is news)."""
        if self.down_since is not None:
            log.warning(
                "link to %s up again after %.1f s down (%d failed attempt(s))",
                self.status.region, self.links.clock.monotonic() - self.down_since,
                self.failures,
            )  # fmt: skip
        elif not self.ever_up:
            log.info("link to %s up", self.status.region)
        self.down_since, self.failures, self.ever_up = None, 0, True

    def _down(self, established: bool, delay: float) -> None:
        """A session ended or an attempt failed; logged once, when the link goes down
        (or first fails to come up)."""
        if established:
            self.down_since = self.links.clock.monotonic()
            log.warning("link to %s down: %s; redialing in %.2f s", self.status.region,
                        self.status.last_error or "the stream closed", delay)  # fmt: skip
            return
        self.failures += 1
        if not self.ever_up and self.failures == 1:
            log.warning("link to %s not up yet: %s; redialing with backoff (up to %.1f s)",
                        self.status.region, self.status.last_error or "the stream closed",
                        self.opts.reconnect_max_s)  # fmt: skip

    async def _backoff(self, delay: float) -> bool:
        """Sleep ``delay`` s, or less if the peer dials in (True then). A dial-in that came
        while this attempt ran shortens the wait to at most ``reconnect_min_s``, never
        to nothing (two links failing at once must not redial each other in a loop)."""
        redial = self.status.redial
        if redial.is_set():
            await self.links.clock.sleep(min(delay, self.opts.reconnect_min_s))
            return True
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


class _Dialer:
    """One session's I/O around core.peer_session: runs the actions of each step, feeds
    it what they found, and (in a reader task) the peer's messages."""

    def __init__(
        self,
        links: Links,
        status: PeerStatus,
        stream: PeerStream,
        on_up: Callable[[], None] | None = None,
    ):
        self.links, self.status, self.stream = links, status, stream
        self.opts = links.opts
        self.on_up = on_up  # called once the peers exchanged Hellos
        self.state = ps.Session(status.region, status.address, ps.SessionPolicy.of(links.opts))
        self.progress = asyncio.Event()  # the peer answered (or the reader ended)
        self.wake: asyncio.Event | None = None  # new log records
        self.reader: asyncio.Task[None] | None = None
        self.announced: frozenset[str] | None = None  # what our Hello said the region reads

    def _step(self, inp: ps.Input) -> list[ps.Action]:
        self.state, actions = ps.step(self.state, inp, self.links.clock.monotonic())
        return actions

    def _ready(self) -> ps.Ready:
        behind, st = self.links.replica.behind_floor(self.state.acked), self.status
        reannounce = self.links.log.capabilities.region_reads != self.announced
        return ps.Ready(st.repair_wanted, tuple(behind), st.futile_repairs, st.last_repair_at,
                        reannounce)  # fmt: skip

    async def run(self) -> None:
        actions: list[ps.Action] = [ps.SendHello()]
        try:
            while True:
                answer: ps.Input | None = None
                for action in actions:
                    if isinstance(action, ps.Close):
                        self._close(action)
                        return
                    answer = await self._do(action)
                actions = self._step(answer if answer is not None else self._ready())
        finally:
            if self.wake is not None:
                self.links.log.drop_log_waiter(self.wake)
            if self.reader is not None:
                self.reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self.reader

    def _close(self, close: ps.Close) -> None:
        if close.error is not None:
            raise (TimeoutError if close.timed_out else ConnectionError)(close.error)
        reader = self.reader
        if reader is not None and reader.done() and not reader.cancelled():
            if (exc := reader.exception()) is not None:
                raise exc

    async def _read_peer(self) -> None:
        """The peer's messages: every one is contact; acks and digests go to the session."""
        links, status = self.links, self.status
        try:
            while (msg := await self.stream.recv()) is not None:
                status.last_contact_at_ms = links.clock.wall_ms()
                links.contacts.contact(status.region)
                kind = msg.WhichOneof("kind")
                if kind == "digest":
                    d = msg.digest
                    self._feed(ps.PeerDigest(dict(d.version_vector), d.root))
                elif kind == "ack":
                    links.contacts.merge_gossip(msg.ack.heard)
                    at = status.last_contact_at_ms
                    links.log.peer_clock(status.region, one_way_sample(msg.ack.sent_wall_ms, at))
                    rejected = tuple(ps.Refusal(r.origin, r.origin_seq, r.reason)
                                     for r in msg.ack.rejected)  # fmt: skip
                    acked = self.links.incoming_vv(self.status.region, msg.ack.version_vector)
                    self._feed(ps.Ack(acked, rejected))
        finally:
            self._feed(ps.Ended())

    def _feed(self, inp: ps.Input) -> None:
        for action in self._step(inp):
            self._apply(action)

    def _apply(self, action: ps.Action) -> None:
        """Run an action that does not wait."""
        links, status = self.links, self.status
        match action:
            case ps.Acked(vv):
                status.acked = dict(vv)
                status.last_ack_at_ms = links.clock.wall_ms()
                links.on_ack()
            case ps.ShowError(text):
                status.last_error = text
            case ps.Wake():
                self.progress.set()
            case ps.NoteDigest(mine, my_root, theirs, their_root):
                note_digest(links, status, mine, my_root, theirs, their_root)
            case ps.StartStreaming():
                self.wake = links.log.log_waiter()
                self.reader = asyncio.create_task(self._read_peer())
            case ps.Count(name):
                links.counters[name] += 1
            case ps.NoteRefusal(rej):
                log.warning(
                    "peer %s refused record %s#%d (%s) and moved past it",
                    status.region, rej.origin, rej.seq, rej.reason,
                )  # fmt: skip
                status.note_refused(rej.origin, rej.seq, rej.reason, links.clock.wall_ms())
            case ps.Oversize(note):
                status.last_error = note  # impossible by config; never silent
                log.error("peer %s: %s", status.region, note)
            case _:
                raise AssertionError(f"{action} waits: not for _apply")

    async def _do(self, action: ps.Action) -> ps.Input | None:
        """Run ``action``; the input it answers with, if it waited for one."""
        links, opts, stream, clock = self.links, self.opts, self.stream, self.links.clock
        match action:
            case ps.SendHello():
                return await self._hello()
            case ps.AcceptHello():
                await self._accept(action)
            case ps.StartRepair():
                self.status.repair_wanted, self.status.repair_ran = False, True
                self.status.last_repair_at = clock.monotonic()
                links.counters["anti_entropy_passes"] += 1
                repaired = await AntiEntropyPass(links, self.status, stream).run()
                return ps.Repaired(links.incoming_vv(self.status.region, repaired))
            case ps.AwaitAck(until):
                self.progress.clear()
                await self._wait(self.progress, None, until)
            case ps.Pause(seconds) | ps.Linger(seconds):
                await clock.sleep(seconds)
            case ps.ReadRecords(after, limit):
                assert self.wake is not None
                self.wake.clear()
                self.progress.clear()
                records = tuple(await links.store.records_after(after, limit))
                check_read(after, records)
                return ps.Records(records)
            case ps.SendBatch(records):
                message = pb.SyncMessage(batch=batch_for(links, self.status.region, records))
                async with asyncio.timeout(opts.call_timeout_s):  # a wedged link
                    await stream.send(message)
            case ps.ComputeDigest():
                return ps.LocalDigest(*await links.state.digest())
            case ps.SendDigest(vv, root):
                await stream.send(pb.SyncMessage(digest=pb.Digest(root=root, version_vector=vv)))
            case ps.Idle(until):
                assert self.wake is not None
                await self._wait(self.wake, self.progress, until)
            case _:
                self._apply(action)
        return None

    async def _hello(self) -> ps.PeerHello:
        sent = self.links.clock.wall_ms()
        self.announced = self.links.log.capabilities.region_reads
        await self.stream.send(hello(self.links))
        first = await recv(self.stream, self.opts.call_timeout_s)
        if first is None or first.WhichOneof("kind") != "hello":
            return ps.PeerHello(None)
        h = first.hello
        # a round trip longer than the suspect threshold says nothing about the clock
        limit = self.opts.clock_suspect_ms or None
        sample = round_trip_sample(h.sent_wall_ms, sent, self.links.clock.wall_ms(), limit)
        if (reason := self.links.refusal(h.region, h.incarnation, h.version_vector)) is not None:
            raise ConnectionError(f"hello refused: {reason}")
        if h.region == self.status.region:  # another region's Hello is refused (peer_session)
            self.links.log.peer_clock(h.region, sample)
            note_hello(self.links, h)
        vv = self.links.incoming_vv(self.status.region, h.version_vector)
        return ps.PeerHello(h.region, h.incarnation, vv, dict(h.heard))

    async def _accept(self, a: ps.AcceptHello) -> None:
        links, status = self.links, self.status
        links.contacts.contact(status.region)
        links.contacts.merge_gossip(a.heard)
        await links.log.peer_hello(status.region, a.version_vector)
        hello_vv = {o: n for o, n in a.version_vector.items() if n < RETIRED_SEQ}
        status.acked, status.hello_vv = dict(a.version_vector), hello_vv
        status.actor = a.actor
        status.connected, status.last_error = True, None
        status.last_contact_at_ms = links.clock.wall_ms()
        if self.on_up is not None:
            self.on_up()

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
