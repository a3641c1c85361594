"""The checkers catch a wrong merge: one region's registry merges OR-Set removes wrongly
(injected through a Node subclass; crdt/ and core/ untouched) and the run must fail; so
do a node that never fails over, one that merges records its HLC refused, and regions
whose endpoint ids collide across tenants (the owner checker)."""

from __future__ import annotations

from collections.abc import Mapping

from tests_sim_paths import SCENARIOS

from crdt import CRDT, ORSet
from regionsync.core.model import Delivery, Record, WriteBatch
from regionsync.core.records import Decoded, decode_body
from regionsync.core.registry import Registry
from regionsync.errors import MalformedRecord
from regionsync.runtime.node import Node
from sim import load_scenario, run


class RemoveWinsRegistry(Registry):
    """OR-Sets that prefer removes: once an element left a set here, it never comes back
    (a two-phase set), whatever concurrent or later adds say."""

    def __init__(self, states: Mapping[str, CRDT] | None = None):
        super().__init__(states)
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


class NoDriftCheckNode(Node):
    """A node that merges records its HLC refused (clock_drift) instead of rejecting them."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        replica, apply_one = self.replica, self.replica._apply_one

        def lax(
            r: Record,
            decoded: Decoded | str,
            batch: WriteBatch,
            deliveries: dict[str, Delivery],
            stored: dict[str, Delivery],
        ) -> None:
            try:
                apply_one(r, decoded, batch, deliveries, stored)
            except MalformedRecord as exc:
                if not exc.reason.startswith("clock_drift"):
                    raise
                replica.merge(decode_body(r.kind, r.body), batch, deliveries, stored)

        replica._apply_one = lax  # type: ignore[method-assign]


def test_merged_edge_record_is_reported() -> None:
    opts = load_scenario(SCENARIOS / "edge-records.toml", seed=1)
    assert run(opts).ok
    names = ("eu-west", "us-east", "ap-south")
    res = run(opts, node_classes=dict.fromkeys(names, NoDriftCheckNode))
    assert "edges" in {v.kind for v in res.violations}, res.violations


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
