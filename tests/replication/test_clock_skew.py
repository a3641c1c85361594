"""Clock skew never stops replication (issue 41): a stamp far ahead is applied and only
clamps this node's HLC, a node behind applies its peers' records, a node whose clock its
peers find wrong says so and stamps from the cluster's reference, a restart after running
ahead does not keep the saved stamp, and the LWW bound of README "Clocks and conflicts"."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memnodes import eventually, make_node, start

from crdt import LWWRegister
from regionsync.adapters.memory_store import MemoryStore
from regionsync.config import load_settings
from regionsync.core.clock_offset import round_trip_sample
from regionsync.runtime.state import Catalog
from regionsync.runtime.writepath import WritePath

TEN_MIN = 600_000
NEVER = 10**12  # clock_suspect_ms: this node never finds its own clock wrong


def skew(node, ms: int):
    """Shift ``node``'s wall clock by ``ms`` (its monotonic clock stays right)."""
    base = node.clock.wall_ms
    node.clock.wall_ms = lambda: base() + ms  # type: ignore[method-assign]
    return node


def real_ms(node) -> int:
    return type(node.clock)().wall_ms()


async def test_records_stamped_ten_minutes_ahead_are_applied_with_later_ones(net, started) -> None:
    """The old release refused them as clock_drift, and every later record of the origin
    waited behind the first."""
    a = skew(make_node(net, "a", ["b"], clock_suspect_ms=NEVER), TEN_MIN)
    b = make_node(net, "b", ["a"])
    await start(started, a, b)
    for name in ("t1", "t2", "t3"):
        await a.registry_ops.create_tenant(name, name.upper())
    await eventually(lambda: all(b.catalog.registry.tenant(t) for t in ("t1", "t2", "t3")))
    assert b.counters["clock_drift"] >= 1 and b.counters["records_rejected"] == 0
    bound = b.clock.wall_ms() + b.settings.replication.max_drift_ms + 1
    assert b.writer.hlc.last.wall_ms <= bound  # applied, not followed
    clock = b.view.cluster()["clock"]
    assert clock["stamps_ahead_ms"]["a"] > TEN_MIN - 120_000
    await b.registry_ops.create_tenant("mine", "Mine")  # b stamps from its own clock
    assert b.writer.hlc.last.wall_ms <= real_ms(b) + b.settings.replication.clock_suspect_ms
    await eventually(lambda: a.catalog.registry.tenant("mine") is not None)


async def test_a_node_ten_minutes_behind_applies_its_peers_records(net, started) -> None:
    a = make_node(net, "a", ["b"])
    b = skew(make_node(net, "b", ["a"]), -TEN_MIN)
    await start(started, a, b)
    await a.registry_ops.create_tenant("acme", "Acme")
    await b.registry_ops.create_tenant("beta", "Beta")
    await eventually(lambda: b.catalog.registry.tenant("acme") is not None)
    await eventually(lambda: a.catalog.registry.tenant("beta") is not None)
    assert b.counters["records_rejected"] == 0 and a.counters["records_rejected"] == 0


async def test_a_clock_ten_minutes_ahead_of_two_peers_is_loud_and_corrected(net, started) -> None:
    ops = {"operational_webhooks": {"tenant": "ops"}}
    a = skew(make_node(net, "a", ["b", "c"], extra=ops), TEN_MIN)
    b, c = make_node(net, "b", ["a", "c"], extra=ops), make_node(net, "c", ["a", "b"], extra=ops)
    emitted: list[tuple[str, str, dict]] = []
    for n in (a, b, c):
        n.ops.emit = lambda t, d, tenant=None, r=n.region: emitted.append((r, t, dict(d)))
    await start(started, a, b, c)
    await eventually(lambda: a.writer.clock_view.status == "suspect")
    view = a.view.cluster()["clock"]
    assert view["status"] == "suspect" and abs(view["error_ms"] - TEN_MIN) < 2_000
    assert abs(view["offsets_ms"]["b"] + TEN_MIN) < 2_000 and view["reference"] != "a"
    await eventually(lambda: len(b.writer.clock_view.offsets) == 2)
    assert b.view.cluster()["clock"]["status"] == "ok"
    assert abs(b.view.cluster()["clock"]["offsets_ms"]["a"] - TEN_MIN) < 2_000
    # a stamps from the cluster's time, not its own
    await a.registry_ops.create_tenant("acme", "Acme")
    assert abs(a.writer.hlc.last.wall_ms - real_ms(a)) < 3_000
    await eventually(lambda: c.catalog.registry.tenant("acme") is not None)
    skewed = [(r, d) for r, t, d in emitted if t == "region.clock_skewed"]
    assert [r for r, _ in skewed] == ["a"]  # once, by the region whose clock is off
    assert abs(skewed[0][1]["error_ms"] - TEN_MIN) < 2_000


