"""Removing a region for good: its removal record, who may no longer replicate, and which
actors' clock entries every remaining region has acknowledged, so they can be pruned.

Never reads time or does I/O (callers pass ``now_ms`` and the version vectors). Rules:
Akka Distributed Data's pruning, adapted: a removal is a replicated LWW record
(``x/<region>``, core.registry_keys); once every remaining configured region has
acknowledged it and every record of the removed region's actors this node holds (their
acked version vectors cover both), those actors are *retired*: their entries leave the
version vectors this node sends (Hello, Ack) and the CRDT states it stores
(crdt.prune_all), and their later records are dropped. A Hello from the removed region at
the removed incarnation or an older one, or carrying old state, is refused: the region
comes back only wiped (a new incarnation from an empty store) and re-added in every
``[[peers]]`` list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "REGION_REMOVAL",
    "RemovalRecord",
    "hello_refusal",
    "incarnations",
    "prune_vv",
    "retired_actors",
]

# The capability (issue 40, core/capabilities.py at merge) that lets a node write removal
# records (registry key ``x/<region>``, which the previous release refuses) and leave
# retired actors out of the version vectors it sends. One gate: runtime/removal.py
# ``Removals.enabled``.
REGION_REMOVAL = "region-removal"

# A peer's acked entry for a retired actor, as the pushing side fills it in: every
# remaining region has acknowledged all of that actor's records.
RETIRED_SEQ = 1 << 62


def removed_by(keys: Iterable[str]) -> set[str]:
    """The regions whose removal records (``x/<region>``) are among registry ``keys``."""
    return {k[2:] for k in keys if k.startswith("x/")}


def region_of(actor: str) -> str:
    """``region`` of the actor ``region:incarnation``."""
    return actor.rpartition(":")[0]


def incarnations(vv: Mapping[str, int], region: str) -> list[int]:
    """The incarnations of ``region`` that have an entry in ``vv``."""
    out = []
    for actor, n in vv.items():
        r, _, inc = actor.rpartition(":")
        if r == region and n and inc.isdigit():
            out.append(int(inc))
    return sorted(out)


@dataclass(frozen=True, slots=True)
class RemovalRecord:
    """``region`` removed for good at ``incarnation`` (its highest seen then), decided at
    ``at_ms`` by region ``by`` whose actor ``by_actor`` wrote it after its record
    ``by_seq`` (so a peer has the removal once its acked ``by_actor`` passes ``by_seq``)."""

    region: str
    incarnation: int
    at_ms: int
    by: str
    by_actor: str
    by_seq: int
    # the actors some region retired (Akka's PruningPerformed): retired for good everywhere
    retired: tuple[str, ...] = ()

    def to_value(self) -> dict[str, Any]:
        value = {"incarnation": self.incarnation, "at": self.at_ms, "by": self.by,
                 "by_actor": self.by_actor, "by_seq": self.by_seq}  # fmt: skip
        if self.retired:
            value["retired"] = list(self.retired)
        return value

    @classmethod
    def from_value(cls, region: str, value: Any) -> RemovalRecord | None:
        """Parse a register value; None for anything that is not a removal record."""
        if not isinstance(value, dict):
            return None
        fields = [value.get(k) for k in ("incarnation", "at", "by_seq")]
        if not all(type(f) is int and f >= 0 for f in fields):
            return None
        by, by_actor = value.get("by"), value.get("by_actor")
        if not (isinstance(by, str) and isinstance(by_actor, str)):
            return None
        retired = value.get("retired", [])
        if not (isinstance(retired, list) and all(isinstance(a, str) for a in retired)):
            return None
        ours = tuple(sorted({a for a in retired if region_of(a) == region}))
        return cls(region, fields[0], fields[1], by, by_actor, fields[2], ours)


def hello_refusal(
    removed: Mapping[str, RemovalRecord],
    region: str,
    incarnation: int,
    vv: Mapping[str, int],
    admitted: bool = False,
) -> str | None:
    """Why a Hello from ``region`` (at ``incarnation``, with version vector ``vv``) is
    refused, or None. Refused: a removed region at its removed incarnation or an older
    one, or a newer incarnation that holds records of any actor but its own (old state)
    unless it was ``admitted`` (its first Hello was clean: wiped, then bootstrapped)."""
    rec = removed.get(region)
    if rec is None:
        return None
    wipe = "wipe its store and start it as a new incarnation, then re-add it to [[peers]]"
    if incarnation <= rec.incarnation:
        return (
            f"region {region} was removed at incarnation {rec.incarnation} "
            f"(by {rec.by}); its incarnation {incarnation} holds old state: {wipe}"
        )
    own = f"{region}:{incarnation}"
    if admitted:
        return None
    old = sorted(a for a, n in vv.items() if n and a != own)
    if old:
        return (
            f"region {region} was removed (by {rec.by}); its new incarnation "
            f"{incarnation} holds records of {', '.join(old[:3])}: {wipe}"
        )
    return None


def acknowledged(rec: RemovalRecord, acked: Mapping[str, int]) -> bool:
    """True if a peer whose acked version vector is ``acked`` has the removal record."""
    return acked.get(rec.by_actor, 0) > rec.by_seq or acked.get(rec.by_actor, 0) >= RETIRED_SEQ


def retired_actors(
    local_vv: Mapping[str, int],
    retired_before: Iterable[str],
    removed: Mapping[str, RemovalRecord],
    remaining_acked: Mapping[str, Mapping[str, int] | None],
) -> frozenset[str]:
    """The actors to retire: those already retired (``retired_before``: retirement is
    for good), plus each actor of a removed region (at or below its removed incarnation)
    with an entry in ``local_vv`` once every remaining region (``remaining_acked``:
    region -> the highest version vector it ever acknowledged, None if never heard)
    acknowledged the removal (the region that wrote it has it) and every record of that
    actor this node holds."""
    out = set(retired_before)
    if any(a is None for a in remaining_acked.values()):
        return frozenset(out)
    for actor, n in local_vv.items():
        rec = removed.get(region_of(actor))
        if rec is None or actor in out:
            continue
        inc = actor.rpartition(":")[2]
        if not inc.isdigit() or int(inc) > rec.incarnation:
            continue
        if all(
            (peer == rec.by or acknowledged(rec, acked)) and acked.get(actor, 0) == n
            for peer, acked in remaining_acked.items()
            if acked is not None
        ):  # every region holds exactly the records of it this one holds
            out.add(actor)
    return frozenset(out)


def prune_vv(vv: Mapping[str, int], retired: frozenset[str]) -> dict[str, int]:
    """``vv`` without the retired actors' entries (what Hello and Ack carry)."""
    return {a: n for a, n in vv.items() if a not in retired}


