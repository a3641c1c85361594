"""Anti-entropy state: the hash tree over this node's state, the items that carry the
state of differing buckets, and merging such items from a peer.

Builds what a repair pass compares and sends (the pass itself runs in
runtime/replication.py); merges through the replica, so state items follow the same
rules as records. Never touches the log or its truncation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ..config import Settings
from ..core.hashtree import HashTree
from ..core.model import Delivery, WriteBatch
from ..core.records import decode_body, encode_body
from .ports import Store
from .replica import Replica
from .state import Catalog, DeliveryQueue, IdempotencyKeys
from .writepath import WritePath

__all__ = ["AntiEntropy"]

log = logging.getLogger("regionsync.node")


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
        self._digest: tuple[int, bytes] | None = None

    async def state_tree(self, replicated_only: bool = False) -> HashTree:
        """A hash tree (core.hashtree) over this node's state, built now (O(items)): every
        non-empty registry state, every stored event id and every stored delivery.

        ``replicated_only``: a delivery not yet final counts by presence only, since its
        attempts and next try are local to its origin (no record carries them); this is
        the tree whose root digests compare (equal in every region that holds the same
        records)."""
        tree = HashTree(self.settings.replication.tree_depth)
        for key, state in self.catalog.registry.states().items():
            tree.put("r/" + key, state.to_bytes())
        for event_id in await self.store.list_event_ids():
            tree.put("e/" + event_id, b"")
        for d in await self.store.load_deliveries():
            final = d.status.final or not replicated_only
            tree.put("d/" + d.id, encode_body(delivery=d) if final else b"")
        return tree

    async def digest(self) -> tuple[dict[str, int], bytes]:
        """``(version vector, root)``: the durable version vector and the root hash of the
        ``replicated_only`` tree at it (b"\0" for an empty tree). The root is b"" (not
        computed) while commits are pending or the state moved during the build. Cached by
        commit count: an idle node builds the tree (O(items)) once per change."""
        vv = dict(self.writer.durable_vv)
        key = self.writer.commits
        if self._digest is not None and self._digest[0] == key:
            return vv, self._digest[1]
        if self.writer.version_vector != vv:
            return vv, b""
        tree = await self.state_tree(replicated_only=True)
        if self.writer.commits != key or self.writer.version_vector != vv:
            return vv, b""
        root = tree.hash("") or b"\0"
        self._digest = (key, root)
        return vv, root

    async def state_items(self, idents: list[str]) -> list[tuple[str, bytes]]:
        """``(kind, body)`` items carrying the current state of tree items ``idents``;
        registry states are grouped in one item per call, an event carries its
        Idempotency-Keys. Items gone since the tree was built are skipped."""
        states = self.catalog.registry.states()
        registry = {i[2:]: states[i[2:]] for i in idents if i[:2] == "r/" and i[2:] in states}
        out: list[tuple[str, bytes]] = []
        if registry:
            out.append(("registry", encode_body(registry=registry)))
        keys = self.idempotency.rows_by_event() if any(i[:2] == "e/" for i in idents) else {}
        for ident in idents:
            kind, oid = ident[:2], ident[2:]
            if kind == "e/" and (event := await self.store.get_event(oid)) is not None:
                rows = sorted(keys.get(oid, [])) or [None]
                for row in rows:  # one item per key (usually none or one)
                    out.append(("event", encode_body(event=event, idempotency=row)))
            elif kind == "d/" and (d := await self.store.get_delivery(oid)) is not None:
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
        self._digest = None  # merged state may change without the version vector
        try:
            decoded = [decode_body(kind, body) for kind, body in items]
        except ValueError as exc:
            self.counters["state_rejected"] += 1
            log.warning("rejected state chunk: %s", exc)
            return str(exc)
        async with self.writer.lock:
            batch = WriteBatch()
            deliveries: dict[str, Delivery] = {}
            for dec in decoded:
                await self.replica.merge(dec, batch, deliveries)
            batch.deliveries.extend(deliveries.values())
            for origin, seq in (version_vector or {}).items():
                if seq > self.writer.version_vector.get(origin, 0):
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
        self.counters["anti_entropy_items"] += len(items)
        if deliveries:
            self.queue.wake.set()
        return None
