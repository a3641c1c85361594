"""The checkers catch a wrong merge: one region's registry merges OR-Set removes wrongly
(injected through a Node subclass; crdt/ and core/ untouched) and the run must fail; so
do a node that never fails over, one that merges records its HLC refused, and regions
whose endpoint ids collide across tenants (the owner checker)."""

from __future__ import annotations

from collections.abc import Mapping

from tests_sim_paths import SCENARIOS

from crdt import CRDT, LWWRegister, ORSet, Timestamp
from regionsync.core.model import Delivery, Record, WriteBatch
from regionsync.core.records import Decoded
from regionsync.core.registry import Registry
from regionsync.errors import MalformedRecord
from regionsync.runtime.node import Node
from sim import load_scenario, run
from sim._check import _lww
from sim._workload import Op


class RemoveWinsRegistry(Registry):
    """OR-Sets that prefer removes: once an element left a set here, it never comes back
    (a two-phase set), whatever concurrent or later adds say."""

    def __init__(self, states: Mapping[str, CRDT] | None = None, digest: int | None = None):
        super().__init__(states, digest)
        self.removed: set[tuple[str, object]] = set()

    def apply(self, deltas: Mapping[str, CRDT]) -> dict[str, CRDT]:
        before = {
            k: v.value() for k, v in self._states.items() if k in deltas and isinstance(v, ORSet)
        }
        changed = super().apply(deltas)
        for key in deltas:
            state = self._states.get(key)
            if not isinstance(state, ORSet):
                continue
            self.removed |= {(key, e) for e in before.get(key, frozenset()) - state.value()}
            for e in sorted(state.value(), key=str):
                if (key, e) in self.removed:
                    changed.update(super().apply({key: self._states[key].remove(e)}))  # type: ignore[attr-defined]
        return changed


class RemoveWinsNode(Node):
    async def start(self) -> None:
        await super().start()
        self.catalog.registry = RemoveWinsRegistry.from_bytes(await self.store.load_registry())


def test_wrong_orset_merge_is_reported() -> None:
    opts = load_scenario(SCENARIOS / "partition-heal.toml", seed=1)
    assert run(opts).ok
    res = run(opts, node_classes={"us-east": RemoveWinsNode})
    kinds = {v.kind for v in res.violations}
    assert not res.ok
    # us-east diverges from everyone else; state digests may then spread its wrong merge
    # (repaired into agreement), which the add-wins checkers report instead (a tenant
    # deleted and created again stays removed: lost_update)
    assert kinds & {"convergence", "add_wins", "lost_update"}, res.violations


class CountingIds:
    """Endpoint ids ``ep_1``, ``ep_2``, ... in every region alike: what caller-chosen ids
    allowed, two tenants creating one id in two regions at once."""

    def __init__(self) -> None:
        self.n = 0

    def new(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n}"


class CollidingIdsNode(Node):
    async def start(self) -> None:
        await super().start()
        self.registry_ops.ids = CountingIds()


def test_endpoint_of_two_tenants_is_reported() -> None:
    opts = load_scenario(SCENARIOS / "partition-heal.toml", seed=2)
    assert run(opts).ok
    names = ("eu-west", "us-east", "ap-south")
    res = run(opts, node_classes={n: CollidingIdsNode for n in names})
    owner = [v.detail for v in res.violations if v.kind == "owner"]
    # one endpoint id holds the other tenant's owner write (and its description, url)
    assert any("holds tenant" in d and "url" in d for d in owner), res.violations


class NoFailoverNode(Node):
    """A node that never delivers another region's deliveries (no adoption)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        claimable = self.custody.claimable
        self.custody.claimable = lambda: {  # type: ignore[method-assign]
            o: r for o, r in claimable().items() if o == self.region
        }


def test_missing_failover_is_reported() -> None:
    opts = load_scenario(SCENARIOS / "failover-origin-dies.toml", seed=1)
    assert run(opts).ok
    names = ("eu-west", "us-east", "ap-south", "us-west", "eu-north")
    res = run(opts, node_classes=dict.fromkeys(names, NoFailoverNode))
    assert "lost_delivery" in {v.kind for v in res.violations}, res.violations


class RefusingDriftNode(Node):
    """A node that refuses records stamped past max_drift_ms (the release before issue 41)
    instead of merging them with a clamped HLC."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        replica, apply_one = self.replica, self.replica._apply_one

        def strict(
            r: Record,
            decoded: Decoded | str,
            batch: WriteBatch,
            deliveries: dict[str, Delivery],
            stored: dict[str, Delivery],
        ) -> None:
            now = replica.writer.physical_ms()
            if r.hlc[0] - now > replica.settings.replication.max_drift_ms:
                raise MalformedRecord(r.origin, r.seq, "clock_drift: refused")
            apply_one(r, decoded, batch, deliveries, stored)

        replica._apply_one = strict  # type: ignore[method-assign]


def test_refused_far_ahead_record_is_reported() -> None:
    opts = load_scenario(SCENARIOS / "edge-records.toml", seed=1)
    assert run(opts).ok
    names = ("eu-west", "us-east", "ap-south")
    res = run(opts, node_classes=dict.fromkeys(names, RefusingDriftNode))
    assert "edges" in {v.kind for v in res.violations}, res.violations


