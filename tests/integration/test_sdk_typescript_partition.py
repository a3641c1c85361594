"""A publish retry that lands in another region before the first region's acceptance
has replicated is still one event: the TypeScript SDK sends its client-chosen event id
on every attempt. The victim region's peer links are cut (tests/integration/link_cut.py)
and its tenant acknowledges only once a peer holds the event (``one-remote``), so the
victim commits each event it gets and cannot answer: the SDK times out and publishes the
same id in the next region. After the heal both regions hold the event; the receiver
gets every payload under one webhook-id. (Without the id, the retry is a second event:
the test fails with two webhook-ids per payload.)"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
from cluster_support import (
    REGIONS,
    RecordingReceiver,
    all_delivered,
    converged,
    eventually,
    expect,
)
from link_cut import partitioned_cluster
from ts_sdk import run_node

pytestmark = [pytest.mark.asyncio(loop_scope="module")]

US, EU, AP = REGIONS
COUNT = 6
HOOK = "ts-partition"


async def test_a_retry_before_replication_is_the_same_event(
    receiver: RecordingReceiver, client: httpx.AsyncClient
) -> None:
    root = Path(tempfile.mkdtemp(prefix="regionsync-tsp-"))
    try:
        await _retry_before_replication(root, receiver, client)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _retry_before_replication(
    root: Path, receiver: RecordingReceiver, client: httpx.AsyncClient
) -> None:
    async with partitioned_cluster(root, REGIONS, retry_schedule_s=[0.2, 0.5, 1]) as (cl, relays):
        http, tenant = cl.http, "t-ts-partition"
        await expect(client, "POST", f"{http[EU]}/v1/tenants", 201,
                     json={"id": tenant, "name": "P", "ack_policy": "one-remote"})  # fmt: skip
        ep = await expect(client, "POST", f"{http[EU]}/v1/tenants/{tenant}/endpoints", 201,
                          json={"url": receiver.url(HOOK)})  # fmt: skip
        receiver.secrets[HOOK] = ep["secret"]

        async def everywhere() -> bool:
            urls = [f"{http[r]}/v1/tenants/{tenant}/endpoints/{ep['id']}" for r in REGIONS]
            return all([(await client.get(u)).status_code == 200 for u in urls])

        await eventually(everywhere)
        for (a, b), relay in relays.items():
            if US in (a, b):
                relay.set_cut(True)

        env = {"REGIONSYNC_URLS": ",".join(http[r] for r in (US, EU, AP)), "TENANT": tenant,
               "COUNT": str(COUNT), "CONCURRENCY": "1", "RATE": "1"}  # fmt: skip
        code, out = await run_node(["dist/tools/publisher.js"], env, timeout_s=120)
        assert code == 0, out
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        accepted = {m["accepted"]: m["id"] for m in lines if "accepted" in m}
        moved = [m["failover"] for m in lines if "failover" in m]
        assert len(accepted) == COUNT, out
        assert any(f["from"] == http[US] and "timed out" in f["attempts"][0] for f in moved), out
        print(f"{len(moved)} of {COUNT} publishes timed out in {US} and moved on")

        for relay in relays.values():
            relay.set_cut(False)
        await all_delivered(set(accepted.values()), receiver, HOOK)
        await eventually(lambda: converged(client, http), timeout_s=60, interval=0.2)

        async def settled() -> bool:  # the victim's copies are delivered too
            for r in REGIONS:
                url = f"{http[r]}/v1/tenants/{tenant}/deliveries?status=pending"
                if (await client.get(url)).json()["items"]:
                    return False
            return True

        await eventually(settled, timeout_s=60, interval=0.2)
        for r in REGIONS:  # one event per publish in every region
            page = (await client.get(f"{http[r]}/v1/tenants/{tenant}/events?limit=100")).json()
            assert sorted(e["id"] for e in page["items"]) == sorted(accepted.values()), r
        ids_of: dict[int, set[str]] = defaultdict(set)
        for hit in receiver.hits:
            if hit.name == HOOK and hit.status == 204:
                ids_of[json.loads(hit.body)["i"]].add(hit.headers["webhook-id"])
        assert {i: ids for i, ids in ids_of.items() if ids != {accepted[i]}} == {}
