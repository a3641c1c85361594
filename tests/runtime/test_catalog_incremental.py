"""Catalog.apply re-derives only what a delta touches (issue 17: a registry change cost
O(registry): creating a tenant rebuilt the subscription index and every tenant's event
types, and dropped every cached endpoint view). What it keeps must equal a catalog
derived from scratch after any sequence of changes from two regions, delivered in any
order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from crdt import Timestamp
from regionsync.core.matching import SubscriptionIndex
from regionsync.core.registry import Registry
from regionsync.runtime.state import Catalog

TENANTS = ("t1", "t2")
ENDPOINTS = ("e1", "e2", "e3")
TYPES = ("a", "b", "a.x")
PATTERNS = ("a", "b", "a.*", "*")
PAYLOADS = ({}, {"k": 1}, {"k": 2})
FIELDS = {"url": "https://hooks.example.com/x", "secret": "whsec_" + "A" * 44}


def _derived(cat: Catalog) -> tuple[Any, ...]:
    """Everything a catalog derives from its registry, through the public reads."""
    reg = cat.registry
    return (
        {e: reg.endpoint(e) for e in ENDPOINTS},
        {
            (t, et, i): cat.index.match(t, et, p)
            for t in TENANTS
            for et in TYPES
            for i, p in enumerate(PAYLOADS)
        },
        {t: cat.index.endpoints_of(t) for t in TENANTS},
        len(cat.index),
        cat.event_types,
        cat.strict,
    )


def _fresh(cat: Catalog) -> Catalog:
    return Catalog(Registry({k: v for k, v in cat.registry._states.items()}))


class _Region:
    """A region's registry making changes; each change is kept for delivery."""

    def __init__(self, actor: str) -> None:
        self.reg, self.actor, self.clock = Registry(), actor, 0

    def change(self, data: st.DataObject) -> dict | None:
        self.clock += 1
        reg, actor, now = self.reg, self.actor, self.clock
        stamp = Timestamp(now, 0)
        tenant = data.draw(st.sampled_from(TENANTS))
        op = data.draw(st.sampled_from(
            ["tenant", "delete_tenant", "endpoint", "patch", "delete_endpoint", "type",
             "delete_type", "strict"]
        ))  # fmt: skip
        if op == "tenant":
            deltas = reg.create_tenant(tenant, "T", now, actor, stamp)
        elif op == "delete_tenant":
            deltas = reg.delete_tenant(tenant)
        elif op == "endpoint":
            eid = data.draw(st.sampled_from(ENDPOINTS))
            patterns = data.draw(st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=2))
            flt = data.draw(st.sampled_from([None, {"k": 1}]))
            deltas = reg.create_endpoint(
                eid, tenant, {**FIELDS, "filter": flt}, patterns, now, actor, stamp
            )
        elif op == "patch":
            eid = data.draw(st.sampled_from(ENDPOINTS))
            fields: dict[str, Any] = {"paused": data.draw(st.booleans())}
            if data.draw(st.booleans()):
                fields["event_types"] = data.draw(st.lists(st.sampled_from(PATTERNS), max_size=2))
            if data.draw(st.booleans()):
                fields["filter"] = data.draw(st.sampled_from([None, {"k": 2}]))
            deltas = reg.patch_endpoint(eid, fields, (), (), now, actor, stamp)
        elif op == "delete_endpoint":
            deltas = reg.delete_endpoint(data.draw(st.sampled_from(ENDPOINTS)), tenant)
        elif op == "type":
            name = data.draw(st.sampled_from(TYPES))
            deltas = reg.put_event_type(tenant, name, {}, now, actor, stamp, create=True)
        elif op == "delete_type":
            deltas = reg.delete_event_type(tenant, data.draw(st.sampled_from(TYPES)))
        else:
            flag = data.draw(st.booleans())
            deltas = reg.patch_tenant(tenant, {"strict_event_types": flag}, actor, stamp)
        reg.apply(deltas)
        return deltas


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_incremental_catalog_equals_one_derived_from_scratch(data: st.DataObject) -> None:
    regions = [_Region("eu:1"), _Region("us:1")]
    catalog = Catalog()
    pending: list[dict] = []
    for _ in range(data.draw(st.integers(5, 30))):
        if pending and data.draw(st.booleans()):
            # deliver any pending change: to the catalog, and to a region (concurrency)
            deltas = pending.pop(data.draw(st.integers(0, len(pending) - 1)))
            catalog.apply(deltas)
            data.draw(st.sampled_from(regions)).reg.apply(deltas)
            _derived(catalog)  # reads fill the view cache and the negative cache
            assert _derived(catalog) == _derived(_fresh(catalog))
        else:
            deltas = data.draw(st.sampled_from(regions)).change(data)
            pending.append(deltas)
    for deltas in pending:
        catalog.apply(deltas)
    assert _derived(catalog) == _derived(_fresh(catalog))


def _catalog_of(n_tenants: int) -> tuple[Catalog, str, Timestamp]:
    cat, actor = Catalog(), "eu:1"
    for i in range(n_tenants):
        cat.apply(cat.registry.create_tenant(f"t{i}", "T", i, actor, Timestamp(i, 0)))
        cat.apply(cat.registry.create_endpoint(
            f"e{i}", f"t{i}", {**FIELDS, "filter": {"k": i}}, ["a"], i, actor, Timestamp(i, 0)
        ))  # fmt: skip
    return cat, actor, Timestamp(10_000, 0)


