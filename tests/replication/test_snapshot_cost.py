"""Issue 42: a snapshot or repair reads the registry a key at a time, so the cost of a
batch of state items does not grow with the registry (it copied the registry per batch
of 256 items: a snapshot cost the square of the registry)."""

from __future__ import annotations

from memnodes import make_node

from crdt import LWWRegister, ORSet, Timestamp
from regionsync.core import registry_state


def fill(node, n: int) -> list[str]:
    """``n`` endpoint url keys straight into the registry; their tree idents."""
    stamp = Timestamp(1, 0)
    deltas = {
        f"e/ep{i:07d}/url": LWWRegister.empty().set(f"https://x/{i}", actor="a", stamp=stamp)
        for i in range(n)
    }
    node.catalog.registry.apply(deltas)
    return ["r/" + k for k in sorted(deltas)]


async def touched_per_batch(net, monkeypatch, region: str, n: int) -> tuple[int, int]:
    """(registry states examined, registry items returned) for one batch of 256 idents
    out of a registry of ``n`` keys."""
    node = make_node(net, region, [])
    idents = fill(node, n)
    calls = 0
    real = registry_state._empty_bytes

    def counting(cls):
        nonlocal calls
        calls += 1
        return real(cls)

    monkeypatch.setattr(registry_state, "_empty_bytes", counting)
    items = await node.anti_entropy.state_items(idents[n // 2 : n // 2 + 256])
    monkeypatch.setattr(registry_state, "_empty_bytes", real)
    assert [kind for kind, _ in items] == ["registry"]
    return calls, len(items)


async def test_a_batch_of_state_items_costs_the_batch_not_the_registry(net, monkeypatch) -> None:
    small, _ = await touched_per_batch(net, monkeypatch, "a", 1_000)
    large, _ = await touched_per_batch(net, monkeypatch, "b", 20_000)
    # before issue 42: 1,000 and 20,000 (every state of the registry, per batch)
    assert small == large <= 256


async def test_state_items_skip_absent_and_empty_states(net) -> None:
    node = make_node(net, "a", [])
    idents = fill(node, 10)
    node.catalog.registry.apply({"e/gone/event_types": ORSet.empty()})  # held, but empty
    items = await node.anti_entropy.state_items([*idents, "r/e/absent/url", "r/e/gone/event_types"])
    assert len(items) == 1
    assert node.catalog.registry.state("e/gone/event_types") is None
    assert node.catalog.registry.state("e/ep0000003/url") is not None