class StallingNode(Node):
    """A node that stops an origin at a record it cannot decode, as before issue 41: the
    record and every later one of its origin wait in ``held`` for good."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        refuse = self.replica._refuse

        def hold(exc: MalformedRecord) -> bool:
            refuse(exc)
            return False  # never moves past it

        self.replica._refuse = hold  # type: ignore[method-assign]


def test_a_stall_behind_a_refused_record_is_reported() -> None:
    opts = load_scenario(SCENARIOS / "edge-records.toml", seed=1)
    names = ("eu-west", "us-east", "ap-south")
    res = run(opts, node_classes=dict.fromkeys(names, StallingNode))
    kinds = {v.kind for v in res.violations}
    assert "stall" in kinds and "edges" in kinds, res.violations


def _write(op_id: int, region: str, t: float, stamp_ms: int) -> tuple[Op, LWWRegister]:
    op = Op(op_id, region, "patch_description", {"description": f"d{op_id}"}, t, "ok", t + 0.1)
    op.actor, op.vv_before, op.vv_after = f"{region}:1", {}, {f"{region}:1": 1}
    reg = LWWRegister().set(f"d{op_id}", actor=op.actor, stamp=Timestamp(stamp_ms, 0))
    return op, reg


def test_skew_advanced_lww_winner_is_reported() -> None:
    """Two concurrent writes 20 s apart: the first, stamped ten minutes ahead, wins; past
    lww_bound_s that is a violation, within it (or without the bound) it is not."""
    early, r1 = _write(1, "a", 10.0, 1_000_600_000)
    late, r2 = _write(2, "b", 30.0, 1_000_020_000)
    reg = r1.merge(r2)
    assert reg.value() == "d1"
    assert [v.kind for v in _lww("e", reg, [early, late], 6.5)] == ["lww_skew"]
    assert _lww("e", reg, [early, late], 25.0) == []
    assert _lww("e", reg, [early, late]) == []
    fair = r1.merge(_write(2, "b", 30.0, 1_000_630_000)[1])  # the later write wins
    assert _lww("e", fair, [early, late], 6.5) == []


def test_ungated_rolling_upgrade_is_reported() -> None:
    """Upgraded nodes that write the new forms before every region reads them (no
    gating, no downgrade on send) are refused by the regions still on the previous
    release: check_refusals fails the run; the same run gated passes."""
    opts = load_scenario(SCENARIOS / "rolling-upgrade.toml", seed=1)
    assert run(opts).ok
    opts.force_new_form = True
    res = run(opts)
    assert {v.kind for v in res.violations} == {"refused"}, res.violations


class NoFenceNode(Node):
    """A node that never fences itself by lease (what e5ef9b5 did): a cut-off region
    keeps delivering beside the regions that adopted its deliveries."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.custody.fencing = False


def test_duplicates_outside_the_window_are_reported() -> None:
    opts = load_scenario(SCENARIOS / "failover-cut-off.toml", seed=2)
    assert run(opts).ok
    names = ("eu-west", "us-east", "ap-south", "us-west")
    res = run(opts, node_classes=dict.fromkeys(names, NoFenceNode))
    assert "duplicate_window" in {v.kind for v in res.violations}, res.violations


def test_a_lapse_counted_from_the_last_message_heard_is_in_the_window() -> None:
    """failover-flapping seed 15: us-east last heard a peer 6 s before an 89.4 s cut, so
    its fence lapsed before the heal (lease 30 s + hold 60 s from the last message) and
    it sent deliveries a survivor had sent: within the stated window. A cut too short
    for a lapse leaves no such window."""
    from types import SimpleNamespace

    from sim._check_faults import check_duplicate_window, duplicate_windows

    repl = SimpleNamespace(failover_after_s=60.0, fence_margin=30.0, fence_hold=60.0,
                           heartbeat_s=10.0, custody_interval_s=5.0)  # fmt: skip

    def receipt(at: float) -> SimpleNamespace:
        return SimpleNamespace(status=204, path="/hook/t1-e2/5", webhook_id="evt_1", at=at)

    twice = [receipt(236.6), receipt(255.0)]  # a survivor's, then the lapsed region's
    assert check_duplicate_window(twice, duplicate_windows([(170.8, 260.2)], repl, 10.0, 1.0)) == []
    short = duplicate_windows([(170.8, 230.0)], repl, 10.0, 1.0)  # healed before any lapse
    assert [v.kind for v in check_duplicate_window(twice, short)] == ["duplicate_window"]


class DoubleCountNode(Node):
    """Counts each event it accepts twice in its tenant's ``events_published``."""

    async def start(self) -> None:
        await super().start()
        commit = self.writer.commit_local

        def doubled(kind: str, stamp: Timestamp, deltas: Mapping[str, CRDT], batch: WriteBatch,
                    **kw: object):  # fmt: skip
            for key in batch.usage:
                if key[1] == "events_published":
                    batch.usage[key] *= 2
            return commit(kind, stamp, deltas, batch, **kw)  # type: ignore[arg-type]

        self.writer.commit_local = doubled  # type: ignore[method-assign]


def test_wrong_usage_counter_is_reported() -> None:
    opts = load_scenario(SCENARIOS / "partition-heal.toml", seed=1)
    assert not [v for v in run(opts).violations if v.kind == "usage"]
    res = run(opts, node_classes={"us-east": DoubleCountNode})
    usage = [v for v in res.violations if v.kind == "usage"]
    assert usage and not res.ok
    # every region sees the doubled count, recorded by us-east and replicated
    assert len({v.detail.split(":")[0] for v in usage}) == opts.regions