def test_a_tenant_change_touches_only_that_tenant(monkeypatch: Any) -> None:
    cat, actor, stamp = _catalog_of(50)
    for i in range(50):
        assert cat.registry.endpoint(f"e{i}") is not None  # views cached
    upserts: list[str] = []
    real = SubscriptionIndex.upsert
    monkeypatch.setattr(
        SubscriptionIndex, "upsert", lambda self, view: (upserts.append(view.id), real(self, view))
    )
    index = cat.index

    cat.apply(cat.registry.create_tenant("new", "N", 1, actor, stamp))
    assert cat.index is index and upserts == []  # was: a new index, 50 upserts
    assert all(f"e{i}" in cat.registry._views for i in range(50))  # was: every view dropped

    cat.apply(cat.registry.delete_tenant("t7"))
    assert upserts == [] and "e7" not in cat.registry._views
    assert cat.index.match("t7", "a", {"k": 7}) == []
    assert cat.index.match("t8", "a", {"k": 8}) == ["e8"]
    assert len(cat.index) == 49 and cat.index.endpoints_of("t7") == []
    assert all(f"e{i}" in cat.registry._views for i in range(50) if i != 7)

    cat.apply(cat.registry.create_endpoint("e7b", "t8", FIELDS, ["b"], 2, actor, stamp))
    assert upserts == ["e7b"]  # was ["e7b", "e8"]: every endpoint of the changed set
    assert cat.index.endpoints_of("t8") == ["e7b", "e8"]
    assert "e9" in cat.registry._views
    assert _derived(cat)[1:] == _derived(_fresh(cat))[1:]


def test_index_endpoints_of_follows_moves_and_removals() -> None:
    from regionsync.core.registry import EndpointView

    reg = Registry()
    reg.apply(reg.create_tenant("A", "A", 1, "r:1", Timestamp(1, 0)))
    reg.apply(reg.create_endpoint("x", "A", FIELDS, ["a"], 1, "r:1", Timestamp(1, 0)))
    view = reg.endpoint("x")
    assert isinstance(view, EndpointView)
    idx = SubscriptionIndex([view])
    assert idx.endpoints_of("A") == ["x"]
    from dataclasses import replace

    idx.upsert(replace(view, tenant="B"))
    assert idx.endpoints_of("A") == [] and idx.endpoints_of("B") == ["x"]
    idx.upsert(replace(view, tenant="B", event_types=("b",)))
    assert idx.endpoints_of("B") == ["x"]
    idx.remove("x")
    assert idx.endpoints_of("B") == [] and len(idx) == 0


def _loaded(cat: Catalog) -> Catalog:
    """A catalog loaded from ``cat``'s registry as stored (bytes), as a restart does."""
    loaded = Catalog()
    loaded.load({k: v.to_bytes() for k, v in cat.registry._states.items()})
    return loaded


def test_a_loaded_catalog_decodes_no_endpoint_until_its_tenant_is_read() -> None:
    """Issue 42: a start built the subscription index from every endpoint (decoding all
    of them); now a tenant's subscriptions are indexed at its first read."""
    cat, actor, stamp = _catalog_of(50)
    loaded = _loaded(cat)
    reg = loaded.registry
    assert reg.decodes <= 1  # the tenant set (was: every state)
    stats = loaded.index.stats()
    assert stats["endpoints"] == 0 and stats["deferred_tenants"] == 50
    assert loaded.index.match("t3", "a", {"k": 3}) == ["e3"]
    assert loaded.index.match("t3", "a", {"k": 4}) == []
    assert {k for k in reg._cold} <= {k for k in reg._raw if k.startswith(("e/e3/", "t/t3/"))}
    assert loaded.index.stats()["loads"] == 1 and loaded.index.stats()["endpoints"] == 1
    # a change of a tenant not read yet is left to its first read, then derived right
    deltas = cat.registry.create_endpoint("e4b", "t4", FIELDS, ["a"], 2, actor, stamp)
    cat.apply(deltas)
    decodes = reg.decodes
    loaded.apply(deltas)
    assert loaded.index.stats()["endpoints"] == 1 and reg.decodes - decodes <= 3
    assert loaded.index.match("t4", "a", {"k": 4}) == cat.index.match("t4", "a", {"k": 4})
    assert loaded.index.match("t4", "a", {}) == ["e4b"]
    assert _derived(loaded) == _derived(cat)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_loaded_catalog_read_in_any_order_equals_one_derived_from_scratch(
    data: st.DataObject,
) -> None:
    """Changes from two regions after a restart, while some tenants are read (indexed)
    and others not yet: in the end, what the catalog derives equals a fresh one's."""
    regions = [_Region("eu:1"), _Region("us:1")]
    before = Catalog()
    for _ in range(data.draw(st.integers(0, 12))):
        deltas = data.draw(st.sampled_from(regions)).change(data)
        before.apply(deltas)
        for r in regions:
            r.reg.apply(deltas)
    catalog = _loaded(before)
    for _ in range(data.draw(st.integers(1, 15))):
        if data.draw(st.booleans()):
            tenant = data.draw(st.sampled_from(TENANTS))
            catalog.index.match(tenant, data.draw(st.sampled_from(TYPES)), {})
        else:
            catalog.apply(data.draw(st.sampled_from(regions)).change(data))
    reg = catalog.registry
    eager = SubscriptionIndex([v for t in TENANTS for v in reg.endpoints(t)])
    for t in TENANTS:
        for et in TYPES:
            for p in PAYLOADS:
                assert catalog.index.match(t, et, p) == eager.match(t, et, p)
    assert _derived(catalog) == _derived(_fresh(catalog))
