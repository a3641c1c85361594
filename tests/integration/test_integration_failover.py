"""Region failover with three real processes: a region that acknowledged events and then
died still gets them delivered, by the other regions, within ``failover_after_s`` plus a
few seconds, with valid signatures; when it comes back it takes its custody back without
delivering anything a second time. This module has its own cluster because it kills a
node."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx
import pytest
from cluster_support import (
    FAILOVER_AFTER_S,
    FAILOVER_DELIVERY,
    FAILOVER_REPLICATION,
    REGIONS,
    Hit,
    RecordingReceiver,
    clusters,
    converged,
    eventually,
    expect,
)
from starlette.requests import Request
from starlette.responses import Response

from regionsync import demo

pytestmark = [pytest.mark.asyncio(loop_scope="module")]

US, EU, AP = REGIONS
VICTIM = US
N_EVENTS = 300


@dataclass
class FlakyReceiver(RecordingReceiver):
    """Answers 503 (before checking anything) while ``down``."""

    down: bool = False

    async def _hook(self, request: Request) -> Response:
        if self.down:
            headers = {k.lower(): v for k, v in request.headers.items()}
            self.hits.append(Hit(request.path_params["name"], headers, b"", 503))
            return Response(status_code=503)
        return await super()._hook(request)


async def test_dead_region_events_delivered_by_others_and_not_again_after_hand_back() -> None:
    receiver = FlakyReceiver()
    async with (
        receiver.running(),
        demo.start_cluster(replication=FAILOVER_REPLICATION, **FAILOVER_DELIVERY) as cluster,
        httpx.AsyncClient(timeout=10.0) as client,
    ):
        http = cluster.http
        tenant = "t-failover"
        await expect(client, "POST", f"{http[VICTIM]}/v1/tenants", 201,
                     json={"id": tenant, "name": "Failover"})  # fmt: skip
        ep = await expect(
            client, "POST", f"{http[VICTIM]}/v1/tenants/{tenant}/endpoints", 201,
            json={"url": receiver.url("fo"), "rate_limit_per_s": 1000, "max_in_flight": 64},
        )  # fmt: skip
        receiver.secrets["fo"] = ep["secret"]
        await eventually(lambda: converged(client, http))

        # the receiver is down while the victim accepts the events and tries them
        receiver.down = True
        sem = asyncio.Semaphore(16)

        async def publish(i: int) -> str:
            async with sem:
                body = await expect(
                    client, "POST", f"{http[VICTIM]}/v1/tenants/{tenant}/events", 202,
                    json={"event_type": "order.paid", "payload": {"i": i, "amount": 12.10}},
                )  # fmt: skip
                return body["id"]

        acked = set(await asyncio.gather(*(publish(i) for i in range(N_EVENTS))))
        assert len(acked) == N_EVENTS

        async def replicated() -> bool:  # every event is held by another region too
            cs = await clusters(client, http)
            return all(cs[r]["counts"]["events"] >= N_EVENTS for r in (EU, AP))

        await eventually(replicated, timeout_s=30)

        async def tried() -> bool:  # the victim tried them and got 503
            return any(h.status == 503 for h in receiver.hits)

        await eventually(tried, timeout_s=10)

        victim = cluster.procs[VICTIM]
        victim.kill()
        assert victim.wait(timeout=10) == -9
        killed_at = time.monotonic()
        receiver.down = False

        async def all_delivered() -> bool:
            return acked <= receiver.ids("fo")

        try:
            await eventually(all_delivered, timeout_s=FAILOVER_AFTER_S + 10, interval=0.1)
        except AssertionError:
            lost = acked - receiver.ids("fo")
            raise AssertionError(f"{len(lost)} of {N_EVENTS} not delivered") from None
        took = time.monotonic() - killed_at
        assert took <= FAILOVER_AFTER_S + 10
        assert receiver.failed == 0  # every signature verified by standardwebhooks
        by = {h.headers.get("webhook-id") for h in receiver.hits if h.status == 204}
        assert acked <= by

        survivors = {r: http[r] for r in (EU, AP)}
        cs = await clusters(client, survivors)
        record = cs[EU]["custody"]["records"][VICTIM]
        assert record["state"] == "adopted" and VICTIM not in record["live"]

        # the victim comes back: it merges what its successors did, then takes custody back
        delivered_hits = len(receiver.hits)
        cluster.procs[VICTIM] = demo.spawn(cluster.root, VICTIM, cluster.root / f"{VICTIM}.toml")
        await demo.wait_ready(client, http[VICTIM], time.monotonic() + 30)

        async def handed_back() -> bool:
            cs = await clusters(client, http)
            recs = [c["custody"]["records"].get(VICTIM) for c in cs.values()]
            return all(r is not None and r["state"] == "own" for r in recs)

        await eventually(handed_back, timeout_s=30, interval=0.2)
        await eventually(lambda: converged(client, http), timeout_s=30, interval=0.2)
        await asyncio.sleep(2 * FAILOVER_DELIVERY["probe_max_s"])  # time for any stray re-delivery
        again = [h for h in receiver.hits[delivered_hits:] if h.headers.get("webhook-id") in acked]
        assert again == [], f"{len(again)} events delivered again after hand-back"
        victim_view = (await clusters(client, {VICTIM: http[VICTIM]}))[VICTIM]
        assert victim_view["counts"]["deliveries_pending"] == 0
