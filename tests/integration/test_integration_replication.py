"""Acceptance criteria across three real regions (separate processes, gRPC replication):
an endpoint created in one region receives events published in another; an endpoint
deleted in one region stops receiving in all; concurrent subscription changes in two
regions both hold everywhere. One cluster is shared; each test has its own tenant."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from cluster_support import REGIONS, RecordingReceiver, converged, eventually, expect
from standardwebhooks.webhooks import Webhook

from regionsync.demo import Cluster

pytestmark = [pytest.mark.asyncio(loop_scope="module")]

US, EU, AP = REGIONS


async def create_tenant_everywhere(
    client: httpx.AsyncClient, cluster: Cluster, tenant: str, region: str = US
) -> None:
    await expect(client, "POST", f"{cluster.http[region]}/v1/tenants", 201,
                 json={"id": tenant, "name": tenant})  # fmt: skip

    async def everywhere() -> bool:
        codes = [
            (await client.get(f"{cluster.http[r]}/v1/tenants/{tenant}")).status_code
            for r in REGIONS
        ]
        return codes == [200, 200, 200]

    await eventually(everywhere)


async def endpoint_ids(client: httpx.AsyncClient, base: str, tenant: str) -> list[str]:
    items = (await expect(client, "GET", f"{base}/v1/tenants/{tenant}/endpoints", 200))["items"]
    return [e["id"] for e in items]


async def wait_endpoints(
    client: httpx.AsyncClient, cluster: Cluster, tenant: str, ids: set[str],
    regions: tuple[str, ...] = REGIONS,
) -> None:  # fmt: skip
    """Until every region in ``regions`` lists exactly ``ids`` for ``tenant``."""

    async def visible() -> bool:
        for r in regions:
            if set(await endpoint_ids(client, cluster.http[r], tenant)) != ids:
                return False
        return True

    await eventually(visible)


async def test_endpoint_created_in_one_region_receives_events_published_in_another(
    cluster: Cluster, receiver: RecordingReceiver, client: httpx.AsyncClient
) -> None:
    tenant = "t-cross"
    await create_tenant_everywhere(client, cluster, tenant, US)
    ep = await expect(
        client, "POST", f"{cluster.http[EU]}/v1/tenants/{tenant}/endpoints", 201,
        json={"url": receiver.url("cross"), "description": "made in eu-central-1"},
    )  # fmt: skip
    receiver.secrets["cross"] = ep["secret"]
    await wait_endpoints(client, cluster, tenant, {ep["id"]}, regions=(AP,))
    replicated = await expect(
        client, "GET", f"{cluster.http[AP]}/v1/tenants/{tenant}/endpoints/{ep['id']}", 200
    )
    assert replicated == ep  # every field, the secret too, arrived intact

    payload = {"hello": "from ap-southeast-1", "n": 1}
    accepted = await expect(
        client, "POST", f"{cluster.http[AP]}/v1/tenants/{tenant}/events", 202,
        json={"event_type": "greeting.sent", "payload": payload},
    )  # fmt: skip
    assert accepted["region"] == AP

    async def arrived() -> list:
        return [h for h in receiver.hits if h.name == "cross"]

    hit = (await eventually(arrived))[0]
    assert hit.status == 204
    assert hit.headers["webhook-id"] == accepted["id"]
    assert Webhook(ep["secret"]).verify(hit.body, hit.headers) == payload
    assert receiver.failed == 0

    async def delivered_by_origin() -> dict | None:
        ev = await expect(
            client, "GET", f"{cluster.http[AP]}/v1/tenants/{tenant}/events/{accepted['id']}", 200
        )
        ds = ev["deliveries"]
        return ev if ds and ds[0]["status"] == "delivered" else None

    ev = await eventually(delivered_by_origin)
    (d,) = ev["deliveries"]
    assert (d["endpoint"], d["region"]) == (ep["id"], AP)


async def test_endpoint_deleted_in_one_region_stops_receiving_in_all(
    cluster: Cluster, receiver: RecordingReceiver, client: httpx.AsyncClient
) -> None:
    tenant = "t-delete"
    await create_tenant_everywhere(client, cluster, tenant, US)
    eps = {}
    for name in ("del-live", "del-gone"):
        ep = await expect(
            client, "POST", f"{cluster.http[US]}/v1/tenants/{tenant}/endpoints", 201,
            json={"url": receiver.url(name)},
        )  # fmt: skip
        receiver.secrets[name] = ep["secret"]
        eps[name] = ep["id"]
    await wait_endpoints(client, cluster, tenant, set(eps.values()))

    # while it exists, "del-gone" receives like "del-live"
    before = await expect(
        client, "POST", f"{cluster.http[EU]}/v1/tenants/{tenant}/events", 202,
        json={"event_type": "x.before", "payload": {}},
    )  # fmt: skip

    async def both_got_it() -> bool:
        return all(before["id"] in receiver.ids(n) for n in eps)

    await eventually(both_got_it)

    await expect(
        client, "DELETE", f"{cluster.http[AP]}/v1/tenants/{tenant}/endpoints/{eps['del-gone']}",
        204,
    )  # fmt: skip
    await wait_endpoints(client, cluster, tenant, {eps["del-live"]})
    for r in REGIONS:
        await expect(
            client, "GET", f"{cluster.http[r]}/v1/tenants/{tenant}/endpoints/{eps['del-gone']}",
            404,
        )  # fmt: skip

    published: dict[str, str] = {}  # event id -> origin region
    for r in REGIONS:
        for i in range(2):
            ev = await expect(
                client, "POST", f"{cluster.http[r]}/v1/tenants/{tenant}/events", 202,
                json={"event_type": "x.after", "payload": {"region": r, "i": i}},
            )  # fmt: skip
            published[ev["id"]] = r

    # positive control: the live endpoint gets every one of them
    async def live_got_all() -> bool:
        return set(published) <= receiver.ids("del-live")

    await eventually(live_got_all)
    gone_hits = {h.headers["webhook-id"] for h in receiver.hits if h.name == "del-gone"}
    assert gone_hits == {before["id"]}
    # and no region even scheduled a delivery to the deleted endpoint
    for event_id, origin in published.items():
        ev = await expect(
            client, "GET", f"{cluster.http[origin]}/v1/tenants/{tenant}/events/{event_id}", 200
        )
        assert [d["endpoint"] for d in ev["deliveries"]] == [eps["del-live"]]
    assert receiver.failed == 0


async def test_concurrent_event_types_add_and_remove_both_hold_everywhere(
    cluster: Cluster, receiver: RecordingReceiver, client: httpx.AsyncClient
) -> None:
    tenant = "t-types"
    await create_tenant_everywhere(client, cluster, tenant, US)
    ep = await expect(
        client, "POST", f"{cluster.http[US]}/v1/tenants/{tenant}/endpoints", 201,
        json={"url": receiver.url("types"), "event_types": ["a", "b"]},
    )  # fmt: skip
    await wait_endpoints(client, cluster, tenant, {ep["id"]})
    path = f"/v1/tenants/{tenant}/endpoints/{ep['id']}"

    # issued together, each region applies its own change before it can see the other's
    added, removed = await asyncio.gather(
        expect(client, "PATCH", f"{cluster.http[US]}{path}", 200,
               json={"event_types_add": ["c"]}),
        expect(client, "PATCH", f"{cluster.http[EU]}{path}", 200,
               json={"event_types_remove": ["a"]}),
    )  # fmt: skip
    assert "c" in added["event_types"] and "a" not in removed["event_types"]

    async def everywhere_b_c() -> bool:
        for r in REGIONS:
            view = await expect(client, "GET", f"{cluster.http[r]}{path}", 200)
            if view["event_types"] != ["b", "c"]:
                return False
        return True

    await eventually(everywhere_b_c)
    cs = await eventually(lambda: converged(client, cluster.http))
    assert len({c["registry_hash"] for c in cs.values()}) == 1
    for r in REGIONS:
        view = await expect(client, "GET", f"{cluster.http[r]}{path}", 200)
        assert view["event_types"] == ["b", "c"], (r, view)
