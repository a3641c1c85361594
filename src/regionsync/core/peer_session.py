"""The dialing side of a replication session as a state table; runtime/replication.py
is its I/O shell (it sends, reads, sleeps and reports; this module decides).

``step(session, input, now)`` returns the next session and the actions to run, in
order (both kinds of message are in core/session_messages.py); it never does I/O and
never reads a clock (``now``: the caller's monotonic seconds). Every (phase, input) pair
is in ``TABLE``; a pair that cannot happen (an ack before the reader runs) raises
``SessionError``, a bug in the shell.

The shell runs the actions of a step in order. At most the last one waits for
something and answers with the next input (``SendHello`` with the peer's ``PeerHello``,
``ReadRecords`` with ``Records``, ...); when none answers, the next input is ``Ready``,
the node's facts at that moment. The reader the session starts (``StartStreaming``)
feeds ``Ack``, ``PeerDigest`` and, when the stream ends, ``Ended``, whatever the push
loop is waiting for.

The session: Hello both ways (``HANDSHAKE``; the peer's must name the configured
region), an anti-entropy pass first if the peer is behind the log floor or a digest
differed (``REPAIRING``), then the push loop: batches of the records the peer lacks, at
most ``window_batches`` unacked, each acked within ``ack_timeout_s``; a record refused
for now (``refusal_passes``) pauses the link (``refusal_pause``); one the peer moved past
is noted and digests are compared at once (a difference: anti-entropy, not repeated
before ``repair_backoff`` if futile); an idle link sends a digest every
``digest_interval_s`` and an empty batch (a heartbeat) every ``heartbeat_s``. A session
whose Hello no longer says what the region reads (``Ready.reannounce``) ends after the
Hello, a pause or at the top of the push loop, so the next Hello says it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any

from .invariants import check
from .peering import ack_overdue, refusal_passes, refusal_pause, repair_backoff
from .session_messages import (
    INPUTS,
    VV,
    AcceptHello,
    Ack,
    Acked,
    Action,
    AwaitAck,
    Close,
    ComputeDigest,
    Count,
    Ended,
    Idle,
    Input,
    Linger,
    LocalDigest,
    NoteDigest,
    NoteRefusal,
    Oversize,
    Pause,
    PeerDigest,
    PeerHello,
    ReadRecords,
    Ready,
    Records,
    Refusal,
    Repaired,
    SendBatch,
    SendDigest,
    SendHello,
    ShowError,
    StartRepair,
    StartStreaming,
    Wake,
)
from .wire import fit_batch, oversize_note

__all__ = [
    "INPUTS", "TABLE", "Ack", "AcceptHello", "Acked", "Action", "AwaitAck", "Close",
    "ComputeDigest", "Count", "Ended", "Idle", "Input", "Linger", "LocalDigest", "NoteDigest",
    "NoteRefusal", "Oversize", "Pause", "PeerDigest", "PeerHello", "Phase", "ReadRecords",
    "Ready", "Records", "Refusal", "Repaired", "SendBatch", "SendDigest", "SendHello",
    "Session", "SessionError", "SessionPolicy", "ShowError", "StartRepair", "StartStreaming",
    "Wake", "step"
]  # fmt: skip


class SessionError(Exception):
    """A (phase, input) pair that cannot happen: the shell fed the wrong input."""


class Phase(Enum):
    """What the session is doing, or (while an action runs) waiting for."""

    HANDSHAKE = "handshake"  # our Hello is out; the peer's is awaited and checked
    ESTABLISHED = "established"  # the peer's Hello accepted: repair first, or push
    REPAIRING = "repairing"  # an anti-entropy pass runs (runtime/repair.py)
    REPAIRED = "repaired"  # ... done: the peer must now be past the log floor
    STREAMING = "streaming"  # the top of the push loop: deciding the next move
    WINDOW_FULL = "window_full"  # window_batches unacked: awaiting an ack or its deadline
    PAUSED = "paused"  # the peer refused a record: pausing before resending
    READING = "reading"  # reading the records the peer lacks from the log
    LINGERING = "lingering"  # a short batch: letting a burst fill it
    SENDING = "sending"  # a batch (or an empty one, the heartbeat) on its way
    DIGESTING = "digesting"  # our state digest being computed, then sent
    IDLE = "idle"  # nothing to send: awaiting records, an ack or a timer
    CLOSED = "closed"  # over (the Close action said how)


@dataclass(frozen=True, slots=True)
class SessionPolicy:
    """The replication settings a session decides by (config.ReplicationSettings)."""

    batch_records: int
    max_message_bytes: int
    window_batches: int
    ack_timeout_s: float
    linger_ms: float
    heartbeat_s: float
    digest_interval_s: float
    reconnect_min_s: float
    reconnect_max_s: float

    @classmethod
    def of(cls, settings: Any) -> SessionPolicy:
        """The policy of anything with these attributes (a ReplicationSettings)."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})


