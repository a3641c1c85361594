"""Decides how replicated registry state merges: clocks, LWW register, OR-Set, PN-Counter.
Never does I/O, never reads time, never uses global randomness: callers pass stamps and actors.
Rules: Shapiro et al. 2011 (CRDTs), Almeida et al. 2018 (delta CRDTs), Kulkarni et al. 2014 (HLC).

Every CRDT here is immutable; mutators return a delta of the same type, `merge` is the
join, and `to_bytes`/`from_bytes`/`decode` give a canonical `[TAG, VERSION, body]` msgpack
encoding in which equal states are equal bytes.

Value ranges are decided once, in `crdt._codec`, and match the wire and the store:
counters (clock entries, dots, PN-Counter totals, replication sequence numbers) in
[0, COUNTER_MAX = 2**63-1], HLC wall_ms in [0, WALL_MS_MAX = 2**63-1], HLC logical in
[0, LOGICAL_MAX = 2**32-1]. Inputs are checked when they enter: ValueError/TypeError for
bad shapes or ranges, InvalidTextError (a ValueError) for a str that has no UTF-8 form.
A law the kernel itself breaks (a stamp not after the last, a reused dot) raises
InvariantViolation (an AssertionError), always: see `crdt._invariants`.
"""

from crdt._clock import CausalContext, Dot, VectorClock
from crdt._codec import (
    COUNTER_MAX,
    CRDT,
    LOGICAL_MAX,
    WALL_MS_MAX,
    DecodeError,
    InvalidTextError,
    decode,
)
from crdt._hlc import HLC, ClockDriftError, Timestamp
from crdt._invariants import InvariantViolation
from crdt._lww import LWWRegister
from crdt._orset import ORSet
from crdt._pncounter import RETIRED, PNCounter
from crdt._prune import prune, prune_all

__all__ = [
    "COUNTER_MAX",
    "CRDT",
    "LOGICAL_MAX",
    "RETIRED",
    "WALL_MS_MAX",
    "HLC",
    "CausalContext",
    "ClockDriftError",
    "DecodeError",
    "InvalidTextError",
    "InvariantViolation",
    "Dot",
    "LWWRegister",
    "ORSet",
    "PNCounter",
    "Timestamp",
    "VectorClock",
    "decode",
    "prune",
    "prune_all",
]
