"""Region failover with a broker destination (issue 46), three real node processes: the
origin region accepts events for a Redis Streams endpoint while Redis is down, is
SIGKILLed, and another region delivers its pending events to the stream once Redis is
back; every event is there, signed, with its event id."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest
import redis.asyncio
from brokerserver import RedisServer
from cluster_support import (
    FAILOVER_AFTER_S,
    FAILOVER_DELIVERY,
    FAILOVER_REPLICATION,
    REGIONS,
    clusters,
    converged,
    eventually,
    expect,
)
from standardwebhooks import Webhook

from regionsync import demo

pytestmark = [pytest.mark.asyncio(loop_scope="module")]

US, EU, AP = REGIONS
VICTIM = US
N_EVENTS = 200


async def _stream(server: RedisServer, stream: str) -> list[dict[bytes, bytes]]:
    r = redis.asyncio.Redis.from_url(server.url)
    try:
        return [fields for _, fields in await r.xrange(stream)]
    finally:
        await r.aclose()


async def test_dead_region_events_published_to_the_broker_by_another(
    redis_server: RedisServer,
) -> None:
    stream = f"fo-{uuid.uuid4().hex[:8]}"
    async with (
        demo.start_cluster(replication=FAILOVER_REPLICATION, **FAILOVER_DELIVERY) as cluster,
        httpx.AsyncClient(timeout=10.0) as client,
    ):
        http = cluster.http
        tenant = "t-broker-failover"
        await expect(client, "POST", f"{http[VICTIM]}/v1/tenants", 201,
                     json={"id": tenant, "name": "Broker failover"})  # fmt: skip
        await eventually(lambda: converged(client, http))  # every region announced its reads
        dest = {"type": "redis", "url": redis_server.url, "stream": stream}
        ep = await expect(
            client, "POST", f"{http[VICTIM]}/v1/tenants/{tenant}/endpoints", 201,
            json={"destination": dest, "rate_limit_per_s": 1000, "max_in_flight": 64},
        )  # fmt: skip
        await eventually(lambda: converged(client, http))

        await asyncio.to_thread(redis_server.stop)  # the victim cannot deliver
        try:
            sem = asyncio.Semaphore(16)

            async def publish(i: int) -> str:
                async with sem:
                    body = await expect(
                        client, "POST", f"{http[VICTIM]}/v1/tenants/{tenant}/events", 202,
                        json={"event_type": "order.paid", "payload": {"i": i}},
                    )  # fmt: skip
                    return body["id"]

            acked = set(await asyncio.gather(*(publish(i) for i in range(N_EVENTS))))

            async def replicated() -> bool:
                cs = await clusters(client, http)
                return all(cs[r]["counts"]["events"] >= N_EVENTS for r in (EU, AP))

            await eventually(replicated, timeout_s=30)

            async def tried() -> bool:  # the victim's failed attempts, replicated
                url = f"{http[EU]}/v1/tenants/{tenant}/endpoints/{ep['id']}/attempts"
                page = (await client.get(url, params={"status": "failed"})).json()
                return any(a["region"] == VICTIM for a in page["items"])

            await eventually(tried, timeout_s=15)
            victim = cluster.procs[VICTIM]
            victim.kill()
            assert victim.wait(timeout=10) == -9
        finally:
            await asyncio.to_thread(redis_server.start)
        killed_at = time.monotonic()

        async def all_published() -> bool:
            ids = {f[b"webhook-id"].decode() for f in await _stream(redis_server, stream)}
            return acked <= ids

        await eventually(all_published, timeout_s=FAILOVER_AFTER_S + 20, interval=0.2)
        assert time.monotonic() - killed_at <= FAILOVER_AFTER_S + 20
        rows = await _stream(redis_server, stream)
        wh = Webhook(ep["secret"])
        for f in rows:  # each message verifies as a Standard Webhooks delivery
            headers = {k.decode(): v.decode() for k, v in f.items() if k != b"body"}
            wh.verify(f[b"body"], headers)
        survivors = {r: http[r] for r in (EU, AP)}
        record = (await clusters(client, survivors))[EU]["custody"]["records"][VICTIM]
        assert record["state"] == "adopted" and VICTIM not in record["live"]
