"""Which endpoints an event goes to: event-type patterns, the subscription index, filters.

Decides the endpoints of a tenant that subscribe to an event (type pattern, then payload
filter); never does I/O, reads time or awaits: the caller feeds registry views and the
parsed payload. Rules: issue 6 (index by tenant and event type, a negative-lookup cache
invalidated exactly by the registry changes that could make it wrong); filters.py.

Event-type patterns in an endpoint's ``event_types``:
    ``*``           every type (an empty ``event_types`` means the same);
    ``issues.*``    every type starting with ``issues.`` (``issues.opened``,
                    ``issues.label.added``), not ``issues`` itself;
    anything else   that exact type (``[A-Za-z0-9_.-]{1,128}``, as core/validate.py).

Paused and disabled endpoints stay candidates: the node records their deliveries as
skipped (runtime/ingest.py); callers that want only active ones check the view.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import Unprocessable
from .filter_compiler import compile_filter
from .filters import Predicate, json_equal
from .registry import EndpointView

__all__ = [
    "EVENT_PATTERN_RE",
    "SubscriptionIndex",
    "check_event_pattern",
    "pattern_matches",
]

EVENT_PATTERN_RE = re.compile(r"\*|[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,125}\.\*|[A-Za-z0-9_.\-]{1,128}")


def check_event_pattern(value: Any, field: str = "event_types") -> str:
    """An event-type pattern (``*``, ``prefix.*`` or an exact type); returns it.

    Raises ``Unprocessable`` (422) with ``field`` if it is not one.
    """
    if not isinstance(value, str) or not EVENT_PATTERN_RE.fullmatch(value):
        raise Unprocessable(
            "must be '*', '<prefix>.*' or an event type [A-Za-z0-9_.-]{1,128}", field=field
        )
    return value


def pattern_matches(pattern: str, event_type: str) -> bool:
    """True if ``event_type`` matches ``pattern`` (``*``, ``prefix.*``, exact)."""
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        return event_type.startswith(pattern[:-1])
    return pattern == event_type


@dataclass(slots=True)
class _Entry:
    tenant: str
    patterns: tuple[str, ...]  # normalised: ("*",) for "every type"
    filter: Any
    predicate: Predicate


class _TenantSubs:
    """Subscriptions of one tenant: exact types, ``prefix.`` prefixes, every-type."""

    __slots__ = ("every", "exact", "prefixes")

    def __init__(self) -> None:
        self.exact: dict[str, set[str]] = {}
        self.prefixes: dict[str, set[str]] = {}  # "issues." -> endpoint ids
        self.every: set[str] = set()

    def _bucket(self, pattern: str, create: bool) -> set[str] | None:
        if pattern == "*":
            return self.every
        if pattern.endswith(".*"):
            table, key = self.prefixes, pattern[:-1]
        else:
            table, key = self.exact, pattern
        if create:
            return table.setdefault(key, set())
        return table.get(key)

    def add(self, pattern: str, endpoint_id: str) -> None:
        bucket = self._bucket(pattern, create=True)
        assert bucket is not None
        bucket.add(endpoint_id)

    def discard(self, pattern: str, endpoint_id: str) -> None:
        bucket = self._bucket(pattern, create=False)
        if bucket is None:
            return
        bucket.discard(endpoint_id)
        if not bucket and bucket is not self.every:
            if pattern.endswith(".*"):
                del self.prefixes[pattern[:-1]]
            else:
                del self.exact[pattern]

    def empty(self) -> bool:
        return not (self.exact or self.prefixes or self.every)

    def lookup(self, event_type: str) -> set[str]:
        found: set[str] = set(self.every)
        exact = self.exact.get(event_type)
        if exact:
            found |= exact
        if self.prefixes:
            # One dict probe per '.' in the type: a trie walk without the trie.
            i = event_type.find(".")
            while i != -1:
                ids = self.prefixes.get(event_type[: i + 1])
                if ids:
                    found |= ids
                i = event_type.find(".", i + 1)
        return found


class SubscriptionIndex:
    """(tenant, event type) -> candidate endpoints, with compiled filters and a
    negative-lookup cache.

    Fed with ``EndpointView``s as registry deltas arrive (from any region): ``upsert`` a
    changed live endpoint, ``remove`` a deleted one. Counters: ``hits`` and ``misses`` of
    the negative cache (every ``candidates``/``match`` call is one or the other),
    ``invalidations`` (negative entries dropped because a change could make them wrong),
    ``evictions`` (dropped for room, at ``max_negative`` entries, oldest first),
    ``compilations`` (filters compiled), ``loads`` (deferred tenants indexed).

    Tenants may be indexed at their first read (issue 42: a restart over 1M keys must
    not decode every endpoint): ``defer`` names tenants whose endpoints are not indexed
    yet; a read of one (``candidates``, ``match``, ``filtered``, ``endpoints_of``,
    ``is_cached_negative``) first calls ``loader(tenant)``, which ``upsert``s its live
    endpoints; a read of every tenant (``len``, ``in``, ``predicate``) loads them all.
    """

    def __init__(
        self,
        views: Iterable[EndpointView] = (),
        *,
        max_negative: int = 100_000,
        loader: Callable[[str], None] | None = None,
    ):
        """``views``: the live endpoints to start from; ``max_negative`` >= 1 bounds the
        negative cache; ``loader`` indexes a deferred tenant (``defer``). Raises
        ``Unprocessable`` if a view's filter or pattern is invalid.
        """
        if max_negative < 1:
            raise ValueError("max_negative must be >= 1")
        self._max_negative = max_negative
        self._entries: dict[str, _Entry] = {}
        self._tenants: dict[str, _TenantSubs] = {}
        self._by_tenant: dict[str, set[str]] = {}  # tenant -> its indexed endpoint ids
        self._negative: dict[tuple[str, str], None] = {}  # insertion-ordered, for eviction
        self._negative_by_tenant: dict[str, set[str]] = {}
        self.hits = 0
        self.misses = 0
        self.invalidations = 0
        self.evictions = 0
        self.compilations = 0
        self.loads = 0
        self._loader = loader
        self._deferred: set[str] = set()  # tenants whose endpoints are indexed at first read
        for view in views:
            self.upsert(view)

    # -- updates --------------------------------------------------------------------------

    def upsert(self, view: EndpointView) -> None:
        """Add or replace the endpoint ``view.id`` (its tenant, patterns and filter).

        The filter is recompiled only if it changed. Negative entries are dropped exactly
        where a newly subscribed pattern could match them. Raises ``Unprocessable`` if the
        filter or a pattern is invalid (nothing changes then).
        """
        patterns = _normalise(view.event_types)
        old = self._entries.get(view.id)
        if old is not None and json_equal(old.filter, view.filter):
            predicate = old.predicate
        else:
            predicate = compile_filter(view.filter)
            self.compilations += 1
        new = _Entry(view.tenant, patterns, view.filter, predicate)
        if old is not None and old.tenant == new.tenant and old.patterns == patterns:
            self._entries[view.id] = new
            return
        if old is not None:
            self._unlink(view.id, old)
            gained = set(patterns) - (set(old.patterns) if old.tenant == new.tenant else set())
        else:
            gained = set(patterns)
        self._entries[view.id] = new
        self._by_tenant.setdefault(new.tenant, set()).add(view.id)
        subs = self._tenants.setdefault(new.tenant, _TenantSubs())
        for p in patterns:
            subs.add(p, view.id)
        self._invalidate(new.tenant, gained)

    def remove(self, endpoint_id: str) -> None:
        """Forget an endpoint (deleted, or its tenant deleted); unknown ids are ignored.

        Removing never makes a "no subscriber" answer wrong, so no entry is dropped.
        """
        old = self._entries.pop(endpoint_id, None)
        if old is not None:
            self._unlink(endpoint_id, old)

    def _unlink(self, endpoint_id: str, entry: _Entry) -> None:
        ids = self._by_tenant[entry.tenant]
        ids.discard(endpoint_id)
        if not ids:
            del self._by_tenant[entry.tenant]
        subs = self._tenants[entry.tenant]
        for p in entry.patterns:
            subs.discard(p, endpoint_id)
        if subs.empty():
            del self._tenants[entry.tenant]

    def _invalidate(self, tenant: str, patterns: set[str]) -> None:
        cached = self._negative_by_tenant.get(tenant)
        if not cached or not patterns:
            return
        if "*" in patterns:
            doomed = set(cached)
        else:
            doomed = {t for t in cached if any(pattern_matches(p, t) for p in patterns)}
        for event_type in doomed:
            del self._negative[(tenant, event_type)]
            cached.discard(event_type)
        if not cached:
            del self._negative_by_tenant[tenant]
        self.invalidations += len(doomed)

    def defer(self, tenants: Iterable[str]) -> None:
        """Index ``tenants``' endpoints at their first read (through ``loader``), not now;
        until then they hold no entry and changes to them need not be fed."""
        if self._loader is None:
            raise ValueError("a deferred tenant needs a loader")
        self._deferred.update(tenants)

    def deferred(self, tenant: str) -> bool:
        """Is ``tenant`` left to its first read (nothing of it indexed, nothing to feed)?"""
        return tenant in self._deferred

    def indexed(self, endpoint_id: str) -> bool:
        """Is the endpoint indexed now? (Loads nothing, unlike ``in``.)"""
        return endpoint_id in self._entries

    def indexed_of(self, tenant: str) -> set[str]:
        """Ids indexed now under ``tenant`` (loads nothing, unlike ``endpoints_of``)."""
        return set(self._by_tenant.get(tenant, ()))

    def _load(self, tenant: str) -> None:
        if tenant in self._deferred:
            self._deferred.discard(tenant)
            self.loads += 1
            assert self._loader is not None
            self._loader(tenant)

    def _load_all(self) -> None:
        for tenant in sorted(self._deferred):
            self._load(tenant)

    # -- reads ----------------------------------------------------------------------------

    def __len__(self) -> int:
        self._load_all()
        return len(self._entries)

    def __contains__(self, endpoint_id: object) -> bool:
        self._load_all()
        return endpoint_id in self._entries

    @property
    def negative_entries(self) -> int:
        """Number of cached "no subscriber" answers."""
        return len(self._negative)

    def predicate(self, endpoint_id: str) -> Predicate:
        """The compiled filter of an indexed endpoint; raises KeyError if unknown."""
        self._load_all()
        return self._entries[endpoint_id].predicate

    def is_cached_negative(self, tenant: str, event_type: str) -> bool:
        """True if "no subscriber for (tenant, event_type)" is cached (no counter moves)."""
        self._load(tenant)
        return (tenant, event_type) in self._negative

    def endpoints_of(self, tenant: str) -> list[str]:
        """Ids of the indexed endpoints of ``tenant``, sorted; O(its endpoints)."""
        self._load(tenant)
        return sorted(self._by_tenant.get(tenant, ()))

    def candidates(self, tenant: str, event_type: str) -> list[str]:
        """Ids of the tenant's endpoints whose patterns match ``event_type``, sorted.

        Filters are not evaluated. Uses and fills the negative cache.
        """
        self._load(tenant)
        key = (tenant, event_type)
        if key in self._negative:
            self.hits += 1
            return []
        self.misses += 1
        subs = self._tenants.get(tenant)
        found = subs.lookup(event_type) if subs is not None else None
        if not found:
            self._remember_negative(key)
            return []
        return sorted(found)

    def match(
        self,
        tenant: str,
        event_type: str,
        payload: Any,
        verdicts: Mapping[str, tuple[Predicate, bool]] | None = None,
    ) -> list[str]:
        """Ids of the endpoints that get this event (pattern and filter match), sorted.

        ``payload`` is the parsed JSON body (any JSON value); a body that is not JSON
        should be passed as None, which only filter-less endpoints (and filters that hold
        on a missing field) accept. ``verdicts`` (endpoint id -> (filter, passed)) are
        filters already applied to this payload (``filtered``); a filter changed since
        is applied again. Never raises on payload shape.
        """
        ids = self.candidates(tenant, event_type)
        if not ids:
            return ids
        entries, verdicts = self._entries, verdicts or {}
        out = []
        for i in ids:
            predicate, known = entries[i].predicate, verdicts.get(i)
            if known[1] if known is not None and known[0] is predicate else predicate(payload):
                out.append(i)
        return out

    def filtered(self, tenant: str, event_type: str) -> dict[str, Predicate]:
        """The filters of the tenant's endpoints subscribed to ``event_type`` that have
        one (endpoint id -> compiled filter), to apply before ``match``; counts nothing."""
        self._load(tenant)
        if (tenant, event_type) in self._negative:
            return {}
        subs = self._tenants.get(tenant)
        found = subs.lookup(event_type) if subs is not None else None
        entries = self._entries
        return {i: entries[i].predicate for i in found or () if entries[i].filter}

    def _remember_negative(self, key: tuple[str, str]) -> None:
        if len(self._negative) >= self._max_negative:
            oldest = next(iter(self._negative))
            del self._negative[oldest]
            tenant_set = self._negative_by_tenant[oldest[0]]
            tenant_set.discard(oldest[1])
            if not tenant_set:
                del self._negative_by_tenant[oldest[0]]
            self.evictions += 1
        self._negative[key] = None
        self._negative_by_tenant.setdefault(key[0], set()).add(key[1])

    def stats(self) -> dict[str, int]:
        """Counters for export: endpoints and tenants indexed now, deferred tenants,
        negative_entries, hits, misses, invalidations, evictions, compilations, loads.
        Loads nothing."""
        return {
            "endpoints": len(self._entries),
            "tenants": len(self._tenants),
            "deferred_tenants": len(self._deferred),
            "negative_entries": len(self._negative),
            "hits": self.hits,
            "misses": self.misses,
            "invalidations": self.invalidations,
            "evictions": self.evictions,
            "compilations": self.compilations,
            "loads": self.loads,
        }


def _normalise(event_types: tuple[str, ...]) -> tuple[str, ...]:
    """Validated, de-duplicated, sorted patterns; ``("*",)`` if any is ``*`` or none."""
    if not event_types:
        return ("*",)
    for i, p in enumerate(event_types):
        check_event_pattern(p, f"event_types[{i}]")
    if "*" in event_types:
        return ("*",)
    return tuple(sorted(set(event_types)))
