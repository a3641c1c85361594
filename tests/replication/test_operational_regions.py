"""Operational webhooks of the custody view (issue 18): a region cut off from the others
is reported ``region.unreachable`` once by each region that suspects it, and
``region.reachable`` once when it is heard again; delivered to the operations tenant's
endpoint by the normal delivery engine.

Suspicion is a deadline: ``failover_after_s`` is 15 heartbeats, so a loaded machine (the
suite shares two cores) does not make a region suspect a peer it can reach; the test
proved nothing when a 1 s deadline made it flaky (a slow start or a stalled heartbeat
read as a cut: an extra ``region.unreachable``).

"Once" counts events, by the region that raised them (payload ``region``), not requests
by a region's sender: the operational events c raises while cut off are held by its
fence, and a and b, which failed over from c, may deliver them too once the cut heals
(README "Region failover": at most twice, within the duplicate window)."""

from __future__ import annotations

import json

from memnodes import eventually, make_node

from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.runtime.node import Node

FAST = {"failover_after_s": 3.0, "heartbeat_s": 0.2, "custody_interval_s": 0.05}
OPS = {"operational_webhooks": {"tenant": "ops"}}


def raised(nodes: list[Node], viewer: Node, event_type: str) -> list[str]:
    """The peers of the ``event_type`` events ``viewer`` raised, one per event (by
    ``webhook-id``) whichever nodes' senders delivered it, sorted."""
    peers: dict[str, str] = {}
    for n in nodes:
        for r in n.sender.requests:  # type: ignore[attr-defined]
            if r.headers.get("webhook-event-type") == event_type:
                payload = json.loads(r.body)
                if payload["region"] == viewer.region:
                    peers[r.headers["webhook-id"]] = payload["peer"]
    return sorted(peers.values())


async def test_region_unreachable_and_reachable_once_per_region(
    net: MemoryNetwork, started
) -> None:
    regions = ["a", "b", "c"]
    nodes = [make_node(net, r, [p for p in regions if p != r], extra=OPS, **FAST)
             for r in regions]  # fmt: skip
    for n in nodes:
        await n.start()
        started.append(n)
    a, b, c = nodes
    await a.registry_ops.create_tenant("ops", "Ops")
    await a.registry_ops.create_endpoint(
        "ops", {"url": "https://ops.example/hook", "event_types": ["region.*"]}
    )
    await eventually(lambda: all(len(n.catalog.registry.endpoints("ops")) == 1 for n in nodes))
    # every link up before the cut (a peer not heard since the start is suspected too)
    await eventually(lambda: all(p.connected for n in nodes for p in n.peers.values()))
    assert all(not raised(nodes, n, "region.unreachable") for n in nodes)
    net.partition("a", "c")
    net.partition("b", "c")

    def reported(event_type: str, n: int = 1, n_c: int = 1) -> bool:
        # c suspects a and b one by one: wait for both of its reports (a race otherwise)
        return all(len(raised(nodes, x, event_type)) >= k for x, k in ((a, n), (b, n), (c, n_c)))

    await eventually(lambda: reported("region.unreachable", n_c=2), timeout_s=30)
    for x, cut in ((a, ["c"]), (b, ["c"]), (c, ["a", "b"])):
        assert raised(nodes, x, "region.unreachable") == cut  # each peer once, by its viewer
    net.heal()
    await eventually(lambda: reported("region.reachable", n_c=2), timeout_s=30)
    for x, cut in ((a, ["c"]), (b, ["c"]), (c, ["a", "b"])):
        assert raised(nodes, x, "region.reachable") == cut
        assert raised(nodes, x, "region.unreachable") == cut  # no repeat
