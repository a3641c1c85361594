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
- PNCounter: its totals move to its retired entry ``~retired:<actor>`` (crdt RETIRED),
  which absorbs its plain entry in every merge (a join: a process or region that has not
  read the retirement yet merges its stale copy without counting it twice). Those
  entries are *compacted* into ``SINK``, one fixed actor no node writes as, once the
  actor has been pruned here for ``compact_hold`` (every process of the region has read
  the pruned rows by then): ``compact``. A full state that holds ``SINK`` and lacks an
  actor in every form (plain or retired) was compacted of it elsewhere (every region held
  its totals before anyone pruned it), so the stored state is compacted of it first; a
  state arriving with a retired entry this state compacted is compacted before the
  merge. Without the ``counter-retired-entries`` capability (a previous-release region or
  process) totals collapse into ``SINK`` at once, the previous release's form.
- ORSet: the context forgets the actor once no element present holds one of its dots
  (dots are element identities: tenants and endpoints created by a retired actor keep
  theirs while they exist). An arriving state is stripped of the dots of an actor whose
  dots the stored context forgot: each of them was removed here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from crdt import CRDT, RETIRED, LWWRegister, ORSet, PNCounter, VectorClock

__all__ = [
    "SINK",
    "acknowledged_everywhere",
    "actors_of",
    "compact_retired",
    "prune_arriving",
    "prune_stored",
    "retired_entries",
]

# The actor a retired actor's counter totals collapse into, in every region alike. ``~``
# is in no region name (core.registry_keys), so no node ever writes as it.
SINK = RETIRED + "0"

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


def prune_stored(state: CRDT, actors: Iterable[str], per_actor: bool = False) -> CRDT:
    """``state`` with ``actors`` (retired, settled) pruned, in sorted order; an ORSet
    keeps an actor while an element present holds one of its dots. A counter keeps each
    actor's totals under its retired entry (``per_actor``) or adds them to ``SINK``."""
    for actor in sorted(actors):
        if actor.startswith("~"):
            continue
        if per_actor and isinstance(state, PNCounter):
            state = state.retire(actor)
        else:
            state = state.prune(actor, SINK)  # type: ignore[attr-defined]
    return state


def compact_retired(state: CRDT, actors: Iterable[str]) -> CRDT:
    """A counter with the retired entries of ``actors`` added to ``SINK`` (value kept)."""
    if not isinstance(state, PNCounter):
        return state
    for actor in sorted(actors):
        if actor != SINK[len(RETIRED) :]:
            state = state.prune(RETIRED + actor, SINK)
    return state


def retired_entries(state: CRDT) -> set[str]:
    """The actors a counter holds a retired entry of (``SINK`` aside)."""
    if not isinstance(state, PNCounter):
        return set()
    return {a[len(RETIRED) :] for a in actors_of(state) if a.startswith(RETIRED) and a != SINK}


def prune_arriving(
    incoming: CRDT,
    stored: CRDT | None,
    pruned: Test,
    retired: Test,
    held: Test,
    per_actor: bool = False,
) -> tuple[CRDT, CRDT | None]:
    """``(incoming, stored)`` made ready to merge: ``incoming`` without the actors
    ``pruned`` here, and ``stored`` compacted of the actors a compacted full state no
    longer holds (None: keep ``stored`` as it is). An OR-Set is stripped only of the
    actors this replica ``held`` every dot of before it pruned them (a region that joined
    later gets their elements from the others' states)."""
    actors = actors_of(incoming)
    gone = sorted(a for a in actors if not a.startswith("~") and pruned(a))
    if isinstance(incoming, ORSet):
        ctx = stored.context if isinstance(stored, ORSet) else None
        for actor in gone:
            if held(actor) and (ctx is None or ctx.max(actor) == 0):  # forgot it here
                incoming = incoming.strip(actor)
        return incoming, None
    incoming = prune_stored(incoming, gone, per_actor)
    if not (isinstance(incoming, PNCounter) and isinstance(stored, PNCounter)):
        return incoming, None
    return _compacted_alike(incoming, stored, pruned, retired)


def _compacted_alike(
    incoming: PNCounter, stored: PNCounter, pruned: Test, retired: Test
) -> tuple[CRDT, CRDT | None]:
    """Two counters compacted alike before their merge: an actor one of them compacted
    (it holds ``SINK`` and lacks the actor in every form) is compacted in the other."""
    have, had = actors_of(incoming), actors_of(stored)

    def lacks(names: set[str], actor: str) -> bool:
        return actor not in names and RETIRED + actor not in names

    new: CRDT = stored
    if SINK in have:
        extra = [a for a in retired_entries(stored) if lacks(have, a)]
        plain = [a for a in had if not a.startswith("~") and lacks(have, a) and retired(a)]
        if plain:
            new = prune_stored(new, plain)  # the previous release's collapse
        if extra:
            new = compact_retired(new, extra)
    if SINK in had:
        folded = [a for a in retired_entries(incoming) if lacks(had, a) and pruned(a)]
        if folded:
            incoming = compact_retired(incoming, folded)  # type: ignore[assignment]
    return incoming, (None if new is stored else new)


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
