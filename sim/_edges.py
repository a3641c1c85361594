"""The "edge-records" nemesis: a rogue peer's records at the edge of every range.

``edge_records(rng, now_ms, max_drift_ms, round_)`` builds, from the seed's rng alone, a
batch of records from made-up origins (``edge<round>-<case>:1``, one origin per case, so
one case never holds back another) stamped at the limits of crdt's ranges: HLC
``(now + 1 s, LOGICAL_MAX)`` and ``(now, LOGICAL_MAX)`` (merged: the clamped HLC rule
carries into the next millisecond), ``(now + 1 s, LOGICAL_MAX - 1)`` (merged: the
next local stamp carries into the next millisecond), ``(WALL_MS_MAX, 0)`` and
``now + max_drift_ms + 1`` (merged and counted as ``clock_drift``: a stamp far ahead never
stops replication, the target's HLC is clamped), a seq of ``2**63 - 1`` (held back behind
its missing predecessors forever), bodies with a PN-counter at ``COUNTER_MAX``, ids of the
64-character limit, a 64 KiB string, and an id one character past the limit (malformed).
One more origin (``edge<round>-run:1``) sends a run of seven records with, in the middle,
a body that is not msgpack (seq 3, rejected) and one with a section this release does
not know (seq 5; rejected, or merged by a release that ignores it): the records after
them must merge at once (issue 41: a refused record never blocks its successors).

The nemesis hands the batch to one region's ``Replica.apply_records`` (the path a peer's
Batch takes); ``Injected`` keeps what came back so ``check_edges`` can tell that every
record was merged, rejected (returned and counted) or held, and that only merged ones
ever reached any region.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import msgpack

from crdt import COUNTER_MAX, LOGICAL_MAX, WALL_MS_MAX, LWWRegister, PNCounter, Timestamp
from regionsync.core.model import Record
from regionsync.core.records import encode_body

__all__ = ["Injected", "edge_records"]

HUGE_SEQ = 2**63 - 1  # SQLite INTEGER's maximum


@dataclass
class Injected:
    """One injection: the target region, the records, and the outcome per record
    (``(origin, seq)`` -> "merged" | "rejected" | "held"), the registry key each record
    writes (unique per record), the outcome some must have (``must``) and the target's
    ``records_rejected`` delta (``counted``)."""

    region: str
    at: float
    records: list[Record]
    keys: dict[tuple[str, int], str]
    must: dict[tuple[str, int], str]
    outcome: dict[tuple[str, int], str] = field(default_factory=dict)
    counted: int = 0


def _id(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))


def edge_records(
    rng: random.Random, now_ms: int, max_drift_ms: int, round_: int
) -> tuple[list[Record], dict[tuple[str, int], str], dict[tuple[str, int], str]]:
    """Records at the edges (see module docstring), the registry key each one writes and
    the outcome ("merged" | "rejected" | "held") of those whose outcome is certain.
    ``now_ms`` is the target region's wall clock (ms); deterministic in ``rng``."""
    cases: list[tuple[str, int, tuple[int, int], str, str]] = [
        # (case, seq, (wall_ms, logical), body kind, the outcome it must have or "")
        # merged: the target's HLC carries or is clamped (crdt/_hlc.py observe_parts)
        ("future-logical-max", 1, (now_ms + 1000, LOGICAL_MAX), "name", "merged"),
        ("now-logical-max", 1, (now_ms, LOGICAL_MAX), "name", "merged"),
        ("future-logical-near", 1, (now_ms + 1000, LOGICAL_MAX - 1), "counter", "merged"),
        ("wall-max", 1, (WALL_MS_MAX, 0), "name", "merged"),
        ("past-drift", 1, (now_ms + max_drift_ms + 1, 0), "counter", "merged"),
        ("huge-seq", HUGE_SEQ, (now_ms, 0), "name", "held"),
        ("counter-max", 1, (max(now_ms - 1, 0), 0), "counter", "merged"),
        ("long-string", 1, (now_ms, rng.randint(0, 1000)), "long", "merged"),
        ("id-too-long", 1, (now_ms, 0), "bad-id", "rejected"),
    ]
    rng.shuffle(cases)
    records: list[Record] = []
    keys: dict[tuple[str, int], str] = {}
    must: dict[tuple[str, int], str] = {}
    for case, seq, hlc, kind, outcome in cases:
        origin = f"edge{round_}-{case}:1"
        stamp = Timestamp(*hlc)
        tenant = _id(rng, 65 if kind == "bad-id" else 64)
        if kind == "counter":
            key = f"t/{tenant}/usage/events_published"
            crdt = PNCounter({origin: COUNTER_MAX}, {origin: rng.randint(0, COUNTER_MAX)})
        else:
            key = f"t/{tenant}/name"
            value = "x" * 65536 if kind == "long" else f"edge {case}"
            crdt = LWWRegister().set(value, actor=origin, stamp=stamp)
        body = encode_body(registry={key: crdt})
        records.append(Record(origin, seq, "registry", body, hlc))
        keys[(origin, seq)] = key
        if outcome:
            must[(origin, seq)] = outcome
    _run(rng, now_ms, round_, records, keys, must)
    return records, keys, must


def _run(
    rng: random.Random,
    now_ms: int,
    round_: int,
    records: list[Record],
    keys: dict[tuple[str, int], str],
    must: dict[tuple[str, int], str],
) -> None:
    """One origin's run of 7 name records: seq 3 undecodable, seq 5 with an unknown
    section; every other one must merge (none waits behind a refused one)."""
    origin = f"edge{round_}-run:1"
    for seq in range(1, 8):
        hlc = (now_ms - 8 + seq, 0)
        key = f"t/{_id(rng, 64)}/name"
        crdt = LWWRegister().set(f"run {seq}", actor=origin, stamp=Timestamp(*hlc))
        body = encode_body(registry={key: crdt})
        if seq == 3:
            body = b"\xc1" + body  # 0xc1: never used by msgpack
        elif seq == 5:
            sections = msgpack.unpackb(body, raw=False)
            sections["x-future"] = {"from": "a newer release"}
            body = msgpack.packb(sections, use_bin_type=True)
        records.append(Record(origin, seq, "registry", body, hlc))
        keys[(origin, seq)] = key
        if seq != 5:
            must[(origin, seq)] = "rejected" if seq == 3 else "merged"
