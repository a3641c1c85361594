"""Decides how replicated registry state merges: clocks, LWW register, OR-Set, PN-Counter.
Never does I/O, never reads time, never uses global randomness: callers pass stamps and actors.
Rules: Shapiro et al. 2011 (CRDTs), Almeida et al. 2018 (delta CRDTs), Kulkarni et al. 2014 (HLC).

Every CRDT here is immutable; mutators return a delta of the same type, `merge` is the
join, and `to_bytes`/`from_bytes`/`decode` give a canonical `[TAG, VERSION, body]` msgpack
encoding in which equal states are equal bytes.
"""

from crdt._clock import CausalContext, Dot, VectorClock
from crdt._codec import CRDT, DecodeError, decode
from crdt._hlc import HLC, ClockDriftError, Timestamp
from crdt._lww import LWWRegister
from crdt._orset import ORSet
from crdt._pncounter import PNCounter

__all__ = [
    "CRDT",
    "HLC",
    "CausalContext",
    "ClockDriftError",
    "DecodeError",
    "Dot",
    "LWWRegister",
    "ORSet",
    "PNCounter",
    "Timestamp",
    "VectorClock",
    "decode",
]
