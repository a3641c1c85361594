"""Pure decisions of replication health (issue 12 items 3 and 4): a reused actor, state
digests and ack deadlines; and the check of a log read before it is sent. Never does I/O
and never reads a clock: takes values, returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .invariants import check
from .model import Record

__all__ = [
    "ack_overdue", "actor_reused", "check_read", "digest_verdict", "next_incarnation",
    "refusal_pause", "refusal_passes", "repair_backoff", "stream_pace",
]  # fmt: skip


def actor_reused(actor: str, local_vv: Mapping[str, int], peer_vv: Mapping[str, int]) -> bool:
    """True when a peer has seen more records of this node's ``actor`` than it holds.

    A store only ever ships durable records, so after a crash the peer's entry is at most
    the local one. More at the peer means the store was restored from an older copy: new
    writes under ``actor`` would reuse sequence numbers and OR-Set dots the peer already
    has (dropped as duplicates, or cancelling another add), so a new actor is needed.
    """
    return peer_vv.get(actor, 0) > local_vv.get(actor, 0)


def next_incarnation(now_ms: int, current: int) -> int:
    """A new incarnation: the wall clock in ms, strictly above ``current``."""
    return max(now_ms, current + 1)


def digest_verdict(
    my_vv: Mapping[str, int], my_root: bytes, their_vv: Mapping[str, int], their_root: bytes
) -> bool | None:
    """True if the two state roots agree, False if they differ, None when not comparable.

    Roots are comparable only if both were computed (non-empty, or both trees empty is
    reported by the caller as ``b"\\0"``) at equal version vectors: at different ones a
    difference is expected and says nothing (zero entries count as missing).
    """
    mine = {k: v for k, v in my_vv.items() if v}
    theirs = {k: v for k, v in their_vv.items() if v}
    if mine != theirs or not my_root or not their_root:
        return None
    return my_root == their_root


def ack_overdue(sent_at: Sequence[float], now: float, timeout_s: float) -> float | None:
    """Seconds the oldest unacked batch is past its deadline (>= 0), else None.

    ``sent_at``: monotonic send times (s) of the batches not yet acked, oldest first.
    """
    if not sent_at:
        return None
    late = now - (sent_at[0] + timeout_s)
    return late if late >= 0 else None


def refusal_pause(refusals: int, min_s: float, max_s: float) -> float:
    """Seconds to pause before resending after the peer refused records ``refusals``
    times in a row (>= 1): ``min_s`` doubling per refusal, at most ``max_s``
    (``replication.reconnect_min_s`` / ``reconnect_max_s``). A refusal that clears in a
    moment (an HLC stamp the peer's clock passes within milliseconds, crdt/_hlc.py) then
    stalls the link ``min_s``, not ``max_s``; one that persists costs ever fewer resends.
    """
    if refusals < 1:
        return 0.0
    return min(min_s * 2 ** min(refusals - 1, 62), max_s)


def refusal_passes(reason: str) -> bool:
    """Whether a refused record may be taken later as it is: one whose HLC stamp is too
    far ahead (``clock_drift``) passes once the receiver's clock does, so its successors
    wait behind it; any other refusal (a body the receiver cannot decode, a section it
    does not know, a stamp outside crdt's ranges) never passes there, so the receiver
    moves past it (runtime/replica.py) and state transfer carries what it held."""
    return reason.startswith("clock_drift")


def repair_backoff(futile: int, interval_s: float) -> float:
    """Seconds a wanted anti-entropy pass waits after the last one when ``futile`` passes
    in a row left the state digests differing (a state the peer refuses, so repair
    cannot change the outcome): none at first, then ``interval_s``
    (``digest_interval_s``) doubling per futile pass, at most 32 times it."""
    if futile < 1:
        return 0.0
    return interval_s * 2 ** min(futile - 1, 5)


def stream_pace(sent_bytes: int, elapsed_s: float, bytes_per_s: int) -> float:
    """Seconds a state stream (snapshot or repair) waits before its next chunk so that
    ``sent_bytes`` since it started, ``elapsed_s`` ago, stay within ``bytes_per_s``
    (``replication.repair_bytes_per_s``; 0: unbounded, no wait)."""
    if bytes_per_s <= 0:
        return 0.0
    return max(0.0, sent_bytes / bytes_per_s - elapsed_s)


def check_read(after: Mapping[str, int], records: Sequence[Record]) -> None:
    """The log's answer to a read of the records after ``after``, before a link sends it
    (core/peer_session.py): per origin, past ``after`` and in increasing seq (the session
    takes an origin's last record as the highest the peer will hold)."""
    last: dict[str, int] = {}
    for r in records:
        prev = last.get(r.origin) or after.get(r.origin, 0)
        check(r.seq > prev, "the log read %s#%d after %s#%d", r.origin, r.seq, r.origin, prev)
        last[r.origin] = r.seq
