"""Repair between two replicas: the anti-entropy pass (hash tree compared top-down,
then state chunks of the differing buckets) and state digests (roots compared at equal
version vectors), both sides of each.

Merges nothing itself: the accepting side merges chunks through ``Links.state``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping

from ..core.hashtree import HashTree, children
from ..core.peering import digest_verdict, stream_pace
from ..core.wire import message_budget, state_item_wire_size
from ..v1 import replication_pb2 as pb
from .links import Links, recv
from .ports import PeerStream
from .slicing import Slicer
from .state import PeerStatus

__all__ = ["AntiEntropyPass", "digest_answer", "note_digest", "tree_answer"]

log = logging.getLogger("regionsync.replication")


async def digest_answer(links: Links, status: PeerStatus, theirs: pb.Digest) -> pb.SyncMessage:
    """Our Digest for the peer's: the root only when the version vectors are equal (else
    b"", not compared). A differing root asks our own link to repair the peer too."""
    vv = dict(links.log.durable_vv)
    root = b""
    if digest_verdict(vv, b"?", theirs.version_vector, b"?") is not None:
        vv, root = await links.state.digest()
    note_digest(links, status, vv, root, theirs.version_vector, theirs.root)
    return pb.SyncMessage(digest=pb.Digest(root=root, version_vector=vv))


def note_digest(
    links: Links,
    status: PeerStatus,
    my_vv: Mapping[str, int],
    my_root: bytes,
    their_vv: Mapping[str, int],
    their_root: bytes,
) -> None:
    verdict = digest_verdict(my_vv, my_root, their_vv, their_root)
    if verdict is None:
        return
    status.state_agrees = verdict
    status.last_digest_at_ms = links.clock.wall_ms()
    # a pass that left the states differing could not change them: back off (peer_session)
    status.futile_repairs = 0 if verdict else status.futile_repairs + int(status.repair_ran)
    status.repair_ran = False
    if not verdict and not status.repair_wanted:
        links.counters["digest_mismatches"] += 1
        log.warning("state of peer %s differs at equal version vectors", status.region)
        status.repair_wanted = True
        links.log.notify_log()  # wakes our link to it, which ends its session to repair


def tree_answer(tree: HashTree, req: pb.TreeLevel) -> pb.SyncMessage:
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
_SEND_ORDER = ("r/", "e/", "d/")  # tree items by ident prefix (core.hashtree)


class AntiEntropyPass:
    """The pushing side of one anti-entropy pass towards ``status``'s peer on ``stream``."""

    def __init__(self, links: Links, status: PeerStatus, stream: PeerStream):
        self.links, self.status, self.stream = links, status, stream
        self.opts = links.opts

    async def _ask(self, msg: pb.SyncMessage, kind: str) -> pb.SyncMessage:
        await self.stream.send(msg)
        reply = await recv(self.stream, self.opts.call_timeout_s)
        if reply is None or reply.WhichOneof("kind") != kind:
            raise ConnectionError(f"peer did not answer anti-entropy with {kind}")
        return reply

    async def run(self) -> dict[str, int]:
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
                reply = await self._ask(pb.SyncMessage(tree=req), "tree")
                for bucket, theirs in zip(reply.tree.buckets, reply.tree.hashes, strict=False):
                    if tree.hash(bucket) == theirs or not tree.count(bucket):
                        continue
                    small = tree.count(bucket) <= opts.leaf_items
                    if not theirs or small or len(bucket) >= tree.depth:
                        send.append(bucket)
                    else:
                        frontier.extend(children(bucket))
        # registry states first (a node repaired from nothing serves its tenants and
        # endpoints from the first chunk), then events, then the deliveries of them; each
        # kind in tree order, so a pass cut midway leaves whole buckets merged (resumed)
        # (walked lazily, leaf bucket by leaf bucket: no sort over every ident, issue 42)
        return await self._stream(tree.walk_idents(send, _SEND_ORDER), vv)

    async def _stream(self, idents: Iterator[str | None], vv: dict[str, int]) -> dict[str, int]:
        """Send the state of ``idents`` in chunks, the last one carrying ``vv``. Paced
        (``repair_bytes_per_s``, core.peering.stream_pace) and yielding to the loop
        between batches of items, so the serving side keeps answering (issue 42). Each
        chunk the peer acks is merged there, so a pass after a dropped link finds those
        buckets equal and sends only the rest."""
        links, opts = self.links, self.opts
        chunk: list[pb.StateItem] = []
        size = sent = 0
        budget = min(opts.state_chunk_bytes, message_budget(opts.max_message_bytes))
        started = links.clock.monotonic()
        slicer = Slicer(pause_ratio=0.0)  # the walk returns to the loop every 10 ms
        while batch := await self._next_batch(idents, slicer):
            for kind, body in await links.state.state_items(batch):
                item = state_item_wire_size(kind, body)
                if chunk and size + item > budget:  # cut before it would overflow
                    await self._send_chunk(chunk, None)
                    sent += size
                    chunk, size = [], 0
                    elapsed = links.clock.monotonic() - started
                    if wait := stream_pace(sent, elapsed, opts.repair_bytes_per_s):
                        await links.clock.sleep(wait)
                chunk.append(pb.StateItem(kind=kind, body=body))
                size += item
            await asyncio.sleep(0)  # requests and commits run between batches
        return await self._send_chunk(chunk, vv)

    @staticmethod
    async def _next_batch(idents: Iterator[str | None], slicer: Slicer) -> list[str]:
        """The next 256 idents of the walk (fewer at its end); at each of its pause
        points, a return to the loop if the slice has run its time."""
        batch: list[str] = []
        for ident in idents:
            if ident is None:
                await slicer.tick()
            else:
                batch.append(ident)
                if len(batch) == 256:
                    break
        return batch

    async def _send_chunk(
        self, items: list[pb.StateItem], vv: dict[str, int] | None
    ) -> dict[str, int]:
        msg = pb.StateChunk(items=items, last=vv is not None, version_vector=vv or {})
        reply = await self._ask(pb.SyncMessage(state=msg), "ack")
        for rej in reply.ack.rejected:
            self.status.last_error = f"state chunk rejected: {rej.reason}"
            raise ConnectionError(self.status.last_error)
        return dict(reply.ack.version_vector)
