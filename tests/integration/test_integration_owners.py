"""Issue 37: two tenants creating endpoints in two regions cut off from each other (a real
partition of the peer links, link_cut.py) end with each tenant's endpoint holding only its
own event types, and deliveries going only to its own URL. The id both chose before this
release (`"id": "shared"`, which merged the two endpoints into one) is refused: endpoint
ids are generated."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from cluster_support import RecordingReceiver, converged, eventually, expect
from link_cut import partitioned_cluster

A, B = "us-east-1", "eu-central-1"


async def test_two_tenants_create_endpoints_in_a_partition(tmp_path: Path) -> None:
    rcv = RecordingReceiver()
    async with (
        rcv.running(),
        partitioned_cluster(tmp_path, (A, B), retry_schedule_s=[0.2, 0.5, 1]) as (cluster, links),
        httpx.AsyncClient(timeout=10.0) as c,
    ):
        http = cluster.http
        for t in ("t1", "t2"):
            await expect(c, "POST", f"{http[A]}/v1/tenants", 201, json={"id": t, "name": t})
        await eventually(lambda: converged(c, http))

        for link in links.values():
            link.set_cut(True)
        made: dict[str, dict] = {}
        for tenant, region in (("t1", A), ("t2", B)):
            url = f"{http[region]}/v1/tenants/{tenant}/endpoints"
            body = {"url": rcv.url(tenant), "event_types": [f"{tenant}.only"]}
            chosen = await c.post(url, json={"id": "shared", **body})
            assert chosen.status_code == 422 and chosen.json()["field"] == "id", chosen.text
            made[tenant] = await expect(c, "POST", url, 201, json=body)
            rcv.secrets[tenant] = made[tenant]["secret"]
        assert made["t1"]["id"] != made["t2"]["id"]
        during = {
            t: (await expect(c, "POST", f"{http[r]}/v1/tenants/{t}/events", 202,
                             json={"event_type": f"{t}.only", "payload": {"n": 0}}))["id"]
            for t, r in (("t1", A), ("t2", B))
        }  # fmt: skip
        await asyncio.sleep(1.0)  # both regions keep working apart
        assert not await converged(c, http)

        for link in links.values():
            link.set_cut(False)
        await eventually(lambda: converged(c, http), timeout_s=60)

        events = {t: [e] for t, e in during.items()}
        for region in (A, B):  # each tenant publishes in both regions after the heal
            for t in ("t1", "t2"):
                body = {"event_type": f"{t}.only", "payload": {"n": 1}}
                url = f"{http[region]}/v1/tenants/{t}/events"
                events[t].append((await expect(c, "POST", url, 202, json=body))["id"])
        for region in (A, B):
            for t, other in (("t1", "t2"), ("t2", "t1")):
                items = (await expect(c, "GET", f"{http[region]}/v1/tenants/{t}/endpoints", 200))[
                    "items"
                ]
                assert [(e["id"], e["event_types"], e["url"]) for e in items] == [
                    (made[t]["id"], [f"{t}.only"], rcv.url(t))
                ], (region, items)
                foreign = f"{http[region]}/v1/tenants/{other}/endpoints/{made[t]['id']}"
                assert (await c.get(foreign)).status_code == 404
                patch = await c.patch(foreign, json={"event_types_add": [f"{other}.only"]})
                assert patch.status_code == 404, patch.text

        async def delivered() -> bool:
            return all(rcv.ids(t) >= set(events[t]) for t in events)

        await eventually(delivered, timeout_s=60)
        assert rcv.ids("t1") == set(events["t1"]) and rcv.ids("t2") == set(events["t2"])
        assert {h.name for h in rcv.hits} == {"t1", "t2"}