@dataclass(frozen=True, slots=True)
class Session:
    """One session towards ``region`` at ``address``. Mappings are never changed in
    place: a step that changes one builds a new one.

    ``acked``: the peer's version vector as it last said; ``sent``: what it holds once
    everything sent is applied (the next read starts there); ``sent_at``: monotonic send
    times of the unacked batches, oldest first; ``inflight``: batches sent and not acked
    (a duplicated ack can leave it above ``len(sent_at)``); ``sending``: the (origin,
    seq) of the batch on its way. ``refused``: the peer rejected a record for now since
    the last pause; ``refusals``: acks in a row that rejected something; ``shown``: the
    one ``last_error`` names.
    ``asked``: the digest (version vector, root) we sent last, if any.
    """

    region: str
    address: str
    policy: SessionPolicy
    phase: Phase = Phase.HANDSHAKE
    actor: str = ""  # the peer's own actor (region:incarnation), from its Hello
    acked: VV = field(default_factory=dict)
    sent: VV = field(default_factory=dict)
    sent_at: tuple[float, ...] = ()
    inflight: int = 0
    sending: tuple[tuple[str, int], ...] = ()
    refused: bool = False
    refusals: int = 0
    shown: Refusal | None = None
    lingered: bool = False  # this batch already waited linger_ms
    next_digest: float = 0.0
    next_beat: float = 0.0
    asked: tuple[VV, bytes] | None = None
    peer_closed: bool = False  # the reader ended: the push loop ends at its top


Out = tuple[Session, list[Action]]

# -- transitions ---------------------------------------------------------------------


def _hello(s: Session, h: PeerHello, now: float) -> Out:
    if h.region is None:
        return _close(s, "peer did not answer with hello")
    if h.region != s.region:
        return _close(s, f"peer at {s.address} is region {h.region!r}, configured as {s.region!r}")
    actor, acked = f"{h.region}:{h.incarnation}", dict(h.version_vector)
    return replace(s, phase=Phase.ESTABLISHED, actor=actor, acked=acked), [
        AcceptHello(actor, acked, h.heard)
    ]


def _repair_due(s: Session, r: Ready, now: float) -> bool:
    """A digest differed and the backoff after futile passes (``repair_backoff``) is over."""
    last, wait = r.last_repair_at, repair_backoff(r.futile_repairs, s.policy.digest_interval_s)
    return r.repair_wanted and (last is None or now >= last + wait)


def _reannounce(s: Session) -> Out:
    """End the session: the peer keeps a Hello's features for the whole session, and
    what the region reads changed since ours; the next session's Hello says it."""
    s, actions = _close(s, None)
    return s, [ShowError("this region's features changed: a new Hello announces them"),
               *actions]  # fmt: skip


def _established(s: Session, r: Ready, now: float) -> Out:
    if r.reannounce:  # before a repair, which may run for minutes
        return _reannounce(s)
    # records it lacks were truncated, or a digest differed (and no backoff): repair first
    if r.behind or _repair_due(s, r, now):
        return replace(s, phase=Phase.REPAIRING), [StartRepair()]
    return _start_push(s, r, now)


def _repaired(s: Session, r: Repaired, now: float) -> Out:
    for o, seq in r.version_vector.items():  # the peer's durable vector only grows
        check(seq >= s.acked.get(o, 0), "repair moved %s's %s back to %d", s.region, o, seq)
    acked = {**s.acked, **r.version_vector}
    return replace(s, phase=Phase.REPAIRED, acked=acked), [Acked(acked)]


def _after_repair(s: Session, r: Ready, now: float) -> Out:
    if r.behind:
        return _close(s, f"anti-entropy left the peer behind for {list(r.behind)}")
    return _start_push(s, r, now)


def _start_push(s: Session, r: Ready, now: float) -> Out:
    p = s.policy
    s = replace(
        s,
        phase=Phase.STREAMING,
        sent=dict(s.acked),
        lingered=p.linger_ms <= 0,
        next_digest=now + p.digest_interval_s,
        next_beat=now + p.heartbeat_s,
    )
    s, actions = _top(s, r, now)
    return s, [StartStreaming(), *actions]


