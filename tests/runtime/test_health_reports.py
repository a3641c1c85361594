"""Endpoint health reports (issue 43) over two catalogs fed the same registry writes in
different orders: the same transition gets the same id in every region, only the
reporter emits it, a region that becomes the reporter emits what the old one may have
missed, and a reset by an API change is no recovery."""

from __future__ import annotations

from typing import Any

from crdt import Timestamp
from regionsync.core.operational import operational_event_id, reporter
from regionsync.core.registry import Registry
from regionsync.runtime.health_reports import HealthReports
from regionsync.runtime.state import Catalog

EP = "ep_1"
FIELDS = {"url": "https://hooks.example.com/x", "secret": "whsec_" + "A" * 44}


class FakeOps:
    tenant = "ops"

    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, Any], str | None]] = []

    def emit(self, event_type: str, data: dict[str, Any], tenant: str | None = None, *,
             event_id: str | None = None, at_ms: int | None = None) -> None:  # fmt: skip
        self.emitted.append((event_type, data, event_id))


class FakeClock:
    def __init__(self) -> None:
        self.ms = 1_000

    def wall_ms(self) -> int:
        return self.ms


class Region:
    """A region's catalog with its health reports; ``live`` is what it does not suspect."""

    def __init__(self, name: str, clock: FakeClock) -> None:
        self.name, self.catalog, self.ops = name, Catalog(Registry()), FakeOps()
        self.live = ["a", "b"]
        ops: Any = self.ops
        self.reports = HealthReports(
            name, self.catalog, ops, clock, lambda: self.live, lambda: True, 10.0
        )
        self.reports.load()
        self.catalog.watchers.append(self.reports.changed)
        self.n = 0

    def write(self, fields: dict[str, Any]) -> dict:
        """An own change of the endpoint (as runtime/outcomes.py or an API PATCH makes)."""
        self.n += 1
        stamp = Timestamp(1_000 + self.n, 0)
        deltas = self.catalog.registry.patch_endpoint(
            EP, fields, (), (), stamp.wall_ms, f"{self.name}:1", stamp
        )
        self.catalog.apply(deltas)
        return deltas

    def types(self) -> list[str]:
        return [t for t, _, _ in self.ops.emitted]


def _pair() -> tuple[Region, Region, Region, Region, FakeClock]:
    """Regions a and b holding tenant acme and its endpoint; (reporter, other, ...)."""
    clock = FakeClock()
    a, b = Region("a", clock), Region("b", clock)
    stamp = Timestamp(1, 0)
    reg = Registry()
    deltas = reg.create_tenant("acme", "Acme", 1, "a:1", stamp)
    deltas.update(reg.create_endpoint(EP, "acme", FIELDS, (), 1, "a:1", stamp))
    for r in (a, b):
        r.catalog.apply(deltas)
    first = {"a": a, "b": b}[reporter(EP, ["a", "b"])]
    second = b if first is a else a
    return first, second, a, b, clock


def test_concurrent_failing_writes_are_one_transition_with_one_id() -> None:
    rep, other, a, b, _ = _pair()
    da = a.write({"failing_since": 5_000})  # both regions turn it failing at once
    db = b.write({"failing_since": 5_001})
    a.catalog.apply(db)
    b.catalog.apply(da)
    assert rep.types() == ["endpoint.failing"] and other.types() == []
    (_, data, event_id) = rep.ops.emitted[0]
    assert set(other.reports.unreported) == {data["transition"]}
    assert event_id == operational_event_id(data["transition"])
    assert data["from"] == "active" and data["endpoint"] == EP and data["tenant"] == "acme"


def test_the_new_reporter_emits_what_the_old_one_may_have_missed() -> None:
    rep, other, _, _, clock = _pair()
    d = other.write({"failing_since": 5_000})
    rep.catalog.apply(d)
    (_, data, event_id) = rep.ops.emitted[0]
    assert other.reports.step() == 0  # the reporter is live: it reported it
    other.live = [other.name]  # the reporter is suspected
    clock.ms += 5_000
    assert other.reports.step() == 1
    assert other.ops.emitted[0][2] == event_id  # one webhook-id: the store skips a repeat
    assert other.ops.emitted[0][1]["transition"] == data["transition"]
    assert other.reports.step() == 0  # once


def test_unreported_transitions_expire_after_the_window() -> None:
    rep, other, _, _, clock = _pair()
    rep.catalog.apply(other.write({"failing_since": 5_000}))
    clock.ms += 10_001
    other.live = [other.name]
    assert other.reports.step() == 0 and other.reports.unreported == {}


def test_recovered_only_on_a_success_not_on_a_reset() -> None:
    rep, other, _, _, _ = _pair()
    rep.catalog.apply(other.write({"failing_since": 5_000}))
    # a new url resets the health record (registry_ops.patch_endpoint): no recovery
    rep.catalog.apply(other.write({"url": "https://hooks.example.com/y", "failing_since": None}))
    # a resume of an endpoint that was not paused resets it too
    rep.catalog.apply(other.write({"failing_since": 6_000}))
    rep.catalog.apply(other.write({"paused": False, "failing_since": None}))
    assert rep.types() == ["endpoint.failing", "endpoint.failing"]
    # a success (the delivery worker clears failing_since alone): recovered
    rep.catalog.apply(other.write({"failing_since": 7_000}))
    rep.catalog.apply(other.write({"failing_since": None}))
    assert rep.types()[-2:] == ["endpoint.failing", "endpoint.recovered"]
    assert rep.ops.emitted[-1][1]["trigger"] == "success"
    ids = [data["transition"] for _, data, _ in rep.ops.emitted]
    assert len(set(ids)) == len(ids)  # every episode its own id


def test_a_hint_gives_the_reporters_own_trigger() -> None:
    rep, _, _, _, _ = _pair()
    rep.reports.hint(EP, "endpoint.disabled", "gone")
    rep.write({"disabled": True, "failing_since": None})
    assert rep.ops.emitted[-1][0] == "endpoint.disabled"
    assert rep.ops.emitted[-1][1]["trigger"] == "gone"
    assert rep.ops.emitted[-1][1]["by"] == rep.name


def test_the_operations_tenants_own_endpoints_are_not_reported() -> None:
    clock = FakeClock()
    a = Region("a", clock)
    a.live = ["a"]
    stamp = Timestamp(1, 0)
    deltas = a.catalog.registry.create_tenant("ops", "Ops", 1, "a:1", stamp)
    deltas.update(a.catalog.registry.create_endpoint(EP, "ops", FIELDS, (), 1, "a:1", stamp))
    a.catalog.apply(deltas)
    a.write({"failing_since": 5_000})
    assert a.ops.emitted == [] and a.reports.unreported == {}