async def test_restart_after_running_ahead_stamps_from_the_right_clock(net, started) -> None:
    """The old release resumed the saved stamp and stayed ten minutes ahead (and refused)."""
    store_a = MemoryStore()
    a = skew(make_node(net, "a", ["b"], store_a, clock_suspect_ms=NEVER), TEN_MIN)
    b = make_node(net, "b", ["a"])
    await start(started, a, b)
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: b.catalog.registry.tenant("acme") is not None)
    await a.stop()
    (a2,) = await start(started, make_node(net, "a", ["b"], store_a))  # clock fixed
    await a2.writer.actor_checked.wait()
    await a2.registry_ops.patch_tenant("acme", {"name": "Acme 2"})
    assert a2.writer.hlc.last.wall_ms <= real_ms(a2) + 1_000
    assert a2.writer.hlc_rebases == 1
    # causally later, so it wins over the saved stamp ten minutes ahead
    await eventually(lambda: b.catalog.registry.tenant("acme").name == "Acme 2")
    assert b.counters["records_rejected"] == 0


async def test_restart_while_ten_minutes_ahead_corrects_before_writing(net, started) -> None:
    """A region restarted with its clock still ten minutes ahead: the actor check holds
    its writes until its peers' Hellos, which carry their clocks, so its first write is
    already stamped from the cluster's time; replication both ways goes on."""
    store_a = MemoryStore()
    a = skew(make_node(net, "a", ["b", "c"], store_a), TEN_MIN)
    b, c = make_node(net, "b", ["a", "c"]), make_node(net, "c", ["a", "b"])
    await start(started, a, b, c)
    await eventually(lambda: a.writer.clock_view.status == "suspect")
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: c.catalog.registry.tenant("acme") is not None)
    await a.stop()
    a2 = skew(make_node(net, "a", ["b", "c"], store_a), TEN_MIN)
    await start(started, a2)
    await a2.registry_ops.patch_tenant("acme", {"name": "Acme 2"})
    assert a2.writer.clock_view.status == "suspect"
    assert abs(a2.writer.hlc.last.wall_ms - real_ms(a2)) < 3_000
    await b.registry_ops.create_tenant("beta", "Beta")
    await eventually(lambda: b.catalog.registry.tenant("acme").name == "Acme 2")
    await eventually(lambda: a2.catalog.registry.tenant("beta") is not None)
    assert all(n.counters["records_rejected"] == 0 for n in (a2, b, c))


# -- the guarantee: README "Clocks and conflicts" -----------------------------------------


class _Clock:
    def __init__(self, now: list[int], skew_ms: int):
        self.now, self.skew = now, skew_ms

    def wall_ms(self) -> int:
        return self.now[0] + self.skew


def _regions(skews: list[int], delays: list[tuple[int, int]], now: list[int]):
    paths = []
    for i, s in enumerate(skews):
        st_ = load_settings(None, region=f"r{i}")
        w = WritePath(st_, None, _Clock(now, s), Catalog())  # type: ignore[arg-type]
        w.actor = f"r{i}:1"
        paths.append(w)
    for i, w in enumerate(paths):  # each exchanged a Hello with every peer
        for j, peer in enumerate(paths):
            if i != j:
                d1, d2 = delays[(i * len(paths) + j) % len(delays)]
                sent = w.clock.wall_ms()
                remote = peer.clock.wall_ms() + d1
                sample = round_trip_sample(remote, sent, sent + d1 + d2)
                w.peer_clock(f"r{j}", sample)
    return paths


