"""An event-type catalog written in one region judges publishes in every region once it
has replicated (issue 18): three nodes over the in-memory transport, each serving the
real HTTP app (fast lane included) through httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from memnodes import eventually, make_node

from regionsync.adapters.http_api import create_app
from regionsync.runtime.node import Node

ORDER = {
    "type": "object",
    "required": ["id"],
    "properties": {"id": {"type": "string"}, "lines": {"type": "array", "items": {
        "type": "object", "properties": {"qty": {"type": "integer", "minimum": 1}}}}},
}  # fmt: skip


@asynccontextmanager
async def client(node: Node) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(node))
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as c:
        yield c


def has_type(node: Node, tenant: str, name: str, schema_fragment: str) -> bool:
    view = node.catalog.event_types.get(tenant, {}).get(name)
    return view is not None and view.schema is not None and schema_fragment in view.schema


async def test_catalog_written_in_one_region_judges_publishes_in_the_others(net, started) -> None:
    regions = ["a", "b", "c"]
    nodes = [make_node(net, r, [p for p in regions if p != r]) for r in regions]
    for n in nodes:
        await n.start()
        started.append(n)
    a, b, c = nodes
    async with client(a) as ca, client(b) as cb, client(c) as cc:
        assert (await ca.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
        made = await ca.post("/v1/tenants/acme/event-types",
                             json={"name": "order.paid", "schema": ORDER})  # fmt: skip
        assert made.status_code == 201, made.text
        # each region judges with the catalog its own registry holds: wait for it
        await eventually(lambda: all(has_type(n, "acme", "order.paid", '"qty"') for n in nodes))
        bad = {"event_type": "order.paid", "payload": {"id": "o", "lines": [{"qty": 0}]}}
        good = {"event_type": "order.paid", "payload": {"id": "o", "lines": [{"qty": 2}]}}
        for cl in (ca, cb, cc):
            resp = await cl.post("/v1/tenants/acme/events", json=bad)
            assert resp.status_code == 422, resp.text
            body = resp.json()
            assert body["error"] == "schema_violation"
            assert body["path"] == "/lines/0/qty" and body["field"] == "payload"
            resp = await cl.post("/v1/tenants/acme/events", json=good)
            assert resp.status_code == 202, resp.text
        # a change in c (schema dropped, strict mode on) reaches a and b as well
        assert (await cc.patch("/v1/tenants/acme/event-types/order.paid",
                               json={"schema": None})).status_code == 200  # fmt: skip
        assert (await cc.patch("/v1/tenants/acme",
                               json={"strict_event_types": True})).status_code == 200  # fmt: skip
        await eventually(
            lambda: all(
                n.catalog.event_types["acme"]["order.paid"].schema is None
                and "acme" in n.catalog.strict
                for n in nodes
            )
        )
        for cl in (ca, cb, cc):
            assert (await cl.post("/v1/tenants/acme/events", json=bad)).status_code == 202
            resp = await cl.post("/v1/tenants/acme/events",
                                 json={"event_type": "order.shipped", "payload": {}})  # fmt: skip
            assert resp.status_code == 422 and resp.json()["error"] == "unknown_event_type"
        await eventually(lambda: len({n.catalog.registry.state_hash() for n in nodes}) == 1)
