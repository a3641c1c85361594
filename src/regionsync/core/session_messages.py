"""The inputs and actions of a replication session (core/peer_session.py, its state
table): what the shell feeds ``step`` and what ``step`` asks the shell to do. Plain data,
no behaviour."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .model import Record

__all__ = [
    "INPUTS", "VV", "Ack", "AcceptHello", "Acked", "Action", "AwaitAck", "Close",
    "ComputeDigest", "Count", "Ended", "Idle", "Input", "Linger", "LocalDigest", "NoteDigest",
    "NoteRefusal", "Oversize", "Pause", "PeerDigest", "PeerHello", "ReadRecords", "Ready",
    "Records", "Refusal", "Repaired", "SendBatch", "SendDigest", "SendHello", "ShowError",
    "StartRepair", "StartStreaming", "Wake",
]  # fmt: skip

VV = Mapping[str, int]  # a version vector: origin -> highest seq


@dataclass(frozen=True, slots=True)
class Refusal:
    """A record the peer rejected (an Ack's ``rejected``)."""

    origin: str
    seq: int
    reason: str


# -- inputs --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeerHello:
    """The peer's first message: a Hello, or not one (``region`` None)."""

    region: str | None
    incarnation: int = 0
    version_vector: VV = field(default_factory=dict)
    heard: VV = field(default_factory=dict)  # its contact table (runtime/custody.py)


@dataclass(frozen=True, slots=True)
class Ready:
    """The last action is done (nothing to report): the node's facts now."""

    repair_wanted: bool = False  # a digest differed (PeerStatus.repair_wanted)
    behind: tuple[str, ...] = ()  # origins the peer at ``acked`` lacks below the log floor
    futile_repairs: int = 0  # passes in a row after which the digests still differed
    last_repair_at: float | None = None  # monotonic start of the last pass to the peer
    # what the region reads is no longer what this session's Hello announced (a process
    # of an older release joined or left a region on PostgreSQL): a new session says it
    reannounce: bool = False


@dataclass(frozen=True, slots=True)
class Repaired:
    """The anti-entropy pass ended; the peer's version vector after it."""

    version_vector: VV


@dataclass(frozen=True, slots=True)
class Records:
    """The log records the peer lacks (at most ``batch_records``), in order."""

    records: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class LocalDigest:
    """Our state digest: its version vector and root (b"" when busy: none this time)."""

    version_vector: VV
    root: bytes


@dataclass(frozen=True, slots=True)
class Ack:
    """The peer's Ack: its applied version vector and the records it rejected."""

    version_vector: VV
    rejected: tuple[Refusal, ...] = ()


@dataclass(frozen=True, slots=True)
class PeerDigest:
    """The peer's answer to our digest."""

    version_vector: VV
    root: bytes


@dataclass(frozen=True, slots=True)
class Ended:
    """The peer closed the stream (or reading it failed)."""


Input = PeerHello | Ready | Repaired | Records | LocalDigest | Ack | PeerDigest | Ended
INPUTS: tuple[type[Input], ...] = (
    PeerHello, Ready, Repaired, Records, LocalDigest, Ack, PeerDigest, Ended,
)  # fmt: skip

# -- actions -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendHello:
    """Send our Hello and read the peer's first message (-> PeerHello)."""


@dataclass(frozen=True, slots=True)
class AcceptHello:
    """Record the peer's Hello: contact and gossip, the write path's actor check, the
    peer's status (connected, its actor and version vector)."""

    actor: str
    version_vector: VV
    heard: VV


@dataclass(frozen=True, slots=True)
class StartRepair:
    """Run an anti-entropy pass towards the peer (-> Repaired)."""


@dataclass(frozen=True, slots=True)
class Acked:
    """The peer's version vector moved (an ack, or a repair): report it."""

    version_vector: VV


@dataclass(frozen=True, slots=True)
class ShowError:
    """Set the peer's ``last_error`` (None clears it)."""

    text: str | None


@dataclass(frozen=True, slots=True)
class Wake:
    """Wake the push loop if it waits for an ack (progress)."""


@dataclass(frozen=True, slots=True)
class NoteDigest:
    """Compare our digest with the peer's answer (runtime/repair.note_digest)."""

    mine: VV
    my_root: bytes
    theirs: VV
    their_root: bytes


@dataclass(frozen=True, slots=True)
class StartStreaming:
    """Start waiting for new log records and start the reader of the peer's messages."""


@dataclass(frozen=True, slots=True)
class Count:
    """Count one in the node's counter ``name``."""

    name: str


@dataclass(frozen=True, slots=True)
class Close:
    """End the session: with ``error`` a failure (TimeoutError if ``timed_out``, else
    ConnectionError), else normally (after the reader's own failure, if any)."""

    error: str | None = None
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class AwaitAck:
    """Wait for progress (an ack, a digest, the reader's end) or monotonic ``until``."""

    until: float


@dataclass(frozen=True, slots=True)
class NoteRefusal:
    """The peer refused ``refusal`` for what it holds and moved past it: log it and note
    it per origin (``/v1/cluster``); the digest compared next decides on a repair."""

    refusal: Refusal


@dataclass(frozen=True, slots=True)
class Pause:
    """Sleep ``seconds`` before resending refused records."""

    seconds: float


@dataclass(frozen=True, slots=True)
class ReadRecords:
    """Read the log records after ``after``, at most ``limit`` (-> Records)."""

    after: VV
    limit: int


@dataclass(frozen=True, slots=True)
class Linger:
    """Sleep ``seconds`` so that a burst fills the batch."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Oversize:
    """A record too big for any message (impossible by config): report ``note``."""

    note: str


@dataclass(frozen=True, slots=True)
class SendBatch:
    """Send a Batch of ``records`` (none: a heartbeat) within the call timeout."""

    records: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class ComputeDigest:
    """Compute our state digest (-> LocalDigest)."""


@dataclass(frozen=True, slots=True)
class SendDigest:
    version_vector: VV
    root: bytes


@dataclass(frozen=True, slots=True)
class Idle:
    """Wait for new log records, progress or monotonic ``until``."""

    until: float


Action = (
    SendHello | AcceptHello | StartRepair | Acked | ShowError | Wake | NoteDigest
    | StartStreaming | Count | Close | AwaitAck | NoteRefusal | Pause | ReadRecords
    | Linger | Oversize | SendBatch | ComputeDigest | SendDigest | Idle
)  # fmt: skip