def bound_ms(s) -> int:
    """The README's bound: 3 x clock_suspect_ms + one round trip (here at most 400 ms)."""
    return 3 * s.replication.clock_suspect_ms + 400


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(-TEN_MIN, TEN_MIN), min_size=3, max_size=5),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200)), min_size=1, max_size=8),
    st.integers(0, 4), st.integers(0, 4), st.integers(0, 60_000), st.booleans(),
)  # fmt: skip
def test_a_concurrent_write_never_wins_over_one_made_the_bound_later(
    skews: list[int], delays, first: int, second: int, pushed: int, rogue: bool
) -> None:
    """Two concurrent writes, W1 by one region and W2 by another made ``bound_ms`` later
    on the cluster's reference clock: W2 wins, whatever the clocks (each region heard
    its peers) as long as a majority of them agree (within 1 s here; README: without
    a majority no region corrects itself), even when W1's region had just observed a
    stamp ``pushed`` ms ahead or a rogue stamp ten minutes ahead."""
    majority = len(skews) // 2 + 1
    skews = [skews[0] + s % 1_000 for s in skews[:majority]] + skews[majority:]
    now = [1_700_000_000_000]
    paths = _regions(skews, delays, now)
    one, two = paths[first % len(paths)], paths[second % len(paths)]
    if one is two:
        return
    ref = -one.clock_view.error_ms + one.clock.skew  # the reference's skew to real time
    ahead = TEN_MIN if rogue else pushed
    one.hlc.observe_parts(one.physical_ms() + ahead, 0, one.physical_ms(), clamp=True)
    w1 = LWWRegister().set("one", actor=one.actor, stamp=one.stamp())
    now[0] += bound_ms(one.settings)
    assert abs(-two.clock_view.error_ms + two.clock.skew - ref) <= 400  # the same reference
    w2 = LWWRegister().set("two", actor=two.actor, stamp=two.stamp())
    assert w1.merge(w2).value() == "two" == w2.merge(w1).value()


def test_the_bound_is_tight_enough_to_bite() -> None:
    """Without the correction (the old stamps: the region's own clock), a region ten
    minutes ahead wins over a write made a bound later: the test above would fail."""
    now = [1_700_000_000_000]
    one, two, _ = _regions([TEN_MIN, 0, 0], [(10, 10)], now)
    assert one.clock_view.status == "suspect"
    old = one.hlc.now(one.clock.wall_ms())  # what the previous release stamped
    now[0] += bound_ms(one.settings)
    assert old > two.stamp()


@pytest.mark.parametrize("status", ["ok", "suspect"])
def test_stamps_follow_the_reference_within_the_suspect_threshold(status: str) -> None:
    now = [1_700_000_000_000]
    lead = 10_000 if status == "suspect" else 1_000
    one, *_ = _regions([lead, 0, 0], [(5, 5)], now)
    assert one.clock_view.status == status
    assert abs(one.stamp().wall_ms - now[0]) <= one.settings.replication.clock_suspect_ms


def test_two_regions_that_disagree_keep_their_own_clocks() -> None:
    """README: with two regions a majority is both; ten minutes apart, neither follows
    the other (no region finds its clock wrong on one peer's word) and the LWW bound
    is the skew itself."""
    now = [1_700_000_000_000]
    one, two = _regions([TEN_MIN, 0], [(10, 10)], now)
    for w in (one, two):
        assert (w.clock_view.status, w.clock_view.correction_ms) == ("ok", 0)
        assert w.clock_view.reference is None
    assert one.stamp().wall_ms - two.stamp().wall_ms >= TEN_MIN - 1_000
