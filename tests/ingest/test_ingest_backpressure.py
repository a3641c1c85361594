"""The backpressure controller as a table, smoothing, and event type priorities."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from regionsync.config import load_settings
from regionsync.core.backpressure import (
    Pressure,
    admit,
    observe,
    priority_for,
    tenant_backlog_limit,
    tenant_retry_after,
)
from regionsync.runtime.state import DeliveryQueue


def at(s: float, raw: float | None = None) -> Pressure:
    return Pressure(raw if raw is not None else s, s, 0.0)


@pytest.mark.parametrize(
    ("s", "raw", "priority", "status"),
    [
        (0.00, None, "low", 202),
        (0.74, None, "low", 202),
        (0.75, None, "low", 429),
        (0.75, None, "normal", 202),
        (0.75, None, "high", 202),
        (0.75, None, "critical", 202),
        (0.89, None, "low", 429),
        (0.89, None, "normal", 202),
        (0.90, None, "normal", 429),
        (0.90, None, "high", 429),
        (0.90, None, "low", 429),
        (0.90, None, "critical", 202),
        (0.99, None, "critical", 202),
        (0.99, 1.0, "critical", 503),  # the hard limit uses the raw reading
        (0.50, 1.2, "normal", 503),
        (1.50, 1.5, "critical", 503),
    ],
)
def test_admission_table(s: float, raw: float | None, priority: str, status: int) -> None:
    decision = admit(at(s, raw), priority, 0.0)
    assert decision.status == status
    assert (decision.retry_after_s is None) == (status == 202)


def test_retry_after_grows_with_saturation_and_is_jittered() -> None:
    low = admit(at(0.76), "low", 0.0).retry_after_s
    mid = admit(at(0.85), "low", 0.0).retry_after_s
    high = admit(at(0.95), "normal", 0.0).retry_after_s
    assert low is not None and mid is not None and high is not None
    assert 1 <= low < mid < high <= 30
    spread = {admit(at(0.85), "low", j).retry_after_s for j in (-1.0, 0.0, 1.0)}
    assert len(spread) == 3
    assert all(1 <= r <= 36 for r in spread)  # type: ignore[operator]


def test_states() -> None:
    assert at(0.1).state == "accepting"
    assert at(0.8).state == "shedding"
    assert at(0.95).state == "critical_only"
    assert at(0.5, 1.0).state == "overloaded"


def test_observe_smooths_over_time() -> None:
    p = observe(None, backlog=0, queued=0, capacity=100, now_s=0.0, tau_s=2.0)
    assert p.smoothed == 0.0
    p = observe(p, backlog=100, queued=0, capacity=100, now_s=0.1, tau_s=2.0)
    assert p.raw == 1.0 and 0.0 < p.smoothed < 0.1  # a spike moves S only a little
    for t in range(1, 30):
        p = observe(p, backlog=80, queued=0, capacity=100, now_s=float(t), tau_s=2.0)
    assert abs(p.smoothed - 0.8) < 0.01  # a sustained level is reached
    assert observe(None, 50, 25, 100, 0.0, 0.0).smoothed == 0.75  # queue counts too


@pytest.mark.parametrize(
    ("kw", "error"),
    [({"capacity": 0}, ValueError), ({"tau_s": -1.0}, ValueError)],
)
def test_observe_rejects_bad_parameters(kw: dict, error: type) -> None:
    args = {"prev": None, "backlog": 1, "queued": 0, "capacity": 10, "now_s": 0.0, "tau_s": 1.0}
    with pytest.raises(error):
        observe(**{**args, **kw})


def test_admit_rejects_unknown_priority_and_jitter() -> None:
    with pytest.raises(ValueError):
        admit(at(0.1), "urgent", 0.0)
    with pytest.raises(ValueError):
        admit(at(0.1), "low", 1.5)


def test_priority_rules() -> None:
    rules = {"invoice.paid": "critical", "invoice.*": "high", "*": "low", "a.b.*": "normal"}
    assert priority_for("invoice.paid", rules) == "critical"
    assert priority_for("invoice.created", rules) == "high"
    assert priority_for("a.b.c", rules) == "normal"
    assert priority_for("other", rules) == "low"
    assert priority_for("other", {}) == "normal"


@pytest.mark.parametrize(
    ("capacity", "share", "limit"),
    [(300, 0.5, 150), (100_000, 0.5, 50_000), (10, 1.0, None), (3, 0.1, 1), (1, 0.5, 1)],
)
def test_tenant_backlog_limit(capacity: int, share: float, limit: int | None) -> None:
    assert tenant_backlog_limit(capacity, share) == limit


def test_tenant_retry_after_is_the_longest_jittered() -> None:
    assert tenant_retry_after(0.0) == 30
    assert {tenant_retry_after(j) for j in (-1.0, 1.0)} == {24, 36}
    with pytest.raises(ValueError):
        tenant_retry_after(1.5)


def test_queue_counts_per_tenant() -> None:
    q = DeliveryQueue(tenant_limit=3)
    q.count("a", 2)
    q.count("b", 1)
    assert (q.backlog, q.tenant_backlog) == (3, {"a": 2, "b": 1})
    assert q.tenant_room("a") == 1 and not q.tenant_full("a")
    q.count("a", 1)
    assert q.tenant_full("a") and q.tenant_room("a") == 0 and not q.tenant_full("b")
    q.count("b", -1)
    assert q.tenant_backlog == {"a": 3}  # a tenant at 0 is dropped
    q.recount(7, {"a": 0, "c": 7})
    assert (q.backlog, q.tenant_backlog) == (7, {"c": 7}) and q.tenant_full("c")
    assert DeliveryQueue().tenant_room("a") is None and not DeliveryQueue().tenant_full("a")


@pytest.mark.parametrize("share", [0, -0.5, 1.01])
def test_tenant_backlog_share_is_checked(share: float) -> None:
    with pytest.raises(ValidationError, match="tenant_backlog_share"):
        load_settings(None, region="a", ingest={"tenant_backlog_share": share})
