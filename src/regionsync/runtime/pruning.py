"""Pruning retired actors from this node's stored state (core/pruning.py decides how).

``prune`` runs every beat of the retirement task (runtime/removal.py): the actors in this
node's version vector that a removal record or a stopped-process marker retires, once
every remaining region holds the version vector this node had when it first knew them
retired, leave every stored registry state (one group commit, the normal write path)
and then the version vector, the log and the log floor (``Store.forget_origins``).
``apply`` is the registry's merge for everything that arrives (records, anti-entropy,
another process's changes): it strips the pruned actors first. A restart keeps it: a
retired actor absent from the stored version vector is pruned.

Gate: nothing is pruned until ``Removals.enabled`` (every region reads removal records,
core/capabilities.py), so a previous-release peer never meets a pruned state.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from crdt import CRDT, RETIRED, ORSet

from ..core.model import WriteBatch
from ..core.pruning import (
    acknowledged_everywhere,
    actors_of,
    compact_retired,
    prune_arriving,
    prune_stored,
    retired_entries,
)
from ..core.registry import Registry
from .ports import Store
from .removal import Removals
from .replica import Replica
from .slicing import Slicer
from .state import Catalog
from .writepath import WritePath

__all__ = ["Pruner"]

log = logging.getLogger("regionsync.removal")

# registry keys of removal records and stopped-process markers (core/registry_keys.py)
_MARKER_PREFIXES = ("x/", "p/")

# The capability under which a pruned actor's counter totals keep its name (core/pruning.py)
PER_ACTOR = "counter-retired-entries"


class Pruner:
    """Prunes retired actors from the stored state and from what arrives."""

    def __init__(
        self, catalog: Catalog, writer: WritePath, store: Store, removals: Removals,
        replica: Replica,
    ):  # fmt: skip
        self.catalog, self.writer, self.store = catalog, writer, store
        self.removals, self.replica = removals, replica
        self._snap: dict[str, dict[str, int]] = {}  # actor -> our vv when first retired
        self._since: dict[str, float] = {}  # actor -> monotonic s when first retired here
        # held at least this long after first read: this region's other processes
        # (PostgreSQL) read the marker from the shared database meanwhile
        self.hold_s = writer.settings.replication.heartbeat_s
        self._pruning: set[str] = set()  # being pruned (still in the version vector)
        # pruned by this process, which held all of their records (an OR-Set arriving
        # with their dots is stripped of them: core/pruning.py); see ``held``
        self._held: set[str] = set()
        self.born_ms = 0  # when the store started empty (StoreInfo.born_ms; set at start)
        self.pruned_actors = 0  # actors pruned by this node (``/v1/cluster``)
        # actor -> monotonic s when its retired counter entries are compacted into SINK
        self._compact_at: dict[str, float] | None = None  # None: not read from the store yet
        self.compact_s = writer.settings.replication.retired_compact_s
        catalog.merge_hook = self.apply
        replica.pruned = self.pruned
        if hasattr(store, "join_states"):  # a store merging with its rows (PostgreSQL)
            store.join_states = self.join

    def pruned(self, actor: str) -> bool:
        """True if ``actor`` is pruned here: its records and entries are dropped."""
        if actor in self._pruning:
            return True
        return actor not in self.writer.version_vector and self.removals.is_retired(actor)

    def held(self, actor: str) -> bool:
        """True if this region's store held every record of ``actor`` (retired) before it
        was pruned: this process pruned it, or the actor started after the store did
        (its incarnation is its start's wall ms): every region configured while it wrote
        holds all its records before anyone prunes it. The same in every process of the
        region and after a restart (the store's ``born`` row); a store that joined
        later does not strip an older actor's dots (it gets them from the others)."""
        if actor in self._held:
            return True
        inc = actor.rpartition(":")[2]
        return inc.isdigit() and int(inc) >= self.born_ms

    def per_actor(self) -> bool:
        """True if the cluster reads counters' retired entries (else the older form)."""
        return self.writer.capabilities.enabled(PER_ACTOR)

    def apply(self, registry: Registry, deltas: Mapping[str, CRDT]) -> dict[str, CRDT]:
        """``registry.apply(deltas)`` with the pruned actors stripped first, and an
        OR-Set pruned once its last element holding a pruned actor's dot is gone.
        Removal records and process markers among ``deltas`` are merged first, so what
        they retire is known to the states beside them (a registry reloaded whole from
        the store: a counter compacted of an actor this node has not yet seen retired)."""
        markers = {k: d for k, d in deltas.items() if k.startswith(_MARKER_PREFIXES)}
        if markers and len(markers) < len(deltas):
            changed = self.apply(registry, markers)
            rest = {k: d for k, d in deltas.items() if k not in markers}
            return {**changed, **self.apply(registry, rest)}
        if not self.removals.any_retired():
            return registry.apply(deltas)
        prepared: dict[str, CRDT] = {}
        replaced: dict[str, CRDT] = {}
        per_actor = self.per_actor()
        for key, delta in deltas.items():
            incoming, stored = prune_arriving(
                delta,
                registry.state(key),
                self.pruned,
                self.removals.is_retired,
                self.held,
                per_actor,
            )
            if stored is not None:
                replaced[key] = stored
            prepared[key] = incoming
        registry.replace(replaced)
        changed = registry.apply(prepared)
        for key in replaced:
            changed.setdefault(key, replaced[key])
        for key, state in list(changed.items()):
            if isinstance(state, ORSet):
                gone = [a for a in actors_of(state) if self.pruned(a)]
                new = prune_stored(state, gone) if gone else state
                if new is not state and new != state:
                    registry.replace({key: new})
                    changed[key] = new
        return changed

    def join(self, row: CRDT, new: CRDT) -> CRDT:
        """A stored row (another process may have written it) joined with this node's
        ``new`` state: the row is what arrives (PostgreSQL's ``merge_registry``)."""
        if not self.removals.any_retired():
            return row.merge(new)
        incoming, stored = prune_arriving(
            row, new, self.pruned, self.removals.is_retired, self.held,
            self.per_actor(),
        )  # fmt: skip
        merged = (new if stored is None else stored).merge(incoming)
        if isinstance(merged, ORSet):
            gone = [a for a in actors_of(merged) if self.pruned(a)]
            merged = prune_stored(merged, gone) if gone else merged
        return merged

    async def prune(self) -> int:
        """Prune the retired actors every remaining region has acknowledged; returns how
        many actors left the version vector."""
        removals, writer = self.removals, self.writer
        if not removals.enabled():
            return 0
        vv = writer.version_vector
        # retired by a replicated marker (not only by this node's own decision): the
        # snapshot below then holds the marker
        retired = [a for a in vv if a != writer.actor and removals.marked(a)]
        for a in list(self._snap):
            if a not in vv:
                del self._snap[a]
                self._since.pop(a, None)
        now = writer.clock.monotonic()
        await self._compact(now)
        if not retired:
            return 0
        for a in retired:
            if a not in self._snap:
                self._snap[a], self._since[a] = dict(vv), now
        seen = removals.remaining_seen()
        ready = sorted(
            a
            for a in retired
            if now - self._since[a] >= self.hold_s
            and acknowledged_everywhere(self._snap[a], seen, removals.is_retired)
        )
        if not ready:
            return 0
        per_actor = self.per_actor()
        await self._prune_states(ready, per_actor)
        if per_actor and self._compact_at is not None:
            self._compact_at.update(dict.fromkeys(ready, now + self.compact_s))
        async with writer.lock:
            for a in ready:
                writer.version_vector.pop(a, None)
                writer.durable_vv.pop(a, None)
                self.replica.log_floor.pop(a, None)
                self.replica.held.pop(a, None)
                self._snap.pop(a, None)
                self._since.pop(a, None)
            self._pruning.difference_update(ready)
        await self.store.forget_origins(ready)
        removals.forget(ready)
        self.pruned_actors += len(ready)
        log.info("pruned the retired actors %s from the stored state", ", ".join(ready))
        return len(ready)

    async def _prune_states(self, ready: list[str], per_actor: bool) -> None:
        """Prune ``ready`` from every stored registry state, in one durable commit."""
        gone = set(ready)
        async with self.writer.lock:
            self._pruning.update(ready)
            self._held.update(ready)

            def one(state: CRDT) -> CRDT:
                actors = actors_of(state) & gone
                return prune_stored(state, actors, per_actor) if actors else state

            durable = await self._rewrite([a.encode() for a in gone], one)
        if durable is not None:
            await durable

    async def _compact(self, now: float) -> None:
        """Compact the retired counter entries of actors pruned ``compact_s`` ago (all of
        them at once without the capability: a previous-release peer reads ``SINK``)."""
        if self._compact_at is None:  # after a start: what the stored states still hold
            found: set[str] = set()
            registry, slicer = self.catalog.registry, Slicer()
            for n, key in enumerate(registry.keys()):
                if not n & 1023:
                    await slicer.tick()
                raw = registry.state_bytes(key)
                if raw is not None and RETIRED.encode() in raw:
                    found |= retired_entries(registry.state(key))  # type: ignore[arg-type]
            self._compact_at = dict.fromkeys(found, now + self.compact_s)
        late = not self.per_actor()
        due = {a for a, t in self._compact_at.items() if (late or t <= now) and self.pruned(a)}
        if not due:
            return
        async with self.writer.lock:

            def one(state: CRDT) -> CRDT:
                return compact_retired(state, retired_entries(state) & due)

            durable = await self._rewrite([(RETIRED + a).encode() for a in due], one)
        if durable is not None:
            await durable
        for a in due:
            del self._compact_at[a]
        log.info("compacted the retired counter entries of %s", ", ".join(sorted(due)))

    async def _rewrite(
        self, needles: list[bytes], one: Callable[[CRDT], CRDT]
    ) -> Awaitable[object] | None:
        """Every stored state whose bytes hold one of ``needles`` (an actor is a msgpack
        string, so its UTF-8 is in the bytes) passed through ``one``, in slices (issue 42),
        submitted as one batch; the caller holds the write lock and awaits the result
        (None: nothing changed) once it let go of it."""
        registry = self.catalog.registry
        changed: dict[str, CRDT] = {}
        slicer = Slicer()
        for n, key in enumerate(registry.keys()):
            if not n & 1023:
                await slicer.tick()
            raw = registry.state_bytes(key)
            if raw is None or not any(a in raw for a in needles):
                continue
            state = registry.state(key)
            if state is not None and (new := one(state)) != state:
                changed[key] = new
        registry.replace(changed)
        batch = WriteBatch(registry={k: v.to_bytes() for k, v in changed.items()})
        return self.writer.submit(batch) if changed else None