def _top(s: Session, r: Ready, now: float) -> Out:
    """The top of the push loop: end, wait for the window, pause, or read records."""
    p = s.policy
    if s.peer_closed:
        return _close(s, None)
    if ack_overdue(s.sent_at, now, p.ack_timeout_s) is not None:
        s, actions = _close(
            s,
            f"no ack within ack_timeout_s={p.ack_timeout_s}s ({s.inflight} batches unacked)",
            timed_out=True,
        )
        return s, [Count("ack_timeouts"), *actions]
    if r.reannounce:
        return _reannounce(s)
    if s.inflight >= p.window_batches:
        until = (s.sent_at[0] if s.sent_at else now) + p.ack_timeout_s
        return replace(s, phase=Phase.WINDOW_FULL), [AwaitAck(until)]
    if s.inflight:
        return _read(s, r)
    if _repair_due(s, r, now):
        return _close(s, None)  # a digest differed: the next session repairs
    if s.refused:
        pause = refusal_pause(max(s.refusals, 1), p.reconnect_min_s, p.reconnect_max_s)
        return replace(s, phase=Phase.PAUSED), [Pause(pause)]
    return _read(s, r)


def _paused(s: Session, r: Ready, now: float) -> Out:
    if r.reannounce:
        return _reannounce(s)
    return _read(replace(s, refused=False), r)


def _read(s: Session, r: Ready) -> Out:
    if s.inflight == 0 and r.behind:
        return _close(s, "peer fell behind the log floor")  # a new session repairs it
    sent = {**s.sent, s.actor: 1 << 62}  # a peer never lacks its own records
    return replace(s, phase=Phase.READING, sent=sent), [ReadRecords(sent, s.policy.batch_records)]


def _records(s: Session, got: Records, now: float) -> Out:
    """Send what was read (after a linger if it is a short batch), else a digest or a
    heartbeat when due, else wait."""
    p, records = s.policy, got.records
    if records and len(records) < p.batch_records and not s.lingered:
        return replace(s, phase=Phase.LINGERING, lingered=True), [Linger(p.linger_ms / 1000)]
    s = replace(s, lingered=p.linger_ms <= 0)
    batch = tuple(fit_batch(records, p.max_message_bytes))  # the bytes bound too
    actions: list[Action] = []
    if note := oversize_note(batch, p.max_message_bytes):
        actions.append(Oversize(note))
    if batch:
        marks = tuple((r.origin, r.seq) for r in batch)
        return replace(s, phase=Phase.SENDING, sending=marks), [*actions, SendBatch(batch)]
    if s.inflight == 0 and now >= s.next_digest:
        s = replace(s, phase=Phase.DIGESTING, next_digest=now + p.digest_interval_s)
        return s, [*actions, ComputeDigest()]
    if s.inflight == 0 and now >= s.next_beat:
        # idle: an empty batch keeps contact (and its gossip) fresh both ways
        return replace(s, phase=Phase.SENDING, sending=()), [*actions, SendBatch(())]
    if s.sent_at:  # (a duplicated ack may leave inflight > 0 with none unacked)
        until = s.sent_at[0] + p.ack_timeout_s
    else:
        until = min(s.next_digest, s.next_beat)
    return replace(s, phase=Phase.IDLE), [*actions, Idle(until)]


def _sent(s: Session, r: Ready, now: float) -> Out:
    """A batch went out: it is due an ack within ack_timeout_s, or the link is torn down."""
    window = s.policy.window_batches
    check(s.inflight < window, "batch sent to %s past the window (%d)", s.region, window)
    return replace(
        s,
        phase=Phase.STREAMING,
        inflight=s.inflight + 1,
        sent_at=(*s.sent_at, now),
        sent={**s.sent, **dict(s.sending)},  # seq order per origin: the last is the highest
        sending=(),
        next_beat=now + s.policy.heartbeat_s,
    ), []


def _digest(s: Session, d: LocalDigest, now: float) -> Out:
    if not d.root:  # busy: no comparison this round
        return replace(s, phase=Phase.STREAMING), []
    return replace(s, asked=(d.version_vector, d.root)), [SendDigest(d.version_vector, d.root)]


def _again(s: Session, r: Ready, now: float) -> Out:
    """Back to the top of the push loop (its next step, on the next Ready)."""
    return replace(s, phase=Phase.STREAMING), []