def fill_retired(vv: Mapping[str, int], retired: frozenset[str]) -> dict[str, int]:
    """A peer's version vector with every retired actor covered (what the pushing side
    assumes: every remaining region acknowledged all of their records)."""
    return {**vv, **dict.fromkeys(retired, RETIRED_SEQ)}


def removal_problem(
    name: str, own_region: str, known: Iterable[str], removed: Mapping[str, RemovalRecord]
) -> tuple[int, str, str] | None:
    """(status, code, detail) if ``name`` cannot be removed now, else None."""
    if name == own_region:
        return 409, "conflict", f"{name} is this node's own region: remove it from another"
    if name in removed:
        return 409, "conflict", f"region {name} is already removed"
    if name not in set(known):
        return 404, "not_found", f"no region {name} is known (not a peer, not in any clock)"
    return None


# -- stopped processes of a region on PostgreSQL (each start is a new actor) -----------------


def stopped_actors(
    region: str,
    own_actor: str,
    local_vv: Mapping[str, int],
    holders: Mapping[int, str],
    live: frozenset[str],
    absent_since: dict[str, int],
    now_ms: int,
    grace_ms: int,
) -> set[str]:
    """The actors of ``region``'s processes (``holders``: incarnation -> process name)
    whose process has not been connected (``live``) for ``grace_ms``; ``absent_since``
    (actor -> first ms seen absent) is kept up to date in place. Never ``own_actor``."""
    out: set[str] = set()
    for incarnation, holder in holders.items():
        actor = f"{region}:{incarnation}"
        if actor == own_actor or holder in live or not local_vv.get(actor, 0):
            absent_since.pop(actor, None)
            continue
        since = absent_since.setdefault(actor, now_ms)
        if now_ms - since >= grace_ms:
            out.add(actor)
    return out


