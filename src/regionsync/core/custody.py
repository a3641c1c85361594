"""Custody of deliveries across regions: who delivers a region's pending deliveries.

Decides, from the last contact times every region gossips and the replicated custody
records, which regions are suspected dead, which custody records to write, and which
region delivers a given (owner region, endpoint); never reads time or does I/O (callers
pass ``now_ms``). Rules:

- A region is *suspected* when no region (this one, or any peer through gossip) has heard
  from it for ``failover_after_ms``; a peer never heard from since this node started
  counts from the start. No quorum: the evidence is replicated, not voted on.
- A custody record per owner region is an LWW register (crdt.LWWRegister: vector clock,
  then HLC, then actor) holding ``{"live": [regions], "since": ms, "by": region}``. When
  ``owner`` is in ``live`` it delivers its own deliveries; otherwise each endpoint's
  deliveries go to the rendezvous-hashing winner among ``live`` (highest random weight,
  Thaler and Ravishankar, "Using name-based mappings to increase hit rates", 1998), so
  the load of a dead region spreads per endpoint and every region that holds the same
  record computes the same custodian.
- A live region writes a record for a suspected owner when none excludes it yet, or the
  record names a suspected successor. The owner writes the hand-back record (``live``
  with itself) once it has merged everything its live peers hold.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .invariants import check

__all__ = ["CustodyRecord", "custody_writes", "lagging", "rendezvous", "suspected"]


def rendezvous(candidates: Iterable[str], key: str) -> str:
    """The candidate with the highest weight ``sha256(candidate NUL key)``; ties (never in
    practice) go to the greater name. Raises ValueError for no candidates."""
    best = max(
        candidates,
        key=lambda c: (hashlib.sha256(f"{c}\0{key}".encode()).digest(), c),
        default=None,
    )
    if best is None:
        raise ValueError("rendezvous over no candidates")
    return best


@dataclass(frozen=True, slots=True)
class CustodyRecord:
    """One owner's custody: ``live`` the regions deliverable to (sorted), ``since_ms``
    when this record was decided, ``by`` the region that decided it."""

    live: tuple[str, ...]
    since_ms: int
    by: str

    def custodian(self, owner: str, endpoint_id: str) -> str:
        """The region that delivers ``owner``'s deliveries to ``endpoint_id``."""
        if owner in self.live or not self.live:
            return owner
        return rendezvous(self.live, endpoint_id)

    def to_value(self) -> dict[str, Any]:
        """The LWW register value (msgpack-friendly)."""
        return {"live": list(self.live), "since": self.since_ms, "by": self.by}

    @classmethod
    def from_value(cls, value: Any) -> CustodyRecord | None:
        """Parse a register value; None for anything that is not a custody record."""
        if not isinstance(value, dict):
            return None
        live, since, by = value.get("live"), value.get("since"), value.get("by")
        if not (isinstance(live, list) and all(isinstance(r, str) for r in live)):
            return None
        if not (isinstance(since, int) and not isinstance(since, bool) and isinstance(by, str)):
            return None
        return cls(tuple(sorted(set(live))), since, by)


def suspected(
    now_ms: int,
    peers: Iterable[str],
    heard_ms: Mapping[str, int],
    started_ms: int,
    failover_after_ms: int,
) -> frozenset[str]:
    """Peers that no region has heard from for ``failover_after_ms`` (milliseconds).

    ``heard_ms``: region -> the latest wall-clock ms any region reported hearing it
    (own contacts and gossip, merged by max); a peer absent from it counts from
    ``started_ms``.
    """
    return frozenset(
        p for p in peers if now_ms - max(heard_ms.get(p, 0), started_ms) > failover_after_ms
    )


def lagging(
    mine: Mapping[str, int],
    theirs: Mapping[str, int],
    exclude: Iterable[str],
) -> list[str]:
    """Origins of ``theirs`` (a peer's version vector) that ``mine`` lacks records of,
    but for ``exclude``. Records this node refused are covered by ``mine`` already (it
    moves past them), so readiness never waits on a refusal."""
    skip = set(exclude)
    return sorted(o for o, seq in theirs.items() if o not in skip and mine.get(o, 0) < seq)


def custody_writes(
    region: str,
    peers: Iterable[str],
    suspects: frozenset[str],
    records: Mapping[str, CustodyRecord],
    caught_up: bool,
    now_ms: int,
) -> dict[str, CustodyRecord]:
    """The custody records ``region`` should write now: owner -> new record.

    ``records``: the merged custody record of each owner that has one; ``caught_up``:
    this node holds everything its unsuspected peers hold (the hand-back condition).
    """
    live = tuple(sorted({region, *(p for p in peers if p not in suspects)}))
    out: dict[str, CustodyRecord] = {}
    for owner in sorted(suspects):
        rec = records.get(owner)
        if rec is None or owner in rec.live or any(r in suspects for r in rec.live):
            # a record naming its suspected owner live would hand the work straight back
            check(owner not in live, "custody of suspected %s adopted by %s", owner, live)
            out[owner] = CustodyRecord(live, now_ms, region)
    mine = records.get(region)
    if caught_up and mine is not None and region not in mine.live:
        out[region] = CustodyRecord(live, now_ms, region)  # hand-back
    return out
