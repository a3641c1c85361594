"""In-memory state that several parts of a node read: the registry with its subscription
index, the delivery queue's counters and wake-up, and each peer's replication status
(the Idempotency-Keys, looked up in the store, are in runtime/idempotency.py and
re-exported here).

Owns no task and does no I/O; the parts that change this state say so in their
docstrings (registry deltas come only through ``Catalog.apply``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crdt import CRDT, PNCounter

from ..core.backpressure import tenant_retry_after
from ..core.custody import CustodyRecord
from ..core.event_types import EventTypeView, publish_schema
from ..core.health import Health
from ..core.matching import SubscriptionIndex
from ..core.model import Delivery, Event
from ..core.registry import EndpointView, Registry, TenantView, gen_live
from ..core.tokens import TokenView, tokens
from ..errors import NotFound, TooManyRequests, Unprocessable
from .idempotency import IdempotencyKeys, IdempotencyRow

__all__ = [
    "Catalog",
    "DeliveryQueue",
    "IdempotencyKeys",
    "IdempotencyRow",
    "PeerStatus",
    "tenant_backlog_full",
]

log = logging.getLogger("regionsync.node")


class Catalog:
    """The replicated registry (``core.registry.Registry``) and what is derived from it,
    kept in step (every delta goes through ``apply``): the subscription index, the
    custody records (``custody``) and the recovery jobs (``jobs``). ``watchers`` are
    called with the changed keys of every delta that changed more than usage counters
    (local, replicated or another process's), after the rest is derived.

    The subscription index of a tenant present when the registry was loaded is built at
    its first read (a publish; ``SubscriptionIndex.defer``), so a start decodes no
    endpoint; tenants created later are indexed as their endpoints come.
    ``decoded_keys``: config ``registry.decoded_cache_keys`` (core.registry_state).

    The lookups raise ``NotFound`` naming the field, as the API answers them.
    """

    def __init__(self, registry: Registry | None = None, *, decoded_keys: int | None = None):
        self.decoded_keys = decoded_keys
        self.registry = registry or Registry()
        # the write path's usage carry (runtime/writepath.py), shown by every registry
        self.pending_usage: dict[tuple[str, str], int] = {}
        self.registry.pending_usage = self.pending_usage
        self.decode_errors = 0  # registry rows found not to decode (logged once each)
        self._watch_decoding(self.registry)
        self.index = SubscriptionIndex(loader=self._load_tenant)
        self.custody: dict[str, CustodyRecord] = {}  # owner -> record (core.custody)
        self.jobs: dict[str, dict[str, Any]] = {}  # job id -> fields (runtime/recovery.py)
        self.token_hashes: dict[str, TokenView] = {}  # sha256 hex -> live API token
        # event-type catalogs: tenant -> name -> view, only tenants that have types; and
        # the tenants in strict mode (so a publish of a tenant with neither costs two
        # dict lookups)
        self.event_types: dict[str, dict[str, EventTypeView]] = {}
        self.strict: frozenset[str] = frozenset()
        self.watchers: list[Callable[[Mapping[str, CRDT]], None]] = []
        # the registry's merge with retired actors pruned (runtime/pruning.py); None: plain
        self.merge_hook: Callable[[Registry, Mapping[str, CRDT]], dict[str, CRDT]] | None = None
        self.rebuild_index()

    def load(self, states: Mapping[str, bytes]) -> None:
        """Replace the registry with ``states`` (key -> encoded CRDT, decoded when first
        read) and re-index. Raises crdt.DecodeError for a row not framed as a state."""
        self.registry = Registry.from_bytes(states, decoded_keys=self.decoded_keys)
        self.registry.pending_usage = self.pending_usage
        self._watch_decoding(self.registry)
        self.rebuild_index()
        self._reindex_tokens()

    def apply(self, deltas: Mapping[str, CRDT]) -> dict[str, CRDT]:
        """Merge ``deltas`` (key -> CRDT delta); returns the changed keys' new states."""
        hook = self.merge_hook
        changed = self.registry.apply(deltas) if hook is None else hook(self.registry, deltas)
        if changed and not all(type(v) is PNCounter for v in changed.values()):
            # usage counters (every publish moves one) index nothing: skip the rest
            members = self.registry.tenants_changed
            self._reindex(changed, members)
            if any(k.startswith("c/") for k in changed):
                self.custody = self.registry.custody()
            if any(k.startswith("j/") for k in changed):
                self.jobs = self.registry.jobs()
            if any(k == "tokens" or k.startswith("k/") for k in changed):
                self._reindex_tokens()
            self._reindex_event_types(changed, members)
            for watch in self.watchers:
                watch(changed)
        return changed

    def _reindex_event_types(self, changed: Mapping[str, CRDT] | None, members: set[str]) -> None:
        """Bring ``event_types`` and ``strict`` up to date with ``changed`` keys and the
        tenants created, deleted or re-created (``members``); None: everything changed."""
        reg = self.registry
        if changed is None:
            catalogs = set(reg.tenant_ids()) | set(self.event_types)
            self.strict = frozenset(t for t in reg.tenant_ids() if reg.strict_event_types(t))
        else:
            catalogs, modes = set(members), set(members)
            for key in changed:
                kind, _, rest = key.partition("/")
                tenant, _, tail = rest.partition("/")
                if kind == "y" or (kind == "t" and tail == "event_types"):
                    catalogs.add(tenant)
                elif kind == "t" and tail == "strict_event_types":
                    modes.add(tenant)
            for tenant in modes:
                on = reg.has_tenant(tenant) and reg.strict_event_types(tenant)
                self.strict = (self.strict | {tenant}) if on else (self.strict - {tenant})
        for tenant in catalogs:
            views = {v.name: v for v in reg.event_types(tenant)}
            if views:
                self.event_types[tenant] = views
            else:
                self.event_types.pop(tenant, None)

    def schema_of(self, tenant_id: str, event_type: str, strict: bool = True) -> str | None:
        """core.event_types.publish_schema against the tenant's catalog: the schema text
        a new event's payload must conform to (None: any); raises Unprocessable for an
        unknown type in strict mode (unless ``strict`` is False). Two dict lookups for a
        tenant without catalog or strict mode."""
        types = self.event_types.get(tenant_id)
        if types is None and tenant_id not in self.strict:
            return None
        return publish_schema(types, strict and tenant_id in self.strict, event_type)

    def deprecated_at(self, tenant_id: str, event_type: str) -> int | None:
        """When ``event_type`` was marked deprecated in the tenant's catalog (ms), or None."""
        types = self.event_types.get(tenant_id)
        view = types.get(event_type) if types else None
        if view is None or not view.deprecated:
            return None
        return view.deprecated_at_ms if view.deprecated_at_ms is not None else view.updated_at_ms

    def _watch_decoding(self, registry: Registry) -> None:
        if self.decoded_keys is not None:
            registry.set_decoded_keys(self.decoded_keys)
        registry.on_decode_error = self._decode_failed

    def _decode_failed(self, key: str, reason: str) -> None:
        """A stored registry row did not decode at its first read: the key reads as
        absent (no request fails on it) until a merge writes it; anti-entropy brings the
        peers' state, as this node's digest (over the stored bytes) differs from theirs."""
        self.decode_errors += 1
        log.error("registry row %s does not decode (read as absent until repaired): %s",
                  key, reason)  # fmt: skip

    def _reindex_tokens(self) -> None:
        self.token_hashes = {t.hash: t for t in tokens(self.registry)}

    def rebuild_index(self) -> None:
        """Derive everything from the whole registry (at start and on ``load``; a delta
        re-derives only what it touches, ``apply``); every tenant's subscriptions at its
        first read (``_load_tenant``)."""
        self.custody, self.jobs = self.registry.custody(), self.registry.jobs()
        self._reindex_event_types(None, set())
        self.index = SubscriptionIndex(loader=self._load_tenant)
        self.index.defer(self.registry.tenant_ids())

    def _load_tenant(self, tenant: str) -> None:
        """Index a deferred tenant's live endpoints (its first read)."""
        for view in self.registry.endpoints(tenant):
            self._index_upsert(view)

    def _index_upsert(self, view: EndpointView) -> None:
        try:
            self.index.upsert(view)
        except Unprocessable as exc:  # validated at its origin; never expected here
            log.error("endpoint %s has an unusable filter or pattern: %s", view.id, exc)
            self.index.remove(view.id)

    def _reindex(self, changed: Mapping[str, CRDT], members: set[str]) -> None:
        """Bring the subscription index up to date with changed registry keys and the
        endpoints of the tenants in ``members``: O(what changed), not O(registry). A
        deferred tenant is left alone: its first read derives it from the registry."""
        index, reg = self.index, self.registry
        ids: set[str] = set()
        for tenant in members:
            if not index.deferred(tenant):
                ids.update(reg.endpoint_ids(tenant))
                ids.update(index.indexed_of(tenant))
        for key in changed:
            kind, _, rest = key.partition("/")
            if kind == "e":
                ids.add(rest.split("/", 1)[0])
            elif kind == "t" and rest.endswith("/endpoints"):
                # an endpoint set decides only membership: the ids that joined or left it
                tenant = rest.split("/", 1)[0]
                if not index.deferred(tenant):
                    listed = set(reg.endpoint_ids(tenant))
                    ids.update(listed.symmetric_difference(index.indexed_of(tenant)))
        for eid in sorted(ids):
            if not index.indexed(eid) and index.deferred(reg.endpoint_owner(eid) or ""):
                continue  # not indexed, and its tenant will be derived at its first read
            view = reg.endpoint(eid)
            if view is None or index.deferred(view.tenant):
                index.remove(eid)
            else:
                self._index_upsert(view)

    def tenant(self, tenant_id: str) -> TenantView:
        view = self.registry.tenant(tenant_id)
        if view is None:
            raise NotFound(f"no tenant {tenant_id!r}", field="tenant")
        return view

    def require_tenant(self, tenant_id: str) -> None:
        """NotFound unless the tenant is live (the cheap check of the ingest path)."""
        if not self.registry.has_tenant(tenant_id):
            raise NotFound(f"no tenant {tenant_id!r}", field="tenant")

    def endpoint(self, tenant_id: str, endpoint_id: str) -> EndpointView:
        self.tenant(tenant_id)
        view = self.registry.endpoint(endpoint_id, tenant_id)
        if view is None:
            raise NotFound(f"no endpoint {endpoint_id!r}", field="endpoint")
        return view

    def event_visible(self, tenant_id: str, event: Event) -> bool:
        """Is ``event`` one of the live tenant's (same id and generation)?"""
        return event.tenant == tenant_id and gen_live(
            event.owner_gen, self.registry.tenant_gen(tenant_id)
        )

    def delivery_visible(self, tenant_id: str, d: Delivery, event: Event | None) -> bool:
        """Is ``d`` (of ``event``) one of the live tenant's? Its event must be, and if its
        endpoint id is live, the delivery must be of that endpoint's generation (a
        deleted endpoint's deliveries stay visible until the id is re-created)."""
        if d.tenant != tenant_id or event is None or not self.event_visible(tenant_id, event):
            return False
        live = self.registry.endpoint_gen(d.endpoint_id, tenant_id)
        return live is None or gen_live(d.owner_gen, live)

    def event_type(self, tenant_id: str, name: str) -> EventTypeView:
        self.tenant(tenant_id)
        view = self.registry.event_type(tenant_id, name)
        if view is None:
            raise NotFound(f"no event type {name!r}", field="event_type")
        return view

    def source(self, source_id: str) -> dict[str, Any]:
        fields = self.registry.source(source_id)
        if fields is None:
            raise NotFound(f"no source {source_id!r}", field="source")
        return fields


FRESH_MAX = 4096  # fresh deliveries waiting for the worker (DeliveryQueue.fresh)


@dataclass
class DeliveryQueue:
    """What ingest, recovery and the delivery worker share about this region's
    deliveries: ``backlog`` (pending deliveries this region owns) and ``tenant_backlog``
    (the same per tenant; tenants at 0 are dropped), moved together by ``count``; the
    worker's ``wake`` event, ``health`` (endpoint id -> this region's health view of it),
    and ``fresh``: pending deliveries of durable publishes handed to the worker without a
    store read (issue 17: a quiet endpoint's fresh delivery waited for reads carrying a
    burst's rows). ``tenant_limit`` is the most of ``backlog`` one tenant may hold
    (``core.backpressure.tenant_backlog_limit``; None: no limit).
    """

    backlog: int = 0
    tenant_backlog: dict[str, int] = field(default_factory=dict)
    tenant_limit: int | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    health: dict[str, Health] = field(default_factory=dict)
    # delivery id -> (delivery, event); taken only while a worker reads ahead (``handoff``)
    fresh: dict[str, tuple[Delivery, Event]] = field(default_factory=dict)
    handoff: bool = False
    # deliveries made due (or claimable) by other means than ``fresh``: bumped by ``add``
    added: int = 0

    def count(self, tenant: str, n: int) -> None:
        """``n`` (may be negative) more pending deliveries of ``tenant`` owned here."""
        self.backlog += n
        held = self.tenant_backlog.get(tenant, 0) + n
        if held > 0:
            self.tenant_backlog[tenant] = held
        else:
            self.tenant_backlog.pop(tenant, None)

    def recount(self, total: int, by_tenant: Mapping[str, int]) -> None:
        """Replace the counts with the store's (at start, and when custody hands back)."""
        self.backlog = total
        self.tenant_backlog = {t: n for t, n in by_tenant.items() if n > 0}

    def tenant_room(self, tenant: str) -> int | None:
        """How many more pending deliveries ``tenant`` may add here before it holds its
        share (``tenant_limit``): 0 at or over it; None: no limit."""
        if self.tenant_limit is None:
            return None
        return max(0, self.tenant_limit - self.tenant_backlog.get(tenant, 0))

    def tenant_full(self, tenant: str) -> bool:
        """Does ``tenant`` hold its share of the backlog (``tenant_limit``) or more?"""
        return self.tenant_room(tenant) == 0

    def hand_over(self, deliveries: list[Delivery], event: Event) -> None:
        """``event``'s pending ``deliveries`` are durable: give them to the worker (while
        fewer than ``FRESH_MAX`` wait; beyond that, or with no worker taking them, its
        store read finds them) and wake it."""
        if self.handoff and len(self.fresh) < FRESH_MAX:
            for d in deliveries:
                self.fresh[d.id] = (d, event)
            self.wake.set()
        else:
            self.add()

    def add(self) -> None:
        """Deliveries became due or claimable here that only a store read finds (a
        retry, recovery, custody taken over, an endpoint resumed): wake the worker, and
        let it know a read that found nothing before is out of date."""
        self.added += 1
        self.wake.set()


def tenant_backlog_full(queue: DeliveryQueue, tenant: str, jitter: float) -> TooManyRequests:
    """The 429 (code ``tenant_backlog_full``, field ``tenant``) for a tenant at its share
    of the backlog (``queue.tenant_full``); ``jitter`` in [-1, 1] spreads Retry-After."""
    return TooManyRequests(
        f"tenant {tenant!r} holds {queue.tenant_backlog.get(tenant, 0)} undelivered "
        f"deliveries in this region: its share of the backlog capacity is {queue.tenant_limit}",
        retry_after_s=tenant_retry_after(jitter),
        code="tenant_backlog_full",
        field="tenant",
    )


@dataclass
class PeerStatus:
    """Replication state towards one peer, as ``/v1/cluster`` shows it."""

    region: str
    address: str
    connected: bool = False
    actor: str | None = None  # the peer's own actor, from its Hello
    acked: dict[str, int] = field(default_factory=dict)  # the peer's version vector
    hello_vv: dict[str, int] | None = None  # ... as its Hello of the current session said
    last_ack_at_ms: int | None = None
    last_contact_at_ms: int | None = None  # any message from the peer (Hello, any Ack)
    last_error: str | None = None
    # state digests (issue 12 item 3): None until roots were compared at equal vvs
    state_agrees: bool | None = None
    last_digest_at_ms: int | None = None
    repair_wanted: bool = False  # a digest differed: the next session runs anti-entropy
    # passes in a row after which the digests still differed (they back off), the
    # monotonic start of the last pass, and whether one ran since the last verdict
    futile_repairs: int = 0
    last_repair_at: float | None = None
    repair_ran: bool = False
    # origin -> what the peer refused of it and moved past (Ack.rejected; issue 41):
    # count, last_seq, last_reason, last_ms
    refused: dict[str, dict[str, int | str]] = field(default_factory=dict)
    # set when the peer dialed in: our link to it stops backing off and redials now
    redial: asyncio.Event = field(default_factory=asyncio.Event, repr=False, compare=False)

    def note_refused(self, origin: str, seq: int, reason: str, now_ms: int) -> None:
        """The peer refused ``origin#seq`` for ``reason`` and moved past it."""
        n = self.refused.get(origin) or {"count": 0}
        self.refused[origin] = {"count": int(n["count"]) + 1, "last_seq": seq,
                                "last_reason": reason, "last_ms": now_ms}  # fmt: skip
