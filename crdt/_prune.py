"""Decides how a retired actor's entries collapse into a live one, the same on every replica.
Never decides WHEN: the caller prunes only once the actor is retired and settled.
Rules: Akka Distributed Data pruning (PruningInitialized -> PruningPerformed, then every
later state of the removed node is pruned before it is merged); Shapiro et al. 2011.

Retired: the actor writes nothing more (a removed region, a stopped process's incarnation;
the node refuses its later records). Settled: every state the caller merges holds all of
the actor's contributions (in the node: every remaining region acknowledged them). Under
those two conditions each type's `prune(removed, into)` is

- deterministic: a function of the state alone, so replicas need no owner to agree;
- a join homomorphism: prune(a).merge(prune(b)) == prune(a.merge(b)), so a replica that
  has pruned stays convergent with one that has not, provided it prunes what it receives
  before merging it (Akka's pruning cleanup);
- idempotent, and value-preserving (counter total, set members, register value).

Per type: VectorClock drops the entry; PNCounter adds the actor's totals to `into`'s
(or to `into`'s retired entry; `PNCounter.retire` instead keeps them under the actor's
own retired entry, a join homomorphism with no precondition);
ORSet drops the actor's dots from its context except those still supporting an element
(dots are element identities); LWWRegister drops the entry from every write's clock
(collapsing to its winner when that entry was all that kept two writes concurrent).
"""

from __future__ import annotations

from typing import TypeVar

from crdt._clock import VectorClock
from crdt._lww import LWWRegister
from crdt._orset import ORSet
from crdt._pncounter import PNCounter

__all__ = ["prune", "prune_all"]

State = TypeVar("State", VectorClock, PNCounter, ORSet, LWWRegister)


def prune(state: State, removed: str, into: str) -> State:
    """Return `state` with `removed` collapsed into `into`. TypeError for other types."""
    if not isinstance(state, VectorClock | PNCounter | ORSet | LWWRegister):
        raise TypeError(f"cannot prune {type(state).__name__}")
    return state.prune(removed, into)


def prune_all(state: State, retired: dict[str, str]) -> State:
    """Prune every `removed -> into` pair of `retired`, in sorted order of `removed`."""
    for removed in sorted(retired):
        state = prune(state, removed, retired[removed])
    return state
