"""The delivery worker's due rows in memory (runtime/delivery.py, without ``claims``).

``ready`` holds due deliveries read ahead or handed over by ingest, not yet started;
``Quiet`` is what a read ahead that found nothing tells the worker: no row outside the
blocked endpoints and the held rows is due before ``until_ms``, so neither another read
nor the wait's next-due query is needed until then, unless something was added or
dropped that the read did not see.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.lanes import Lane
from ..core.model import Delivery, Event

__all__ = ["READ_AHEAD_ROWS", "Quiet", "Reads", "Ready", "take_fresh"]

READ_AHEAD_ROWS = 8  # due rows read ahead at a time per ``delivery.concurrency``

Ready = dict[str, tuple[Delivery, Event | None]]  # delivery id -> (delivery, its event)


@dataclass(frozen=True, slots=True)
class Quiet:
    """A read ahead at monotonic ``at_s`` found no due row: none outside ``blocked``
    and the rows then held is due before ``until_ms`` (Unix ms; None: none is pending).
    ``seen`` is the count of additions and drops (``DeliveryQueue.added`` plus the
    worker's drops) when the read started: a later one may hold rows it did not read."""

    at_s: float
    until_ms: int | None
    blocked: frozenset[str]
    seen: int


class Reads:
    """The worker's reads ahead: the last that found nothing (``quiet``), how many times
    rows held unstarted were let go (``dropped``), and the earliest retry scheduled
    while a read ran (its row was held: the read did not see it)."""

    def __init__(self) -> None:
        self.quiet: Quiet | None = None
        self.dropped = 0
        self._retry_ms: int | None = None
        self._started = 0  # ``seen`` of the last read started

    def holds(
        self, added: int, now_s: float, now_ms: int, max_age_s: float, blocked: set[str] | None
    ) -> bool:
        """Is nothing due yet (``now_ms``), with nothing added (``added``: the queue's
        count) or dropped since, and ``max_age_s`` (the idle poll, which bounds what an
        addition without a wake-up waits) not yet passed; and would a read now skip at
        least the endpoints that one skipped (``blocked``; None: not asked)? A quiet that
        no longer holds is forgotten."""
        q = self.quiet
        if q is None:
            return False
        if (
            added + self.dropped != q.seen
            or now_s - q.at_s >= max_age_s
            or (q.until_ms is not None and now_ms >= q.until_ms)
        ):
            self.quiet = None
            return False
        return blocked is None or q.blocked <= blocked

    def drop(self, n: int) -> None:
        """``n`` rows held unstarted were let go: a read may find them again."""
        if n:
            self.dropped += 1
            self.quiet = None

    def retried(self, at_ms: int) -> None:
        """An attempt finished with a retry at ``at_ms``: due then, unread."""
        self._retry_ms = at_ms if self._retry_ms is None else min(self._retry_ms, at_ms)
        q = self.quiet
        if q is not None and (q.until_ms is None or at_ms < q.until_ms):
            self.quiet = replace(q, until_ms=at_ms)

    def keep_blocked(self, ready: Ready, blocked: set[str], concurrency: int) -> int:
        """Keep in ``ready`` the rows of endpoints whose lane cannot start one now (full,
        rate-limited, probing), up to ``READ_AHEAD_ROWS x concurrency`` in all, so each
        freed slot or token starts the next from memory instead of a read (a read skips
        blocked endpoints and held rows); returns how many rows are ready for the other
        endpoints."""
        kept = others = dropped = 0
        for did, (d, _) in list(ready.items()):
            if d.endpoint_id not in blocked:
                others += 1
            elif kept < READ_AHEAD_ROWS * concurrency:
                kept += 1
            else:
                del ready[did]
                dropped += 1
        self.drop(dropped)
        return others

    def start(self, added: int) -> int:
        """A read starts; returns its ``seen`` (also kept: ``moved_since_start``)."""
        self._retry_ms = None
        self._started = added + self.dropped
        return self._started

    def moved_since_start(self, added: int) -> bool:
        """Was anything added or dropped since the last read started?"""
        return added + self.dropped != self._started

    def found_nothing(
        self, at_s: float, later_ms: int | None, blocked: set[str], seen: int
    ) -> None:
        """The read that started with ``seen`` found nothing due; ``later_ms``: the
        earliest schedule of the rows it skipped as not yet due."""
        until = min((t for t in (later_ms, self._retry_ms) if t is not None), default=None)
        self.quiet = Quiet(at_s, until, frozenset(blocked), seen)


def take_fresh(
    fresh: Ready, ready: Ready, inflight: dict[str, str], lanes: dict[str, Lane],
    handed: set[str] | None,
) -> Ready:  # fmt: skip
    """``ready`` with the deliveries ingest handed over (``fresh``: durable, pending, due
    now) moved in, noting in ``handed`` (when a read is under way) those taken: that
    read must not return them, they may be attempted meanwhile. As ``fair_order`` would
    place them, cheaply: the first row of an endpoint with nothing in flight or ready
    goes before the rows ready, every other row after."""
    waiting: set[str] | None = None  # endpoints with rows ready (built if needed)
    first: Ready = {}
    for did, row in fresh.items():
        if did in inflight or did in ready:
            continue
        if handed is not None:
            handed.add(did)
        eid = row[0].endpoint_id
        lane = lanes.get(eid)
        if lane is None or lane.inflight == 0:
            if waiting is None:
                waiting = {d.endpoint_id for d, _ in ready.values()}
            if eid not in waiting:
                first[did] = row
                waiting.add(eid)
                continue
        ready[did] = row
    fresh.clear()
    if first:
        first.update(ready)
        return first
    return ready
