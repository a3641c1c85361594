"""What a node's replication sessions share: the ``Links`` bundle of the parts they use,
the wire form of log records, and the Hello message (with the release and the features
this node reads, core.capabilities; ``note_hello`` takes a peer's).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import ReplicationSettings
from ..core.capabilities import BASELINE, RELEASE, Announcement, announced
from ..core.model import Record
from ..core.records import downgrade
from ..v1 import replication_pb2 as pb
from .ports import (
    Clock,
    ContactGossip,
    LocalLog,
    PeerStream,
    PeerTransport,
    RecordSink,
    Rng,
    StateSync,
    Store,
)
from .state import PeerStatus

if TYPE_CHECKING:
    from .removal import Removals

__all__ = ["PROTOCOL", "Links", "batch_for", "from_pb", "hello", "note_hello", "recv", "to_pb"]

log = logging.getLogger("regionsync.replication")

PROTOCOL = 1


def to_pb(r: Record) -> pb.DeltaRecord:
    return pb.DeltaRecord(
        origin=r.origin,
        origin_seq=r.seq,
        kind=r.kind,
        body=r.body,
        hlc_wall_ms=r.hlc[0],
        hlc_logical=r.hlc[1],
    )


def batch_for(links: Links, region: str, records: Iterable[Record]) -> pb.Batch:
    """``records`` as the peer ``region`` reads them: a record written in a form its last
    Hello does not read (it was rolled back since) goes out in the older form
    (``core.records.downgrade``)."""
    caps = links.log.capabilities
    reads = caps.heard.get(region, Announcement()).reads
    if "optional-fields" in reads or caps.pinned is not None:  # pinned: forced new form
        return pb.Batch(records=map(to_pb, records))
    return pb.Batch(records=[to_pb(r._replace(body=downgrade(r.body, reads))) for r in records])


def from_pb(r: pb.DeltaRecord) -> Record:
    return Record(r.origin, r.origin_seq, r.kind, r.body, (r.hlc_wall_ms, r.hlc_logical))


@dataclass
class Links:
    """What the replication sessions of one node use: its log (``log``), where peers'
    records and state go (``replica``, ``state``), the peers' status table, the node's
    shared ``counters``, ``on_ack`` (called whenever a peer acknowledged records) and
    ``contacts`` (every message from a peer is a contact; Hello and Ack gossip them)."""

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
    contacts: ContactGossip
    removals: Removals | None = None  # removed regions, retired actors (runtime/removal.py)

    def outgoing_vv(self) -> dict[str, int]:
        """The durable version vector as Hello and Ack carry it (retired actors left out)."""
        vv = self.log.durable_vv
        return dict(vv) if self.removals is None else self.removals.outgoing(vv)

    def incoming_vv(self, peer: str, vv: Mapping[str, int]) -> dict[str, int]:
        """``peer``'s version vector with the retired actors covered."""
        return dict(vv) if self.removals is None else self.removals.incoming(peer, vv)

    def refusal(self, region: str, incarnation: int, vv: Mapping[str, int]) -> str | None:
        """Why a Hello is refused (a removed region with old state), or None."""
        return None if self.removals is None else self.removals.refusal(region, incarnation, vv)


def hello(links: Links) -> pb.SyncMessage:
    """This node's Hello. A node restricted to the baseline (the simulator's stand-in
    for release 0.1.0) announces neither a version nor features, as that release."""
    caps = links.log.capabilities
    reads = caps.reads
    return pb.SyncMessage(
        hello=pb.Hello(
            region=links.region,
            incarnation=links.log.incarnation,
            version_vector=links.outgoing_vv(),
            protocol=PROTOCOL,
            version="" if reads == BASELINE else RELEASE,
            features=announced(caps.region_reads),  # every process of the region
            heard=links.contacts.gossip(),
            sent_wall_ms=links.clock.wall_ms(),
        )
    )


def note_hello(links: Links, h: pb.Hello) -> None:
    """A configured peer's Hello: its release and features re-decide the cluster's
    effective feature set (core.capabilities); a change is logged."""
    caps = links.log.capabilities
    change = caps.announce(h.region, h.version, h.features, links.clock.wall_ms())
    if change is not None:
        before, after = change
        log.warning(
            "cluster feature set %s: %s -> %s (peer %s announced version %r, features %s)",
            "raised" if after > before else "lowered",
            announced(before), announced(after), h.region, h.version, list(h.features),
        )  # fmt: skip


async def recv(stream: PeerStream, timeout_s: float) -> pb.SyncMessage | None:
    async with asyncio.timeout(timeout_s):
        return await stream.recv()
