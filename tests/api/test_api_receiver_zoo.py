"""The receiver zoo: one steady event stream to a healthy endpoint and five bad ones.

A tarpit (answers after 9.5 s), one that answers 200 then 500 for a while, one that
answers 404 during a deploy window (its first 1.5 s), one that answers 410, and one that
redirects to a trap receiver on another loopback port (standing in for a metadata
address). The healthy endpoint's deliveries are not held up, every endpoint ends in the
state the health table says, the trap is never contacted, and the attempt log explains
every outcome.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from api_support import eventually, running_node, serving
from standardwebhooks.webhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from regionsync.demo import free_port

EVENTS = 30
ZOO = ("healthy", "tarpit", "flaky", "deploy", "gone", "redirect")


class Zoo:
    def __init__(self, trap_port: int) -> None:
        self.trap_port = trap_port
        self.arrivals: dict[str, list[tuple[float, dict[str, str], bytes]]] = {n: [] for n in ZOO}
        self.trapped = 0
        self.deploy_from: float | None = None  # its first request: the deploy window starts
        self.flaky_calls = 0

    async def hook(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.arrivals[name].append((time.monotonic(), headers, body))
        if name == "tarpit":
            await asyncio.sleep(9.5)
            return Response(status_code=200)
        if name == "flaky":
            self.flaky_calls += 1
            ok = self.flaky_calls <= 3 or self.flaky_calls > 15
            return Response(status_code=200 if ok else 500)
        if name == "deploy":
            # timed from its own first request, not from the zoo's creation: a node that
            # took 1.5 s to start (a loaded machine) would otherwise never see the 404s
            if self.deploy_from is None:
                self.deploy_from = time.monotonic()
            deploying = time.monotonic() - self.deploy_from < 1.5
            # a 204 has no content (RFC 9110 section 15.3.5): uvicorn refuses a body there
            return Response(b"not found", status_code=404) if deploying else Response(None, 204)
        if name == "gone":
            return Response(status_code=410)
        if name == "redirect":
            location = f"http://127.0.0.1:{self.trap_port}/latest/meta-data/"
            return Response(status_code=302, headers={"location": location})
        return Response(status_code=204)

    async def trap(self, request: Request) -> Response:
        self.trapped += 1
        return Response(status_code=200)


async def test_receiver_zoo(tmp_path: Path) -> None:
    port, trap_port = free_port(), free_port()
    zoo = Zoo(trap_port)
    app = Starlette(routes=[Route("/{name}", zoo.hook, methods=["POST"])])
    trap = Starlette(routes=[Route("/{path:path}", zoo.trap, methods=["GET", "POST"])])
    settings = {
        "delivery": {
            "retry_schedule_s": [0.2, 0.2, 0.2, 0.2],
            "failure_threshold": 5,
            "probe_initial_s": 0.2,
            "probe_max_s": 0.5,
            "timeout_s": 15.0,
        }
    }
    async with (
        serving(app, port, lifespan="off"),
        serving(trap, trap_port, lifespan="off"),
        running_node(tmp_path, **settings) as api,
    ):
        c = api.client
        assert (await c.post("/v1/tenants", json={"id": "zoo", "name": "Zoo"})).status_code == 201
        ids, secrets = {}, {}
        for name in ZOO:
            resp = await c.post(
                "/v1/tenants/zoo/endpoints", json={"url": f"http://127.0.0.1:{port}/{name}"}
            )
            assert resp.status_code == 201, resp.text
            ids[name], secrets[name] = resp.json()["id"], resp.json()["secret"]
        published: dict[str, float] = {}
        for i in range(EVENTS):
            resp = await c.post("/v1/tenants/zoo/events",
                                json={"event_type": "zoo.tick", "payload": {"i": i}})  # fmt: skip
            assert resp.status_code == 202
            published[resp.json()["id"]] = time.monotonic()
            await asyncio.sleep(0.05)

        async def healthy_done() -> bool:
            return len(zoo.arrivals["healthy"]) >= EVENTS

        await eventually(healthy_done, timeout_s=10)
        # the healthy endpoint was never held up by its neighbours (the tarpit answers in
        # 9.5 s): every delivery arrived within a small fraction of that
        lags = [t - published[h["webhook-id"]] for t, h, _ in zoo.arrivals["healthy"]]
        assert max(lags) < 2.0, max(lags)
        for _, headers, body in zoo.arrivals["healthy"]:
            Webhook(secrets["healthy"]).verify(body, headers)

        async def state(name: str) -> str:
            resp = await c.get(f"/v1/tenants/zoo/endpoints/{ids[name]}")
            return resp.json()["state"]

        async def settled() -> bool:
            states = {n: await state(n) for n in ZOO}
            return states == {
                "healthy": "active",
                "tarpit": "active",
                "flaky": "active",
                "deploy": "active",
                "gone": "disabled",
                "redirect": "failing",
            }

        await eventually(settled, timeout_s=20, interval=0.2)
        assert zoo.trapped == 0

        async def attempts(name: str) -> list[dict]:
            resp = await c.get(f"/v1/tenants/zoo/endpoints/{ids[name]}/attempts?limit=1000")
            return resp.json()["items"]

        gone = await attempts("gone")
        assert gone and gone[0]["status_code"] == 410 and gone[0]["error"] == "http_410"
        redirect = await attempts("redirect")
        assert redirect and all(
            a["status_code"] == 302 and a["error"] == "redirect" for a in redirect
        )
        flaky = await attempts("flaky")
        assert {a["error"] for a in flaky} >= {None, "http_500"}
        deploy = await attempts("deploy")
        assert {a["status_code"] for a in deploy} >= {404, 204}

        async def tarpit_answered() -> bool:
            return any(a["status_code"] == 200 for a in await attempts("tarpit"))

        await eventually(tarpit_answered, timeout_s=15, interval=0.2)
        slow = [a for a in await attempts("tarpit") if a["status_code"] == 200]
        assert all(a["latency_ms"] >= 9000 for a in slow)
        # deliveries to the disabled endpoint after the 410 are recorded as skipped
        skipped = await c.get(f"/v1/tenants/zoo/endpoints/{ids['gone']}/deliveries?status=skipped")
        assert skipped.json()["items"]