def settled_counts(
    actors: Iterable[str],
    local_vv: Mapping[str, int],
    peers_seen: Mapping[str, Mapping[str, int] | None],
) -> dict[str, int]:
    """actor -> its record count, for the ``actors`` every peer holds exactly as many
    records of as this node (``peers_seen``: the highest vector each sent; None: never
    heard, which holds every actor back)."""
    if any(seen is None for seen in peers_seen.values()):
        return {}
    return {
        a: local_vv[a]
        for a in sorted(actors)
        if all(seen.get(a, 0) == local_vv[a] for seen in peers_seen.values() if seen is not None)
    }


def parse_process_marker(value: Any) -> dict[str, int]:
    """The ``p/<region>`` register value ``{"retired": [[actor, count], ...]}`` as a
    dict; {} for anything else."""
    if not isinstance(value, dict) or not isinstance(value.get("retired"), list):
        return {}
    out: dict[str, int] = {}
    for item in value["retired"]:
        if (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                and type(item[1]) is int and item[1] >= 0):  # fmt: skip
            out[item[0]] = item[1]
    return out


@dataclass(frozen=True, slots=True)
class ProcessMarker:
    """A region's ``p/<region>`` marker: ``retired`` (actor -> the record count every
    region held), and a compacted part: every incarnation of the region at or below
    ``floor`` but those in ``keep`` (processes not retired) is retired and was pruned
    (``compact``). ``floor`` and ``keep`` are added fields: a reader without them sees
    fewer retired actors, never a wrong one."""

    retired: dict[str, int]
    floor: int = 0
    keep: frozenset[int] = frozenset()

    def covers(self, region: str, actor: str) -> bool:
        """True if ``actor`` (``region:incarnation``) is retired by this marker."""
        if actor in self.retired:
            return True
        r, _, inc = actor.rpartition(":")
        if r != region or not inc.isdigit():
            return False
        return int(inc) <= self.floor and int(inc) not in self.keep

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {"retired": [[a, self.retired[a]] for a in sorted(self.retired)]}
        if self.floor:
            value["floor"], value["keep"] = self.floor, sorted(self.keep)
        return value

    @classmethod
    def from_value(cls, value: Any) -> ProcessMarker:
        """Parse a register value (a malformed compacted part is ignored)."""
        retired = parse_process_marker(value)
        floor = value.get("floor", 0) if isinstance(value, dict) else 0
        keep = value.get("keep", []) if isinstance(value, dict) else []
        if type(floor) is not int or floor < 0 or not isinstance(keep, list):
            return cls(retired)
        if not all(type(i) is int and i >= 0 for i in keep):
            return cls(retired)
        return cls(retired, floor, frozenset(keep) if floor else frozenset())


def compact(
    marker: ProcessMarker, region: str, pruned: Callable[[str], bool], alive: Iterable[int]
) -> ProcessMarker:
    """``marker`` with the entries of the actors pruned here folded into its floor, so it
    stays as large as the processes not yet pruned (``alive``: the incarnations of the
    region's processes that are not retired: kept below the floor)."""
    folded = [a for a in marker.retired if pruned(a) and a.rpartition(":")[2].isdigit()]
    if not folded:
        return marker
    floor = max(marker.floor, *(int(a.rpartition(":")[2]) for a in folded))
    rest = {a: n for a, n in marker.retired.items() if a not in folded}
    below = {int(a.rpartition(":")[2]) for a in rest if a.rpartition(":")[0] == region
             if a.rpartition(":")[2].isdigit()}  # fmt: skip
    keep = {i for i in {*marker.keep, *alive} if i <= floor} - below
    keep -= {int(a.rpartition(":")[2]) for a in folded}
    return ProcessMarker(rest, floor, frozenset(keep))
