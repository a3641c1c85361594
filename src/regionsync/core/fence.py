"""The lease fence of a region cut off from its peers: when it stops starting attempts,
and when it starts again.

A region's peers adopt its deliveries once no region has heard from it for
``failover_after_s`` (core.custody). The region itself cannot tell a cut from their
death, but it can count: once it has heard from no peer directly for the lease
``failover_after_s - fence_margin_s``, it is *fenced* and starts no attempt, neither of
its own deliveries nor of ones it adopted (it may be the cut-off side); attempts in
flight finish within ``delivery.timeout_s``, so they are over before a survivor adopts
when ``fence_margin_s`` covers that deadline and a heartbeat (the survivors may have
last heard it a heartbeat earlier). Gossip does not renew the lease: only a message from
a peer shows that this region is reachable (a contact table says what others heard).
Hearing a peer again lifts the fence only once the region is caught up with its peers
(core.custody's hand-back condition), so a custody record a survivor wrote is merged
first and the region resumes through the ordinary hand-back, never beside a survivor;
an adopter, for its part, releases an owner it hears again (``adopts``). A fence held
for ``hold`` (``replication.fence_hold_s``) with still no peer *lapses*: the region may
be the last one alive, so it delivers (and adopts) again; what was pending at the cut
may then go out twice. Never reads a clock (callers pass ``now_ms``).
Rules: Gray and Cheriton 1989, "Leases: an efficient fault-tolerant mechanism for
distributed file cache consistency".
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["INPUTS", "STATES", "TABLE", "Fence", "adopts", "fence_input", "step"]

STATES = ("open", "fenced", "rejoining", "lapsed")
INPUTS = ("quiet", "expired", "heard", "caught_up")

# (state, input) -> (next state, action); action "" is none; a pair absent here cannot
# happen ("open" has no fence to expire) and raises. Fenced in "fenced" and "rejoining";
# "fence", "unfence" and "lapse" are the transitions the runtime logs and counts.
TABLE: dict[tuple[str, str], tuple[str, str]] = {
    ("open", "quiet"): ("fenced", "fence"),
    ("open", "heard"): ("open", ""),
    ("open", "caught_up"): ("open", ""),
    ("fenced", "quiet"): ("fenced", ""),
    ("fenced", "expired"): ("lapsed", "lapse"),  # maybe the last region alive: deliver
    ("fenced", "heard"): ("rejoining", ""),  # a peer again: wait to be caught up
    ("fenced", "caught_up"): ("open", "unfence"),
    ("rejoining", "quiet"): ("fenced", ""),
    ("rejoining", "expired"): ("lapsed", "lapse"),
    ("rejoining", "heard"): ("rejoining", ""),
    ("rejoining", "caught_up"): ("open", "unfence"),
    ("lapsed", "quiet"): ("lapsed", ""),
    ("lapsed", "expired"): ("lapsed", ""),
    ("lapsed", "heard"): ("rejoining", "fence"),  # survivors may hold custody: catch up
    ("lapsed", "caught_up"): ("open", ""),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Fence:
    """``state`` one of STATES; ``since_ms`` when the region became fenced (None unless
    fenced)."""

    state: str = "open"
    since_ms: int | None = None

    @property
    def fenced(self) -> bool:
        return self.state in ("fenced", "rejoining")


def fence_input(
    fence: Fence,
    now_ms: int,
    last_heard_ms: int,
    started_ms: int,
    lease_ms: int,
    hold_ms: int,
    caught_up: bool,
) -> str:
    """Classify the moment: ``quiet`` when no peer was heard directly for more than
    ``lease_ms`` (a peer never heard counts from ``started_ms``, as core.custody's
    suspicion does), ``expired`` when, besides, the fence has held for more than
    ``hold_ms``; else ``caught_up`` or ``heard``."""
    if now_ms - max(last_heard_ms, started_ms) > lease_ms:
        if fence.since_ms is not None and now_ms - fence.since_ms > hold_ms:
            return "expired"
        return "quiet"
    return "caught_up" if caught_up else "heard"


def step(fence: Fence, event: str, now_ms: int) -> tuple[Fence, str]:
    """The next fence and the action of the transition ("fence", "unfence", "lapse" or
    ""). Raises KeyError for a pair outside TABLE."""
    nxt, action = TABLE[(fence.state, event)]
    if nxt == fence.state:
        return fence, action
    if action == "fence":
        return Fence(nxt, now_ms), action
    return Fence(nxt, fence.since_ms if nxt in ("fenced", "rejoining") else None), action


def adopts(suspected: bool, heard_again_ms: int | None, now_ms: int, release_ms: int) -> bool:
    """Does an adopting region attempt an owner's deliveries now (its custody record
    hands them here)? While it suspects the owner, yes. Once the owner is heard again
    (``heard_again_ms``: since when, None if not yet noted) the adopter releases them, so
    the owner resumes through hand-back and never beside it; after ``release_ms``
    without a hand-back (the owner cannot catch up, e.g. a partial heal) it takes them
    up again."""
    if suspected:
        return True
    return heard_again_ms is not None and now_ms - heard_again_ms > release_ms
