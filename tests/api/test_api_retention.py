"""Event retention on a running node (issue 43): a delivered event older than
``delivery.event_retention_s`` is deleted with its deliveries and attempts, one with a
pending delivery stays, the anti-entropy tree forgets what went and a peer's state items
do not bring it back; ``/metrics`` counts it. The node's clock runs on: the retention is
set to 1 s once the state items were taken."""

from __future__ import annotations

import asyncio
from pathlib import Path

from api_support import RecordingReceiver, eventually, running_node

T = "acme"


async def test_retention_deletes_old_delivered_events_only(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    # the failing endpoint's delivery stays pending (its next try in an hour); the default
    # retention (90 days) until the state items are taken, then 1 s
    async with running_node(tmp_path, delivery={"retry_schedule_s": [3600.0]}) as api:
        c, node = api.client, api.node
        assert (await c.post("/v1/tenants", json={"id": T, "name": "A"})).status_code == 201
        ok = (await c.post(f"/v1/tenants/{T}/endpoints", json={"url": receiver.url("ok")})).json()
        bad = (await c.post(f"/v1/tenants/{T}/endpoints", json={"url": receiver.url("no")})).json()
        receiver.secrets["ok"] = ok["secret"]
        receiver.fail_first["no"] = 10**6
        await c.patch(f"/v1/tenants/{T}/endpoints/{bad['id']}", json={"event_types": ["keep"]})
        sent = await c.post(f"/v1/tenants/{T}/events", json={"event_type": "go", "payload": {}})
        kept = await c.post(f"/v1/tenants/{T}/events", json={"event_type": "keep", "payload": {}})
        gone_id, kept_id = sent.json()["id"], kept.json()["id"]

        async def delivered() -> bool:
            ev = (await c.get(f"/v1/tenants/{T}/events/{gone_id}")).json()
            return [d["status"] for d in ev["deliveries"]] == ["delivered"]

        await eventually(delivered, timeout_s=60)
        tree = await node.anti_entropy.state_tree()
        before = await node.anti_entropy.state_items([f"e/{gone_id}"])
        dlv = (await c.get(f"/v1/tenants/{T}/events/{gone_id}")).json()["deliveries"][0]["id"]
        before += await node.anti_entropy.state_items([f"d/{dlv}"])
        assert len(before) == 2
        assert await node.retention.run() == (0, 0, 0)  # 90 days: nothing is that old
        node.retention.retention_ms = 1000
        await asyncio.sleep(1.2)  # older than the retention now

        async def purged() -> tuple[int, int, int] | None:
            done = await node.retention.run()
            return done if done[0] else None

        events, deliveries, attempts = await eventually(purged, timeout_s=30)
        assert (events, deliveries) == (1, 1) and attempts >= 1
        assert (await c.get(f"/v1/tenants/{T}/events/{gone_id}")).status_code == 404
        shown = (await c.get(f"/v1/tenants/{T}/events/{kept_id}")).json()
        assert sorted(d["status"] for d in shown["deliveries"]) == ["delivered", "pending"]
        # the kept tree forgot them: it is the tree a build from the store gives now
        fresh = await node.anti_entropy._build()
        tree.flush()
        assert tree.replicated_root() == fresh.replicated_root() and len(tree) == len(fresh)
        # a peer that still holds them: its state items are not merged back
        assert await node.anti_entropy.apply_state(before) is None
        assert (await c.get(f"/v1/tenants/{T}/events/{gone_id}")).status_code == 404
        metrics = (await c.get("/metrics")).text
        assert "regionsync_retention_events_deleted_total 1.0" in metrics, metrics[-2000:]


def test_passes_per_tenant_and_expired_items() -> None:
    """A tenant with its own retention gets its own pass and the default pass skips it;
    0 keeps a tenant's events forever; a peer's item is judged by its tenant's cutoff."""
    from types import SimpleNamespace

    from regionsync.config import load_settings
    from regionsync.core.model import Delivery, DeliveryStatus, Event
    from regionsync.runtime.retention import EventRetention

    day = 24 * 3600
    own = {"short": 7 * day, "keep": 0}
    settings = load_settings(
        None, delivery={"event_retention_s": 90 * day, "event_retention_by_tenant_s": own}
    )
    now = 1000 * day * 1000
    clock = SimpleNamespace(wall_ms=lambda: now)
    tree = SimpleNamespace()
    r = EventRetention(settings, None, clock, tree, {})  # type: ignore[arg-type]
    assert r.passes() == [(now - 7 * day * 1000, "short", ()),
                          (now - 90 * day * 1000, None, ("keep", "short"))]  # fmt: skip
    ago = now - 30 * day * 1000  # older than "short" keeps, younger than the default

    def ev(tenant: str, at: int) -> Event:
        return Event("evt_1", tenant, "t", b"{}", "r", at)

    assert tree.expired(ev("short", ago)) and not tree.expired(ev("acme", ago))
    assert not tree.expired(ev("keep", 0)) and tree.expired(ev("acme", 0))
    final = Delivery("dlv_1", "evt_1", "ep_1", "short", DeliveryStatus.DEAD, 1, None, "r", ago, ago)
    pending = Delivery("dlv_2", "evt_1", "ep_1", "short", DeliveryStatus.PENDING, 1, ago, "r",
                       ago, ago)  # fmt: skip
    assert tree.expired(final) and not tree.expired(pending)