def _ack(s: Session, a: Ack, now: float) -> Out:
    acked, sent = dict(s.acked), dict(s.sent)
    for o, seq in a.version_vector.items():
        acked[o] = max(acked.get(o, 0), seq)
        sent[o] = max(sent.get(o, 0), seq)  # never send what it holds
    shown, refused, actions = s.shown, s.refused, list[Action]()
    # moved past by the peer: noted, and states compared at once (a repair if they differ)
    notes = [NoteRefusal(rej) for rej in a.rejected if not refusal_passes(rej.reason)]
    for rej in (rej for rej in a.rejected if refusal_passes(rej.reason)):  # resent later
        actions = [ShowError(f"rejected {rej.origin}#{rej.seq}: {rej.reason}")]
        shown, refused = rej, True
    if shown is not None and acked.get(shown.origin, 0) >= shown.seq:
        actions, shown = [ShowError(None)], None  # the peer took it since
    inflight = max(s.inflight - 1, 0)  # a duplicated ack is not a batch
    if inflight == 0:
        sent = dict(acked)  # everything sent was answered: resend what it still lacks
    s = replace(
        s,
        acked=acked,
        sent=sent,
        sent_at=s.sent_at[1:],
        inflight=inflight,
        refused=refused,
        refusals=s.refusals + 1 if a.rejected else 0,
        shown=shown,
        next_digest=min(s.next_digest, now) if notes else s.next_digest,
    )
    return s, [*actions, *notes, Acked(acked), Wake()]


def _peer_digest(s: Session, d: PeerDigest, now: float) -> Out:
    if s.asked is None:
        return s, []
    return s, [NoteDigest(*s.asked, d.version_vector, d.root), Wake()]


def _ended(s: Session, e: Ended, now: float) -> Out:
    return replace(s, peer_closed=True), [Wake()]


def _after_close(s: Session, inp: Input, now: float) -> Out:
    return s, []  # the reader's last words, after the session decided to end


def _refuse(s: Session, inp: Input, now: float) -> Out:
    raise SessionError(f"{type(inp).__name__} cannot happen in {s.phase.name}")


def _close(s: Session, error: str | None, timed_out: bool = False) -> Out:
    return replace(s, phase=Phase.CLOSED), [Close(error, timed_out)]


# -- the table -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """A transition: its handler and the phases it may lead to."""

    handler: Callable[[Session, Any, float], Out]
    to: frozenset[Phase]


def _to(handler: Callable[[Session, Any, float], Out], *phases: Phase) -> Rule:
    return Rule(handler, frozenset(phases))


P = Phase
_PUSH_NEXT = (P.CLOSED, P.WINDOW_FULL, P.PAUSED, P.READING)  # where _top leads
# the push loop's phases: the reader runs, so the peer's messages may arrive in each
PUSHING = (P.STREAMING, P.WINDOW_FULL, P.PAUSED, P.READING, P.LINGERING, P.SENDING,
           P.DIGESTING, P.IDLE)  # fmt: skip

_RULES: dict[tuple[Phase, type[Input]], Rule] = {
    (P.HANDSHAKE, PeerHello): _to(_hello, P.ESTABLISHED, P.CLOSED),
    (P.ESTABLISHED, Ready): _to(_established, P.REPAIRING, *_PUSH_NEXT),
    (P.REPAIRING, Repaired): _to(_repaired, P.REPAIRED),
    (P.REPAIRED, Ready): _to(_after_repair, *_PUSH_NEXT),
    (P.STREAMING, Ready): _to(_top, *_PUSH_NEXT),
    (P.WINDOW_FULL, Ready): _to(_top, *_PUSH_NEXT),
    (P.PAUSED, Ready): _to(_paused, P.CLOSED, P.READING),
    (P.READING, Records): _to(_records, P.LINGERING, P.SENDING, P.DIGESTING, P.IDLE),
    (P.LINGERING, Ready): _to(_top, *_PUSH_NEXT),
    (P.SENDING, Ready): _to(_sent, P.STREAMING),
    (P.DIGESTING, LocalDigest): _to(_digest, P.DIGESTING, P.STREAMING),
    (P.DIGESTING, Ready): _to(_again, P.STREAMING),
    (P.IDLE, Ready): _to(_top, *_PUSH_NEXT),
    **{(p, Ack): _to(_ack, p) for p in PUSHING},
    **{(p, PeerDigest): _to(_peer_digest, p) for p in PUSHING},
    **{(p, Ended): _to(_ended, p) for p in PUSHING},
    **{(P.CLOSED, i): _to(_after_close, P.CLOSED) for i in (Ack, PeerDigest, Ended)},
}
# every (phase, input) pair: those above, and the rest, which cannot happen (they raise)
TABLE: dict[tuple[Phase, type[Input]], Rule] = {
    (p, i): _RULES.get((p, i), _to(_refuse)) for p in Phase for i in INPUTS
}


def step(s: Session, inp: Input, now: float) -> Out:
    """The session after ``inp`` at monotonic ``now``, and the actions to run in order."""
    return TABLE[(s.phase, type(inp))].handler(s, inp, now)
