"""Anti-entropy state: the hash tree over this node's state (kept up to date by every
group commit, issue 17), the items that carry the state of differing buckets, and
merging such items from a peer.

Builds what a repair pass compares and sends (the pass itself runs in
runtime/replication.py); merges through the replica, so state items follow the same
rules as records. Never touches the log or its truncation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace

from ..config import Settings
from ..core.hashtree import HEX, StateTree
from ..core.model import Delivery, Event, WriteBatch
from ..core.records import Decoded, decode_body, encode_body
from ..core.registry import key_type
from . import heap
from .ports import Store
from .replica import Replica
from .slicing import Slicer
from .state import Catalog, DeliveryQueue, IdempotencyKeys
from .writepath import WritePath

__all__ = ["AntiEntropy"]

log = logging.getLogger("regionsync.node")

# items read from the store at once while a tree is built: pages of 10,000 held requests
# 50-400 ms during a build over 1M keys (bench/README.md, restart.py)
_PAGE = 1_000
# registry keys applied to a tree being built between two checks of the loop's time
# (under 1 ms; ``Slicer`` yields once a slice has taken 10 ms)
_REGISTRY_PAGE = 128
# registry keys of a state item merged at once (``apply_state``)
_MERGE_KEYS = 32
# a committed batch of more items goes into the tree in slices (``_on_commit``)
_SYNC_ITEMS = 2_000


async def _pause(loop: asyncio.AbstractEventLoop, started: float) -> float:
    """Between two pages of a tree build: a pause as long as the page took since
    ``started`` (loop time, seconds), so that a build takes at most half of the loop and
    requests and commits run between its pages (none on a virtual loop, where a page takes
    no time). Returns when the next page starts."""
    await asyncio.sleep(loop.time() - started)
    return loop.time()


def _delivery_change(d: Delivery) -> tuple[str, bytes, bool]:
    """A delivery's tree item: its canonical bytes, local until final (``StateTree``)."""
    return "d/" + d.id, encode_body(delivery=d), not d.status.final


def _parts(dec: Decoded) -> Iterator[Decoded]:
    """``dec`` in parts of at most ``_MERGE_KEYS`` registry keys (the first carries the
    rest of it): merging 256 keys with their index updates took 30 ms and more."""
    keys = list(dec.registry)
    if len(keys) <= _MERGE_KEYS:
        yield dec
        return
    reg = dec.registry
    yield replace(dec, registry={k: reg[k] for k in keys[:_MERGE_KEYS]})
    for i in range(_MERGE_KEYS, len(keys), _MERGE_KEYS):
        yield Decoded(registry={k: reg[k] for k in keys[i : i + _MERGE_KEYS]})


