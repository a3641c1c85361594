"""Operational webhooks across three real ``regionsync serve`` processes (issue 18): an
endpoint answering 410 Gone is disabled, and the ``endpoint.disabled`` operational event
reaches the operations tenant's endpoint at a real receiver, signed per Standard
Webhooks (verified with the official ``standardwebhooks`` library), once: reported by
the endpoint's reporter region, whichever region disabled it (issue 43)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
import pytest_asyncio
from cluster_support import Hit, RecordingReceiver, converged, eventually, expect
from standardwebhooks.webhooks import Webhook
from starlette.requests import Request
from starlette.responses import Response

from regionsync.demo import Cluster, start_cluster

pytestmark = pytest.mark.asyncio(loop_scope="module")

US, EU, AP = "us-east-1", "eu-central-1", "ap-southeast-1"


@dataclass
class GoneReceiver(RecordingReceiver):
    """Answers 410 Gone on ``/hooks/gone``; verifies and records everything else."""

    async def _hook(self, request: Request) -> Response:
        if request.path_params["name"] == "gone":
            body = await request.body()
            headers = {k.lower(): v for k, v in request.headers.items()}
            self.hits.append(Hit("gone", headers, body, 410))
            return Response(status_code=410)
        return await super()._hook(request)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def receiver() -> AsyncIterator[GoneReceiver]:
    rcv = GoneReceiver()
    async with rcv.running():
        yield rcv


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster() -> AsyncIterator[Cluster]:
    async with start_cluster(
        sections={"operational_webhooks": {"tenant": "ops"}}, retry_schedule_s=[0.2, 0.5, 1]
    ) as running:
        yield running


async def test_endpoint_disabled_reaches_the_operations_endpoint_signed(
    cluster: Cluster, receiver: GoneReceiver, client: httpx.AsyncClient
) -> None:
    us, eu = cluster.http[US], cluster.http[EU]
    # the platform owner's operations tenant and its endpoint, made in another region
    await expect(client, "POST", f"{eu}/v1/tenants", 201, json={"id": "ops", "name": "Ops"})
    ops_ep = await expect(client, "POST", f"{eu}/v1/tenants/ops/endpoints", 201,
                          json={"url": receiver.url("ops")})  # fmt: skip
    receiver.secrets["ops"] = ops_ep["secret"]
    await expect(client, "POST", f"{eu}/v1/tenants", 201, json={"id": "acme", "name": "Acme"})
    gone = await expect(client, "POST", f"{eu}/v1/tenants/acme/endpoints", 201,
                        json={"url": receiver.url("gone")})  # fmt: skip
    await eventually(lambda: converged(client, cluster.http))

    # an event published in us-east-1 is delivered from there: 410 disables the endpoint
    await expect(client, "POST", f"{us}/v1/tenants/acme/events", 202,
                 json={"event_type": "order.paid", "payload": {"n": 1}})  # fmt: skip

    async def disabled_hits() -> list[Hit]:
        return [h for h in receiver.hits if h.name == "ops" and h.status == 204
                and json.loads(h.body)["type"] == "endpoint.disabled"]  # fmt: skip

    hits = await eventually(disabled_hits)
    hit = hits[0]
    # verified again here with the official library, over the exact bytes received
    Webhook(ops_ep["secret"]).verify(hit.body, hit.headers)
    assert hit.headers["webhook-event-type"] == "endpoint.disabled"
    body = json.loads(hit.body)
    reporter = body["region"]  # the endpoint's reporter among the live regions
    assert reporter in cluster.http and body["by"] == US and body["tenant"] == "acme"
    assert body["endpoint"] == gone["id"] and body["from"] == "active"
    # the input that made it is known to the region that wrote it
    assert body["trigger"] == ("gone" if reporter == US else None)
    assert body["at"].endswith("Z") and body["transition"].startswith("tr_")
    # the region that disabled it shows it at once; another region once the registry
    # change has replicated (it races the operational webhook's delivery)
    ep = await expect(client, "GET", f"{us}/v1/tenants/acme/endpoints/{gone['id']}", 200)
    assert ep["state"] == "disabled"

    async def disabled_in_eu() -> bool:
        ep = await expect(client, "GET", f"{eu}/v1/tenants/acme/endpoints/{gone['id']}", 200)
        return ep["state"] == "disabled"

    await eventually(disabled_in_eu)

    # a further event to the disabled endpoint is skipped: no second endpoint.disabled
    second = await expect(client, "POST", f"{us}/v1/tenants/acme/events", 202,
                          json={"event_type": "order.paid", "payload": {"n": 2}})  # fmt: skip

    async def skipped() -> bool:
        got = await expect(client, "GET", f"{us}/v1/tenants/acme/events/{second['id']}", 200)
        return [d["status"] for d in got["deliveries"]] == ["skipped"]

    await eventually(skipped)

    async def ops_events() -> dict[str, int] | None:
        counts: dict[str, int] = {}
        for base in cluster.http.values():
            page = await expect(client, "GET", f"{base}/v1/tenants/ops/events?limit=1000", 200)
            for item in page["items"]:
                counts[f"{item['region']}:{item['event_type']}"] = counts.get(
                    f"{item['region']}:{item['event_type']}", 0) + 1  # fmt: skip
        key = f"{reporter}:endpoint.disabled"
        return counts if counts.get(key) == len(cluster.http) else None

    counts = await eventually(ops_events)  # replicated to every region: one event, 3 views
    disabled = {k: n for k, n in counts.items() if k.endswith(":endpoint.disabled")}
    assert disabled == {f"{reporter}:endpoint.disabled": 3}  # no other region reported it
    assert len(await disabled_hits()) == 1  # delivered once, by its region
    assert receiver.failed == 0
