"""The per-tenant cap on attempts in flight (core.lanes, issue 14): the pure decision."""

from __future__ import annotations

from collections import Counter

import pytest

from regionsync.core import invariants
from regionsync.core.invariants import InvariantViolation
from regionsync.core.lanes import TenantSlots, tenant_cap


def test_cap_is_the_override_else_the_default_and_at_least_one() -> None:
    assert tenant_cap(32, None) == 32
    assert tenant_cap(32, 4) == 4
    assert tenant_cap(32, 100) == 100  # an override may exceed the default
    assert tenant_cap(0, None) == 1 and tenant_cap(32, 0) == 1


def test_admit_up_to_the_cap_and_release() -> None:
    s = TenantSlots()
    assert [s.admit("noisy", 2) for _ in range(3)] == [True, True, False]
    assert s.full("noisy", 2) and not s.full("noisy", 3)
    assert s.admit("quiet", 2) and not s.full("quiet", 2)  # one tenant's share is its own
    s.release("noisy")
    assert not s.full("noisy", 2) and s.admit("noisy", 2)
    s.release("quiet")
    assert "quiet" not in s.inflight and s.inflight == {"noisy": 2}  # at 0: forgotten


def test_a_release_without_an_admit_breaks_an_invariant(violations: Counter[str]) -> None:
    s = TenantSlots()
    s.admit("quiet", 2)
    s.release("quiet")
    with pytest.raises(InvariantViolation, match="'quiet' released with no attempt"):
        s.release("quiet")  # the tests' mode (tests/conftest.py)
    invariants.set_mode("log")
    try:
        s.release("quiet")  # production's: noted, and the count stays at 0
    finally:
        invariants.set_mode("raise")
    assert "quiet" not in s.inflight
    assert violations == {"tenant %r released with no attempt in flight": 2}


def test_saturated_names_the_tenants_at_their_own_caps() -> None:
    s = TenantSlots()
    for tenant, n in (("a", 3), ("b", 1), ("c", 2)):
        for _ in range(n):
            s.admit(tenant, 10)
    caps = {"a": 3, "b": 5, "c": 2}
    assert s.saturated(caps.__getitem__) == ["a", "c"]
    s.release("a")
    assert s.saturated(caps.__getitem__) == ["c"]
    assert TenantSlots().saturated(caps.__getitem__) == []
