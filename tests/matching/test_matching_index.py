"""SubscriptionIndex: patterns, candidates, filters, and the negative-lookup cache with
precise invalidation; a hypothesis run against a linear scan of the views."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regionsync.core.filters import reference_match
from regionsync.core.matching import SubscriptionIndex, check_event_pattern, pattern_matches
from regionsync.core.registry import EndpointView
from regionsync.errors import Unprocessable


def view(
    eid: str,
    tenant: str = "A",
    types: tuple[str, ...] = (),
    flt: Any = None,
    paused: bool = False,
    disabled: bool = False,
) -> EndpointView:
    return EndpointView(
        id=eid,
        tenant=tenant,
        url="https://example.com/hook",
        event_types=types,
        filter=flt,
        description="",
        rate_limit_per_s=50,
        max_in_flight=16,
        headers={},
        paused=paused,
        disabled=disabled,
        secret="",
        created_at_ms=0,
        updated_at_ms=0,
    )


@pytest.mark.parametrize(
    ("pattern", "event_type", "matches"),
    [
        ("*", "anything", True),
        ("issues.*", "issues.opened", True),
        ("issues.*", "issues.label.added", True),
        ("issues.*", "issues", False),
        ("issues.*", "issues_comment.created", False),
        ("issues.opened", "issues.opened", True),
        ("issues.opened", "issues.opened.x", False),
        ("push", "push", True),
    ],
)
def test_pattern_matches(pattern: str, event_type: str, matches: bool) -> None:
    check_event_pattern(pattern)
    assert pattern_matches(pattern, event_type) is matches
    idx = SubscriptionIndex([view("ep_1", types=(pattern,))])
    assert idx.candidates("A", event_type) == (["ep_1"] if matches else [])


@pytest.mark.parametrize("bad", ["", "*.x", "a*", "issues.*.*", ".*", "a b", "x" * 129, 7, None])
def test_bad_patterns_are_422(bad: Any) -> None:
    with pytest.raises(Unprocessable):
        check_event_pattern(bad, "event_types[0]")
    with pytest.raises(Unprocessable):
        SubscriptionIndex([view("ep_1", types=(bad,))])


def test_candidates_and_match() -> None:
    idx = SubscriptionIndex(
        [
            view("ep_all"),
            view("ep_star", types=("*",)),
            view("ep_exact", types=("issues.opened", "push")),
            view("ep_prefix", types=("issues.*",)),
            view("ep_foo", types=("issues.opened",), flt={"project.key": "FOO"}),
            view("ep_other_tenant", tenant="B", types=("issues.opened",)),
            view("ep_paused", types=("push",), paused=True),
        ]
    )
    assert idx.candidates("A", "issues.opened") == [
        "ep_all",
        "ep_exact",
        "ep_foo",
        "ep_prefix",
        "ep_star",
    ]
    assert idx.candidates("A", "push") == ["ep_all", "ep_exact", "ep_paused", "ep_star"]
    assert idx.candidates("C", "push") == []
    payload = {"project": {"key": "BAR"}}
    assert "ep_foo" not in idx.match("A", "issues.opened", payload)
    assert "ep_foo" in idx.match("A", "issues.opened", {"project": {"key": "FOO"}})
    assert idx.match("B", "issues.opened", None) == ["ep_other_tenant"]
    assert len(idx) == 7 and "ep_foo" in idx


def test_upsert_replaces_patterns_and_filter_and_remove_forgets() -> None:
    idx = SubscriptionIndex([view("ep_1", types=("push",), flt={"a": 1})])
    assert idx.compilations == 1
    idx.upsert(view("ep_1", types=("push",), flt={"a": 1}, paused=True))
    assert idx.compilations == 1  # same filter: not recompiled
    idx.upsert(view("ep_1", types=("push",), flt={"a": True}))
    assert idx.compilations == 2  # true is not 1: recompiled
    assert idx.match("A", "push", {"a": 1}) == []
    assert idx.match("A", "push", {"a": True}) == ["ep_1"]
    idx.upsert(view("ep_1", types=("issues.*",), flt={"a": True}))
    assert idx.candidates("A", "push") == []
    assert idx.candidates("A", "issues.closed") == ["ep_1"]
    idx.upsert(view("ep_1", tenant="B", types=("issues.*",), flt={"a": True}))
    assert idx.candidates("A", "issues.closed") == []
    assert idx.candidates("B", "issues.closed") == ["ep_1"]
    idx.remove("ep_1")
    idx.remove("ep_unknown")
    assert idx.candidates("B", "issues.closed") == [] and len(idx) == 0
    assert idx.stats()["tenants"] == 0


def test_invalid_upsert_changes_nothing() -> None:
    idx = SubscriptionIndex([view("ep_1", types=("push",))])
    with pytest.raises(Unprocessable) as info:
        idx.upsert(view("ep_1", types=("push",), flt={"a": {"$regex": "x"}}))
    assert info.value.field == "filter.a.$regex"
    assert idx.match("A", "push", {}) == ["ep_1"]


def _warm(idx: SubscriptionIndex) -> None:
    for tenant in ("A", "B"):
        for event_type in ("X", "Y", "issues.opened", "issues.closed", "push"):
            idx.candidates(tenant, event_type)


def test_negative_cache_hits_and_misses() -> None:
    idx = SubscriptionIndex([view("ep_c", tenant="C", types=("push",))])
    assert idx.candidates("A", "X") == []
    assert (idx.hits, idx.misses) == (0, 1)
    assert idx.match("A", "X", {"big": "payload"}) == []
    assert (idx.hits, idx.misses) == (1, 1)
    assert idx.candidates("C", "push") == ["ep_c"]  # positive answers are never cached
    assert idx.candidates("C", "push") == ["ep_c"]
    assert (idx.hits, idx.misses) == (1, 3)
    assert idx.negative_entries == 1


def test_exact_subscription_invalidates_exactly_that_entry() -> None:
    idx = SubscriptionIndex()
    _warm(idx)
    assert idx.negative_entries == 10
    idx.upsert(view("ep_1", tenant="A", types=("X",)))
    assert idx.invalidations == 1
    assert not idx.is_cached_negative("A", "X")
    for tenant, event_type in [("A", "Y"), ("A", "push"), ("B", "X"), ("B", "Y")]:
        assert idx.is_cached_negative(tenant, event_type)
    assert idx.candidates("A", "X") == ["ep_1"]


def test_prefix_subscription_invalidates_the_matching_entries_of_the_tenant() -> None:
    idx = SubscriptionIndex()
    _warm(idx)
    idx.upsert(view("ep_1", tenant="A", types=("issues.*",)))
    assert idx.invalidations == 2
    assert not idx.is_cached_negative("A", "issues.opened")
    assert not idx.is_cached_negative("A", "issues.closed")
    assert idx.is_cached_negative("A", "X") and idx.is_cached_negative("B", "issues.opened")


@pytest.mark.parametrize("types", [(), ("*",), ("X", "*")])
def test_wildcard_subscription_invalidates_the_tenants_entries_only(
    types: tuple[str, ...],
) -> None:
    idx = SubscriptionIndex()
    _warm(idx)
    idx.upsert(view("ep_1", tenant="A", types=types))
    assert idx.invalidations == 5
    assert not any(idx.is_cached_negative("A", t) for t in ("X", "Y", "push"))
    assert all(idx.is_cached_negative("B", t) for t in ("X", "Y", "issues.opened", "push"))


def test_changes_that_cannot_create_subscribers_invalidate_nothing() -> None:
    idx = SubscriptionIndex([view("ep_1", tenant="A", types=("X", "Y"), flt={"a": 1})])
    idx.remove("ep_1")
    _warm(idx)
    idx.upsert(view("ep_2", tenant="A", types=("Z",)))  # unrelated type
    idx.upsert(replace(view("ep_2", tenant="A", types=("Z",)), filter={"b": 2}))  # filter only
    idx.upsert(view("ep_2", tenant="A", types=("Z",), paused=True))  # state only
    idx.remove("ep_2")
    assert idx.invalidations == 0
    assert idx.negative_entries == 10


def test_moving_an_endpoint_keeps_only_new_patterns_invalidating() -> None:
    idx = SubscriptionIndex([view("ep_1", tenant="A", types=("X",))])
    _warm(idx)  # (A, X) is positive, not cached
    idx.upsert(view("ep_1", tenant="A", types=("X", "Y")))
    assert idx.invalidations == 1 and not idx.is_cached_negative("A", "Y")
    idx.upsert(view("ep_1", tenant="B", types=("X", "Y")))
    assert not idx.is_cached_negative("B", "X") and not idx.is_cached_negative("B", "Y")
    assert idx.invalidations == 3


def test_negative_cache_is_bounded_oldest_first() -> None:
    idx = SubscriptionIndex(max_negative=3)
    for event_type in ("a", "b", "c", "d"):
        idx.candidates("A", event_type)
    assert idx.negative_entries == 3 and idx.evictions == 1
    assert not idx.is_cached_negative("A", "a") and idx.is_cached_negative("A", "d")
    with pytest.raises(ValueError):
        SubscriptionIndex(max_negative=0)


# -- model check: index + cache == linear scan of the views, under random changes ----------

TENANTS = st.sampled_from(["A", "B"])
TYPES = ["X", "Y", "issues.opened", "issues.closed", "issues.label.added", "push"]
PATTERNS = st.sampled_from(["X", "Y", "issues.*", "issues.label.*", "issues.opened", "*"])
FILTERS = st.sampled_from([None, {"a": 1}, {"a": {"$neq": 1}}, {"$or": [{"a": 2}, {"b": 1}]}])
IDS = st.sampled_from(["ep_1", "ep_2", "ep_3", "ep_4"])
OPS = st.one_of(
    st.tuples(
        st.just("upsert"),
        IDS,
        TENANTS,
        st.lists(PATTERNS, max_size=3).map(tuple),
        FILTERS,
    ),
    st.tuples(st.just("remove"), IDS),
    st.tuples(
        st.just("match"),
        TENANTS,
        st.sampled_from(TYPES),
        st.sampled_from([{}, {"a": 1}, {"a": 2}, {"b": 1}]),
    ),
)


@settings(derandomize=True, database=None, deadline=None, max_examples=300)
@given(ops=st.lists(OPS, max_size=40), max_negative=st.sampled_from([2, 100]))
def test_index_agrees_with_a_linear_scan(ops: list[tuple[Any, ...]], max_negative: int) -> None:
    idx = SubscriptionIndex(max_negative=max_negative)
    views: dict[str, EndpointView] = {}
    for op in ops:
        if op[0] == "upsert":
            _, eid, tenant, types, flt = op
            views[eid] = view(eid, tenant=tenant, types=types, flt=flt)
            idx.upsert(views[eid])
        elif op[0] == "remove":
            views.pop(op[1], None)
            idx.remove(op[1])
        else:
            _, tenant, event_type, payload = op
            expected = sorted(
                v.id
                for v in views.values()
                if v.tenant == tenant
                and (
                    not v.event_types or any(pattern_matches(p, event_type) for p in v.event_types)
                )
                and reference_match(v.filter, payload)
            )
            assert idx.match(tenant, event_type, payload) == expected
        assert idx.negative_entries <= max_negative


def test_filters_applied_ahead_are_used_unless_the_filter_changed_since() -> None:
    """Ingest applies the filters before the write lock (off the event loop) and hands
    the verdicts to ``match``; one whose endpoint's filter changed since is judged again."""
    idx = SubscriptionIndex([view("ep_f", types=("*",), flt={"k": 1}), view("ep_all")])
    filters = idx.filtered("A", "x")
    assert list(filters) == ["ep_f"]  # the endpoint without a filter takes everything
    verdicts = {eid: (predicate, predicate({"k": 1})) for eid, predicate in filters.items()}
    assert idx.match("A", "x", None, verdicts) == ["ep_all", "ep_f"]  # the verdict counts
    idx.upsert(view("ep_f", types=("*",), flt={"k": 2}))  # changed meanwhile
    assert idx.match("A", "x", {"k": 1}, verdicts) == ["ep_all"]
    assert idx.filtered("B", "x") == {} and idx.filtered("A", "x").keys() == {"ep_f"}
