"""Issue 42: the tenants' usage-rate sampling (adapters/usage_rates.py) returns to the
loop between slices (10k tenants took ~300 ms in one go) and observes what ``sample``
does."""

from __future__ import annotations

from typing import Any

from memnodes import loop_turns, make_node

from crdt import ORSet
from regionsync.adapters import usage_rates
from regionsync.runtime.slicing import Slicer


async def test_sampling_in_slices_observes_every_live_tenant(net, monkeypatch: Any) -> None:
    node = make_node(net, "a", [])
    reg = node.catalog.registry
    for i in range(40):
        node.catalog.apply({"tenants": reg.get("tenants", ORSet).add(f"t{i:02d}", actor="a:1")})
    assert len(reg.tenant_ids()) == 40
    monkeypatch.setattr(usage_rates, "Slicer", lambda **kw: Slicer(slice_s=0.0, **kw))
    rates = usage_rates.UsageRates(node)  # type: ignore[arg-type]
    async with loop_turns() as turns:
        await rates.sample_in_slices()
    assert turns[0] >= 40
    assert sorted(rates._rates) == sorted(node.catalog.registry.tenant_ids())
    plain = usage_rates.UsageRates(node)  # type: ignore[arg-type]
    plain.sample()
    assert sorted(plain._rates) == sorted(rates._rates)