class AntiEntropy:
    """State tree, items and state merges of one node. ``counters``: the node's shared
    counter table (``state_rejected``, ``anti_entropy_items``)."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        writer: WritePath,
        replica: Replica,
        idempotency: IdempotencyKeys,
        queue: DeliveryQueue,
        counters: dict[str, int],
        *,
        store: Store,
    ):
        self.settings, self.catalog, self.writer, self.replica = settings, catalog, writer, replica
        self.idempotency, self.queue, self.counters, self.store = (
            idempotency,
            queue,
            counters,
            store,
        )
        self.tree: StateTree | None = None  # built on first use, then kept current
        self._pending: list[list[WriteBatch]] = []  # per build running: commits since
        self._building = asyncio.Lock()
        self._empty: dict[type, bytes] = {}  # CRDT class -> bytes of its empty state
        self.builds = 0  # trees built from the store (bench, tests)
        self._drops = 0  # drop_tree calls: a tree built across one is not kept
        self._behind: list[WriteBatch] = []  # committed, not yet in the tree (_catch_up)
        self._catching_up: asyncio.Task[None] | None = None
        self._caught_up = asyncio.Event()
        # event retention's judgement of a peer's item (runtime/retention.py): True for one
        # it deleted here, which a repair pass must not merge back
        self.expired: Callable[[Event | Delivery], bool] = lambda _item: False
        writer.commit_observers.append(self._on_commit)

    @property
    def building(self) -> asyncio.Lock:
        """Held while the tree is built from the store (retention deletes under it)."""
        return self._building

    def forget(self, event_ids: list[str], delivery_ids: list[str]) -> None:
        """Deleted events and deliveries (retention) leave the tree, if built."""
        if self.tree is not None and (event_ids or delivery_ids):
            self.tree.apply(
                [("e/" + i, None, False) for i in event_ids]
                + [("d/" + i, None, False) for i in delivery_ids]
            )

    def _on_commit(self, batch: WriteBatch) -> None:
        """A committed batch (WritePath commit observer): its items into the tree; those
        of a large batch (a merged snapshot chunk: thousands of keys, tens of ms) and of
        every batch after it until they are in, in slices (``_catch_up``)."""
        for pending in self._pending:
            pending.append(batch)  # a build is reading the store: replayed after it
        if self.tree is None:
            return
        size = len(batch.registry) + len(batch.events) + len(batch.deliveries)
        if not self._behind and size <= _SYNC_ITEMS:
            self._apply(self.tree, batch)
            return
        self._behind.append(batch)
        if self._catching_up is None or self._catching_up.done():
            self._catching_up = asyncio.get_running_loop().create_task(self._catch_up())

    async def _catch_up(self) -> None:
        """The batches ``_on_commit`` left behind into the tree, in commit order,
        ``_REGISTRY_PAGE`` items at a time, returning to the loop between slices."""
        slicer = Slicer(pause_ratio=0.0)
        try:
            while self._behind and self.tree is not None:
                changes = self._changes(self._behind[0])
                for i in range(0, len(changes), _REGISTRY_PAGE):
                    self.tree.apply(changes[i : i + _REGISTRY_PAGE])
                    await slicer.tick()
                self._behind.pop(0)
        finally:
            self._caught_up.set()

    def kept(self) -> bool:
        """Whether commits reach a tree (built, or being built): only then do the rows of
        the deliveries another process committed need reading (runtime/cohort.py)."""
        return self.tree is not None or bool(self._pending)

    def drop_tree(self) -> None:
        """Drop the kept tree, built again from the store when next asked (state was
        reloaded from the store, or the replication role went to another process). A
        catch-up under way stops: its batches were the dropped tree's. A wait for it ends
        here (``_caught_up_all``): a catch-up cancelled before its first step never runs
        its ``finally``."""
        self.tree = None
        self._drops += 1
        self._behind.clear()
        if self._catching_up is not None:
            self._catching_up.cancel()
            self._catching_up = None
        self._caught_up.set()

    async def _caught_up_all(self) -> None:
        """Returns once every committed batch is in the tree (``_catch_up``) or the tree
        was dropped (``drop_tree``)."""
        while self._behind:
            self._caught_up.clear()
            await self._caught_up.wait()

    def _apply(self, tree: StateTree, batch: WriteBatch) -> None:
        tree.apply(self._changes(batch))

    def _changes(self, batch: WriteBatch) -> list[tuple[str, bytes | None, bool]]:
        changes = [self._registry_change(k, v) for k, v in batch.registry.items()]
        changes += [("e/" + e.id, b"", False) for e in batch.events]
        changes += [_delivery_change(d) for d in batch.deliveries]
        return changes

    def _registry_change(self, key: str, data: bytes) -> tuple[str, bytes | None, bool]:
        cls = key_type(key)
        empty = self._empty.get(cls)
        if empty is None and cls is not None:
            empty = self._empty[cls] = cls.empty().to_bytes()
        # an empty state leaves the tree, as ``Registry.states`` leaves it out
        return "r/" + key, None if data == empty else data, False

    async def state_tree(self) -> StateTree:
        """The hash tree (core.hashtree.StateTree) over this node's durable state: every
        non-empty registry state, every stored event id and every stored delivery.

        Built from the store once (O(items), the first time it is asked for or by
        ``warm``), then kept up to date by every group commit (its leaves at once, the
        buckets above when read: ``HashTree.flush``), so a repair pass starts at once,
        unless a large commit is still going into it (``_catch_up``): then it waits for
        that, and gets a tree built again if the tree was dropped meanwhile. The tree is
        live: a pass that awaits between reads may see later commits (their records
        replicate anyway)."""
        while True:
            async with self._building:
                while self.tree is None:
                    drops = self._drops
                    tree = await self._build()
                    if drops == self._drops:  # else dropped while built: built again
                        self.tree = tree
                tree = self.tree
            await self._caught_up_all()
            if tree is self.tree:  # else dropped while it caught up: built again
                return tree

    async def warm(self) -> None:
        """Build the tree now (a node with peers does so at start, in the background)."""
        await self.state_tree()

    async def _build(self) -> StateTree:
        pending: list[WriteBatch] = []  # commits from now on: replayed onto what it read
        self._pending.append(pending)
        try:
            tree = StateTree(self.settings.replication.tree_depth)
            await self._build_registry(tree)
            after = ""  # a page at a time: memory bounded by the page, not the store
            loop = asyncio.get_running_loop()
            started = loop.time()
            while ids := await self.store.list_event_ids(after, _PAGE):
                tree.apply([("e/" + event_id, b"", False) for event_id in ids])
                after = ids[-1]
                started = await _pause(loop, started)
            after = ""
            while page := await self.store.load_deliveries(after, _PAGE):
                tree.apply([_delivery_change(d) for d in page])
                after = page[-1].id
                started = await _pause(loop, started)
            slicer = Slicer()  # the buckets above the leaves, a sixteenth at a time
            for digit in HEX:
                tree.flush(digit)
                await slicer.tick()
            for batch in pending:  # in commit order: the last state of an item wins
                self._apply(tree, batch)
            tree.flush()  # (no await from here on: later commits go to the tree itself)
            heap.settle(len(tree), "tree")  # the rest of its objects (runtime/heap.py)
            self.builds += 1
            return tree
        finally:
            self._pending.remove(pending)

    async def _build_registry(self, tree: StateTree) -> None:
        """The registry's non-empty states into ``tree``, ``_REGISTRY_PAGE`` keys at a
        time, returning to the loop between slices (``Slicer``: at most half of the
        loop): one ``apply`` over 1M keys held the loop for seconds (issue 42). Keys are
        a copy taken at once; a key changed or added meanwhile is replayed from its
        commit (``_pending``), and its state is read when its page is applied."""
        reg = self.catalog.registry
        keys = reg.keys()
        slicer = Slicer()
        for i in range(0, len(keys), _REGISTRY_PAGE):
            states = [(k, reg.state_bytes(k)) for k in keys[i : i + _REGISTRY_PAGE]]
            page = [("r/" + k, b, False) for k, b in states if b is not None]  # no decoding
            tree.apply(page, flush=False)  # the buckets above: a sixteenth at a time, after
            heap.settle(len(tree), "tree")  # its objects, as it grows (runtime/heap.py)
            await slicer.tick()

    async def digest(self) -> tuple[dict[str, int], bytes]:
        """``(version vector, root)``: the durable version vector and the root hash of the
        replicated tree at it, in which a delivery not yet final counts by presence only
        (its attempts and next try are local to its origin; equal in every region that
        holds the same records); b"\0" for an empty tree. The root is b"" (not compared)
        while commits are pending. O(1) once the tree is built."""
        vv = dict(self.writer.durable_vv)
        if self.writer.version_vector != vv or self._behind:
            return vv, b""
        tree = await self.state_tree()
        if self.writer.version_vector != vv or self.writer.durable_vv != vv:
            return vv, b""  # moved while the tree was first built
        return vv, tree.replicated_root() or b"\0"

    async def state_items(self, idents: list[str]) -> list[tuple[str, bytes]]:
        """``(kind, body)`` items carrying the current state of tree items ``idents``;
        registry states are grouped in one item per call, an event carries its
        Idempotency-Keys. Items gone since the tree was built are skipped."""
        # one lookup per ident (O(batch), not a copy of the registry per batch: issue 42)
        lookup = self.catalog.registry.state_bytes  # as stored: nothing decoded
        registry = {i[2:]: s for i in idents if i[:2] == "r/" and (s := lookup(i[2:])) is not None}
        out: list[tuple[str, bytes]] = []
        if registry:
            out.append(("registry", encode_body(registry=registry)))
        event_ids = [i[2:] for i in idents if i[:2] == "e/"]
        delivery_ids = [i[2:] for i in idents if i[:2] == "d/"]
        keys = await self.idempotency.rows_by_event(event_ids) if event_ids else {}
        # one read per kind, not per item (a repair from nothing sends every item)
        events = await self.store.get_events(event_ids) if event_ids else {}
        deliveries = await self.store.get_deliveries(delivery_ids) if delivery_ids else {}
        for ident in idents:
            kind, oid = ident[:2], ident[2:]
            if kind == "e/" and (event := events.get(oid)) is not None:
                rows = sorted(keys.get(oid, [])) or [None]
                for row in rows:  # one item per key (usually none or one)
                    out.append(("event", encode_body(event=event, idempotency=row)))
            elif kind == "d/" and (d := deliveries.get(oid)) is not None:
                out.append(("delivery", encode_body(delivery=d)))
        return out

    async def apply_state(
        self, items: list[tuple[str, bytes]], version_vector: Mapping[str, int] | None = None
    ) -> str | None:
        """Merge anti-entropy state items (see ``state_items``) in one commit.

        Every item is validated first (``decode_body``); if any is malformed nothing is
        merged and the reason is returned. ``version_vector`` (the sender's, when its state
        was taken) raises this node's version vector in the same commit: the caller passes
        it only once every chunk of the pass was merged. Returns None on success.
        """
        # decoded and merged an item at a time, returning to the loop between slices
        # (a chunk of 512 KiB held the joining node's loop ~300 ms: issue 42)
        slicer = Slicer(pause_ratio=0.0)
        try:
            reads = self.writer.capabilities.reads
            decoded = []
            for kind, body in items:
                decoded.append(decode_body(kind, body, reads))
                await slicer.tick()
        except ValueError as exc:
            self.counters["state_rejected"] += 1
            log.warning("rejected state chunk: %s", exc)
            return str(exc)
        self.counters["unknown_fields"] += sum(d.unknown for d in decoded)
        ids = [i for dec in decoded for i in dec.delivery_ids()]
        async with self.writer.unsettled.read(self.store, ids) as read:
            async with self.writer.lock:
                stored = read.current()
                batch = WriteBatch()
                deliveries: dict[str, Delivery] = {}
                for dec in self._unexpired(decoded, stored):
                    for part in _parts(dec):
                        self.replica.merge(part, batch, deliveries, stored)
                        await slicer.tick()  # (other writers wait for the lock, not the loop)
                batch.deliveries.extend(deliveries.values())
                for origin, seq in (version_vector or {}).items():
                    if seq > self.writer.version_vector.get(origin, 0) and not (
                        self.replica.pruned(origin)  # retired, pruned here (issue 40)
                    ):
                        self.writer.version_vector[origin] = seq
                        batch.version_vector[origin] = seq
                        held = self.replica.held.get(origin, {})
                        for s in [s for s in held if s <= seq]:
                            del held[s]
                        if not held:
                            self.replica.held.pop(origin, None)
                if not batch:
                    return None
                durable = self.writer.submit(batch)
        await durable
        heap.settle(len(self.catalog.registry))  # a joining registry: runtime/heap.py
        self.counters["anti_entropy_items"] += len(items)
        if deliveries:
            self.queue.add()
        return None

    def _unexpired(self, decoded: list[Decoded], stored: Mapping[str, Delivery]) -> list[Decoded]:
        """``decoded`` without the items retention deleted here (``expired``): an event
        item, unless a delivery of it in these items is kept; a delivery this node does
        not hold (one it holds is merged: its state may still move)."""

        def gone(d: Delivery) -> bool:
            return d.id not in stored and self.expired(d)

        def carried(dec: Decoded) -> list[Delivery]:
            return [*dec.deliveries, *([dec.delivery] if dec.delivery else [])]

        kept_events = {d.event_id for dec in decoded for d in carried(dec) if not gone(d)}
        out = []
        for dec in decoded:
            ds = carried(dec)
            if ds and not dec.event and not dec.registry and all(gone(d) for d in ds):
                continue
            if (dec.event is not None and not ds and not dec.registry
                    and dec.event.id not in kept_events and self.expired(dec.event)):  # fmt: skip
                continue
            out.append(dec)
        return out
