"""Ingest across real node processes: a sender's redelivery to another region is the same
event and is not delivered twice; a node SIGKILLed while clients publish keeps every event
it acknowledged. This module has its own cluster because it kills a node."""

from __future__ import annotations

import asyncio
import hashlib
import hmac

import httpx
import pytest
from cluster_support import REGIONS, RecordingReceiver, clusters, eventually, expect

from regionsync import demo
from regionsync.demo import Cluster

pytestmark = [pytest.mark.asyncio(loop_scope="module")]

US, EU, AP = REGIONS
SECRET = "gh-webhook-secret"


def signed(body: bytes, delivery: str) -> dict:
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {
        "content": body,
        "headers": {
            "content-type": "application/json",
            "x-hub-signature-256": sig,
            "x-github-event": "push",
            "x-github-delivery": delivery,
        },
    }


async def visible_everywhere(client: httpx.AsyncClient, urls: list[str]) -> None:
    async def check() -> bool:
        for url in urls:
            if (await client.get(url)).status_code != 200:
                return False
        return True

    await eventually(check)


async def test_github_redelivery_to_another_region_is_the_same_event(
    cluster: Cluster, receiver: RecordingReceiver, client: httpx.AsyncClient
) -> None:
    http = cluster.http
    await expect(client, "POST", f"{http[US]}/v1/tenants", 201, json={"id": "gh", "name": "G"})
    await visible_everywhere(client, [f"{http[r]}/v1/tenants/gh" for r in REGIONS])
    ep = await expect(client, "POST", f"{http[EU]}/v1/tenants/gh/endpoints", 201,
                      json={"url": receiver.url("gh")})  # fmt: skip
    receiver.secrets["gh"] = ep["secret"]
    source = {"tenant": "gh", "kind": "github", "secret": SECRET}
    src = (await expect(client, "POST", f"{http[EU]}/v1/sources", 201, json=source))["id"]
    await visible_everywhere(
        client,
        [f"{http[r]}/v1/tenants/gh/endpoints/{ep['id']}" for r in REGIONS]
        + [f"{http[r]}/v1/sources/{src}" for r in REGIONS],
    )
    body = b'{"ref":"refs/heads/main","commits":[{"message":"fix \\u2603"}]}'
    first = await expect(client, "POST", f"{http[US]}/in/{src}", 202, **signed(body, "g-1"))
    event_url = f"/v1/tenants/gh/events/{first['id']}"
    # once the regions exchanged it, GitHub's redelivery to another region is a duplicate
    await visible_everywhere(client, [http[r] + event_url for r in REGIONS])
    again = await expect(client, "POST", f"{http[AP]}/in/{src}", 202, **signed(body, "g-1"))
    assert again["id"] == first["id"] and again["duplicate"] and again["region"] == US

    async def delivered() -> bool:
        resp = await client.get(http[US] + event_url)
        return [d["status"] for d in resp.json()["deliveries"]] == ["delivered"]

    await eventually(delivered)
    cs = await clusters(client, http)
    assert cs[AP]["counts"]["events_accepted"] == 0  # AP created no event, no delivery
    assert cs[AP]["counts"]["deliveries_pending"] == 0
    hits = [h.headers["webhook-id"] for h in receiver.hits if h.name == "gh"]
    assert hits == [first["id"]]


async def test_sigkill_while_clients_publish_loses_no_acknowledged_event(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    http = cluster.http
    victim = EU
    await expect(client, "POST", f"{http[victim]}/v1/tenants", 201,
                 json={"id": "busy", "name": "Busy"})  # fmt: skip
    acknowledged: list[str] = []
    killed = asyncio.Event()

    async def publisher(n: int) -> None:
        async with httpx.AsyncClient(timeout=5.0) as own:
            for i in range(10_000):
                try:
                    resp = await own.post(
                        f"{http[victim]}/v1/tenants/busy/events",
                        json={"event_type": "load.test", "payload": {"p": n, "i": i}},
                    )
                except httpx.HTTPError:
                    return  # the node is gone: this request was never acknowledged
                if resp.status_code == 202:
                    acknowledged.append(resp.json()["id"])
                    if len(acknowledged) >= 150:
                        enough.set()
                if killed.is_set():
                    return

    enough = asyncio.Event()

    async def killer() -> None:
        await enough.wait()
        cluster.procs[victim].kill()
        killed.set()

    await asyncio.gather(killer(), *(publisher(n) for n in range(8)))
    cluster.procs[victim].wait(timeout=10)
    assert len(acknowledged) >= 150
    cluster.procs[victim] = demo.spawn(cluster.root, victim, cluster.root / f"{victim}.toml")
    await demo.wait_ready(client, http[victim], asyncio.get_running_loop().time() + 30)
    missing = [
        e for e in acknowledged
        if (await client.get(f"{http[victim]}/v1/tenants/busy/events/{e}")).status_code != 200
    ]  # fmt: skip
    assert missing == [], f"{len(missing)} acknowledged events lost"
    # and the others receive them all after the restart
    await visible_everywhere(
        client, [f"{http[r]}/v1/tenants/busy/events/{acknowledged[-1]}" for r in (US, AP)]
    )
