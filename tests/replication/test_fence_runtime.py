"""The lease fence at run time (runtime/custody.py over core/fence.py): a region cut off
from every peer fences itself before its peers adopt its deliveries, claims nothing while
fenced, lapses after fence_hold_s, and after the heal is open again only once caught up,
taking its custody back; a survivor releases an owner it hears again. Config checks."""

from __future__ import annotations

import pytest
from memnodes import eventually, make_node
from pydantic import ValidationError

from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.config import load_settings

FAST = {"failover_after_s": 1.0, "heartbeat_s": 0.2, "custody_interval_s": 0.05}


async def test_cut_off_region_fences_lapses_and_rejoins(net: MemoryNetwork, started) -> None:
    regions = ["a", "b", "c"]
    nodes = [make_node(net, r, [p for p in regions if p != r], **FAST) for r in regions]
    for n in nodes:
        await n.start()
        started.append(n)
    a, b, c = nodes
    await eventually(lambda: all(n.custody.ready for n in nodes), timeout_s=10)
    assert not c.custody.view()["fenced"] and c.custody.claimable() == {"c": None}
    net.partition("a", "c")
    net.partition("b", "c")

    await eventually(lambda: c.custody.view()["fenced"], timeout_s=10)
    view = c.custody.view()
    assert view["fences"] == 1 and view["fenced_since_ms"] is not None
    # fenced before the survivors adopt it (lease 0.5 s < failover 1 s): it claims nothing
    assert "c" not in a.custody.suspects() or "c" not in a.catalog.custody
    assert c.custody.claimable() == {}
    assert not a.custody.view()["fenced"]  # a still hears b
    await eventually(lambda: a.catalog.custody.get("c") is not None, timeout_s=10)
    assert "c" in {**a.custody.claimable(), **b.custody.claimable()}  # adopted

    # no peer for fence_hold_s (1 s): the fence lapses, c delivers (and adopts) again
    await eventually(lambda: c.custody.fence.state == "lapsed", timeout_s=10)
    assert not c.custody.view()["fenced"] and "c" in c.custody.claimable()

    net.heal()
    # heard again: the survivors release c's deliveries; c hands back once caught up
    await eventually(lambda: "c" not in a.custody.suspects(), timeout_s=10)
    assert "c" not in a.custody.claimable()  # released (or already handed back)

    def own_everywhere() -> bool:
        return (
            all((r := n.catalog.custody.get("c")) is not None and "c" in r.live for n in nodes)
            and c.custody.fence.state == "open"
        )

    await eventually(own_everywhere, timeout_s=15)
    assert c.custody.claimable().get("c", "missing") is None
    assert c.custody.view()["fences"] == 2  # the lapsed fence came back on hearing a peer
    assert c.counters["custody_fences"] == 2


def test_fence_settings_are_checked() -> None:
    peers = [{"region": "b", "address": "b"}]
    s = load_settings(None, region="a", peers=peers)
    assert (s.replication.fence_margin, s.replication.fence_hold) == (30.0, 60.0)
    s = load_settings(None, region="a", peers=peers,
                      replication={"fence_margin_s": 45, "fence_hold_s": 120})  # fmt: skip
    assert (s.replication.fence_margin, s.replication.fence_hold) == (45.0, 120.0)
    with pytest.raises(ValidationError, match="fence_margin_s"):
        load_settings(None, region="a", peers=peers, replication={"fence_margin_s": 50})
    with pytest.raises(ValidationError, match="fence_margin_s"):
        load_settings(None, region="a", peers=peers, replication={"fence_margin_s": 0})
