"""Pruning retired actors from stored registry states, from the version vector, and from
what arrives afterwards (issue 40). Pure: callers pass the states and the tests.

Rules: Akka Distributed Data's pruning (a removed node's entries collapse once every node
has seen the removal; a state that still carries them is pruned before it is merged),
over the kernel's per-type operations (crdt/_prune.py, whose laws hold for retired and
settled actors). An actor is *retired* when a removal record (``x/<region>``) or a
stopped-process marker (``p/<region>``) lists it: every remaining region held all of its
records then, and it writes nothing more. This node *prunes* it once every remaining
region has acknowledged a version vector that holds the marker (so every region knows it
is retired before any pruned state reaches it); from then on it is *pruned* here: absent
from the version vector, and stripped from every state that arrives.

Per type, stored and arriving:
- LWWRegister: the actor's entry leaves every write's clock (a join homomorphism).
- PNCounter: its totals collapse into ``SINK``, one fixed actor no node writes as, so a
  live writer's later deltas never carry a collapsed total (a collapse into a live writer
  would count twice at a region that merges that writer's next delta before pruning). A
  full state that holds ``SINK`` and lacks a retired actor the stored state still holds
  was pruned of it elsewhere (every region held its totals): the stored state is pruned
  of it first, so it is never counted twice.
- ORSet: the context forgets the actor once no element present holds one of its dots
  (dots are element identities: tenants and endpoints created by a retired actor keep
  theirs while they exist). An arriving state is stripped of the dots of an actor whose
  dots the stored context forgot: each of them was removed here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from crdt import CRDT, LWWRegister, ORSet, PNCounter, VectorClock

__all__ = ["SINK", "acknowledged_everywhere", "actors_of", "prune_arriving", "prune_stored"]

# The actor a retired actor's counter totals collapse into, in every region alike. ``~``
# is in no region name (core.registry_keys), so no node ever writes as it.
SINK = "~retired:0"

Test = Callable[[str], bool]


def actors_of(state: CRDT) -> set[str]:
    """Every actor with an entry in ``state`` (clocks, totals, a context's dots)."""
    if isinstance(state, LWWRegister):
        return set(state.clock)
    if isinstance(state, PNCounter):
        return set(state.p) | set(state.n)
    if isinstance(state, ORSet):
        ctx = state.context
        return set(ctx.vector) | {a for a, _ in ctx.cloud}
    if isinstance(state, VectorClock):
        return set(state)
    return set()


def prune_stored(state: CRDT, actors: Iterable[str]) -> CRDT:
    """``state`` with ``actors`` (retired, settled) pruned, in sorted order; an ORSet
    keeps an actor while an element present holds one of its dots."""
    for actor in sorted(actors):
        if actor != SINK:
            state = state.prune(actor, SINK)  # type: ignore[attr-defined]
    return state


def prune_arriving(
    incoming: CRDT, stored: CRDT | None, pruned: Test, retired: Test, held: Test
) -> tuple[CRDT, CRDT | None]:
    """``(incoming, stored)`` made ready to merge: ``incoming`` without the actors
    ``pruned`` here, and ``stored`` pruned of the retired actors a pruned full state no
    longer holds (None: keep ``stored`` as it is). An OR-Set is stripped only of the
    actors this replica ``held`` every dot of before it pruned them (a region that joined
    later gets their elements from the others' states)."""
    actors = actors_of(incoming)
    gone = sorted(a for a in actors if a != SINK and pruned(a))
    if isinstance(incoming, ORSet):
        ctx = stored.context if isinstance(stored, ORSet) else None
        for actor in gone:
            if held(actor) and (ctx is None or ctx.max(actor) == 0):  # forgot it here
                incoming = incoming.strip(actor)
        return incoming, None
    incoming = prune_stored(incoming, gone)
    if isinstance(incoming, PNCounter) and isinstance(stored, PNCounter) and SINK in actors:
        extra = [a for a in actors_of(stored) - actors if a != SINK and retired(a)]
        if extra:
            return incoming, prune_stored(stored, extra)
    return incoming, None


def acknowledged_everywhere(
    snapshot: Mapping[str, int],
    seen: Mapping[str, Mapping[str, int] | None],
    retired: Test,
) -> bool:
    """True if every remaining peer (``seen``: the highest version vector it sent, None
    if never heard) holds ``snapshot`` (this node's version vector when it first knew an
    actor retired, so it holds the marker). Retired actors are left out of what peers
    send, so they are not compared, nor are a peer's own region's actors: it wrote their
    records (a peer that writes nothing sends no Ack, so its Hello's vector is old)."""
    for peer, vv in seen.items():
        if vv is None:
            return False
        for a, n in snapshot.items():
            if n > vv.get(a, 0) and not retired(a) and a.rpartition(":")[0] != peer:
                return False
    return True
