"""Listing: newest-first pages of tenants, endpoints, tokens, sources, events, deliveries
and jobs.

Every list is ordered by ``(created time ms, id)`` descending and paged by a cursor
``(ms, id)``: the key of the last item of the previous page (strictly below it comes
next). Only what the live registry shows is listed (the generation rules of
``Catalog.event_visible`` / ``delivery_visible``): rows of an earlier life of a re-created
tenant or endpoint id are skipped, so a page may take more than one store read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from crdt import LWWRegister

from ..core.model import AuditEntry, Delivery, DeliveryQuery, Event, EventQuery
from ..core.registry import EndpointView, TenantView
from ..core.tokens import TokenView
from .ports import Store
from .recovery import Job
from .state import Catalog

__all__ = ["Cursor", "Listing"]

Cursor = tuple[int, str]  # (ms, id) of the last item of a page
T = TypeVar("T")
V = TypeVar("V")


def _page(
    items: Iterable[T],
    key: Callable[[T], Cursor],
    before: Cursor | None,
    limit: int,
    view: Callable[[T], V | None] = lambda item: item,  # type: ignore[assignment,return-value]
) -> tuple[list[V], Cursor | None]:
    """Newest-first page of in-memory ``items``: (at most ``limit`` views, next cursor).

    ``key`` is read for every item; ``view`` (default: the item itself; None: not listed)
    only in key order until the page is full, so a page of registry ids whose key is a
    cheap read costs O(ids) key reads and O(page) views, not a view of every id."""
    keyed = [(key(i), i) for i in items]
    if before is not None:
        keyed = [(k, i) for k, i in keyed if k < before]
    keyed.sort(key=lambda pair: pair[0], reverse=True)
    out: list[tuple[Cursor, V]] = []
    for k, i in keyed:
        if (v := view(i)) is not None:
            out.append((k, v))
            if len(out) > limit:
                break
    more = len(out) > limit
    out = out[:limit]
    return [v for _, v in out], (out[-1][0] if more else None)


class Listing:
    """The list and search queries of the API over the catalog (registry, replicated
    recovery jobs) and the store."""

    def __init__(self, catalog: Catalog, store: Store):
        self.catalog, self.store = catalog, store

    async def audit(
        self, tenant: str | None, since_ms: int | None, before: Cursor | None, limit: int
    ) -> tuple[list[AuditEntry], Cursor | None]:
        """Audit entries (of ``tenant`` if given), newest first by HLC stamp then origin
        and seq; the cursor is ``(hlc wall ms, "<logical>|<origin>|<seq>")``. Raises
        ValueError for a cursor whose id part is not of that form."""
        key = None
        if before is not None:
            logical, origin, seq = before[1].split("|")
            if not (logical.isdigit() and seq.isdigit() and origin):
                raise ValueError("bad audit cursor")
            key = (before[0], int(logical), origin, int(seq))
        rows = await self.store.list_audit(tenant, since_ms, key, limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        last = rows[-1] if more else None
        nxt = None if last is None else (
            last.hlc_wall_ms, f"{last.hlc_logical}|{last.origin}|{last.seq}"
        )  # fmt: skip
        return rows, nxt

    def tenants(self, before: Cursor | None, limit: int) -> tuple[list[TenantView], Cursor | None]:
        """Live tenants, newest first."""
        reg = self.catalog.registry

        def key(t: str) -> Cursor:
            return reg.get(f"t/{t}/created_at", LWWRegister).value() or 0, t

        return _page(reg.tenant_ids(), key, before, limit, reg.tenant)

    def endpoints(
        self, tenant: str, before: Cursor | None, limit: int
    ) -> tuple[list[EndpointView], Cursor | None]:
        """The live tenant's endpoints, newest first. NotFound for a missing tenant."""
        self.catalog.tenant(tenant)
        views = self.catalog.registry.endpoints(tenant)
        return _page(views, lambda v: (v.created_at_ms or 0, v.id), before, limit)

    def tokens(self, before: Cursor | None, limit: int) -> tuple[list[TokenView], Cursor | None]:
        """Live registry tokens (expired ones included), newest first."""
        views = self.catalog.token_hashes.values()
        return _page(views, lambda t: (t.created_at_ms, t.id), before, limit)

    def sources(
        self, tenant: str | None, before: Cursor | None, limit: int
    ) -> tuple[list[dict], Cursor | None]:
        """Live sources (of ``tenant`` if given), newest first; fields as
        ``Registry.source`` gives them (secret included: the route drops it)."""
        reg = self.catalog.registry
        ids = reg.source_ids()
        if tenant is not None:
            ids = [i for i in ids if reg.get(f"s/{i}/tenant", LWWRegister).value() == tenant]

        def key(sid: str) -> Cursor:
            return reg.get(f"s/{sid}/created_at", LWWRegister).value() or 0, sid

        return _page(ids, key, before, limit, reg.source)

    def jobs_of(
        self, tenant: str, before: Cursor | None, limit: int
    ) -> tuple[list[Job], Cursor | None]:
        """The tenant's recovery jobs (replicated: every region lists them), newest first.
        NotFound for a missing tenant."""
        self.catalog.tenant(tenant)
        jobs = [
            j
            for job_id, fields in self.catalog.jobs.items()
            if (j := Job.from_fields(job_id, fields)) is not None and j.tenant == tenant
        ]
        return _page(jobs, lambda j: (j.started_at_ms, j.id), before, limit)

    async def events(
        self, q: EventQuery, before: Cursor | None, limit: int
    ) -> tuple[list[tuple[Event, list[Delivery]]], Cursor | None]:
        """A page of the live tenant's events passing ``q``, each with its visible
        deliveries, and the next cursor (None at the end). NotFound for a missing tenant."""
        self.catalog.tenant(q.tenant)
        out: list[Event] = []
        while True:
            rows = await self.store.list_events(q, before, limit + 1)
            out.extend(e for e in rows if self.catalog.event_visible(q.tenant, e))
            if len(out) > limit or len(rows) <= limit:
                break
            before = (rows[-1].received_at_ms, rows[-1].id)
        more = len(out) > limit
        out = out[:limit]
        by_event: dict[str, list[Delivery]] = {e.id: [] for e in out}
        events = {e.id: e for e in out}
        for d in await self.store.deliveries_of_events(list(by_event)):
            if self.catalog.delivery_visible(q.tenant, d, events[d.event_id]):
                by_event[d.event_id].append(d)
        nxt = (out[-1].received_at_ms, out[-1].id) if more else None
        return [(e, by_event[e.id]) for e in out], nxt

    async def deliveries(
        self, q: DeliveryQuery, before: Cursor | None, limit: int
    ) -> tuple[list[Delivery], Cursor | None]:
        """A page of the live tenant's visible deliveries passing ``q`` and the next
        cursor (None at the end). NotFound for a missing tenant."""
        self.catalog.tenant(q.tenant)
        out: list[Delivery] = []
        events: dict[str, Event | None] = {}
        while True:
            rows = await self.store.list_tenant_deliveries(q, before, limit + 1)
            for d in rows:
                if d.event_id not in events:
                    events[d.event_id] = await self.store.get_event(d.event_id)
                if self.catalog.delivery_visible(q.tenant, d, events[d.event_id]):
                    out.append(d)
            if len(out) > limit or len(rows) <= limit:
                break
            before = (rows[-1].created_at_ms, rows[-1].id)
        more = len(out) > limit
        out = out[:limit]
        return out, ((out[-1].created_at_ms, out[-1].id) if more else None)
