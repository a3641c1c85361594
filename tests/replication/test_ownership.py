"""Issue 11 item 3 across regions: a tenant deleted and re-created in one region is empty
in every region (its old events, deliveries and sources are gone there too)."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from memnodes import eventually, make_node

from regionsync.errors import NotFound

SECRET = "old-github-secret"


def _github(body: bytes, delivery: str) -> dict[str, str]:
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {
        "content-type": "application/json",
        "x-hub-signature-256": sig,
        "x-github-event": "issues",
        "x-github-delivery": delivery,
    }


async def test_tenant_deleted_in_one_region_is_gone_in_the_other(net, started) -> None:
    a, b = make_node(net, "a", ["b"]), make_node(net, "b", ["a"])
    for n in (a, b):
        await n.start()
        started.append(n)
    await a.registry_ops.create_tenant("acme", "Acme")
    await a.registry_ops.create_source(
        {"id": "gh", "tenant": "acme", "kind": "github", "secret": SECRET}
    )
    ep = await a.registry_ops.create_endpoint("acme", {"id": "ep1", "url": "https://h.example/"})
    body = b'{"action":"opened"}'
    event, created = await a.ingest.ingest("gh", _github(body, "guid-1"), body)
    assert created

    async def in_b() -> bool:
        return len(await b.store.deliveries_of_event(event.id)) == 1

    await eventually(in_b)
    (delivery,) = await b.store.deliveries_of_event(event.id)
    old_gen = a.catalog.registry.tenant_gen("acme")

    await b.registry_ops.delete_tenant("acme")
    await eventually(lambda: a.catalog.registry.source("gh") is None)
    await b.registry_ops.create_tenant("acme", "Acme again")
    await eventually(lambda: a.catalog.registry.tenant_gen("acme") not in (None, old_gen))
    await b.registry_ops.create_endpoint("acme", {"id": ep.id, "url": "https://h.example/"})
    await eventually(lambda: a.catalog.registry.endpoint(ep.id) is not None)

    for n in (a, b):
        assert n.catalog.registry.source("gh") is None
        with pytest.raises(NotFound):
            await n.ingest.get_event("acme", event.id)
        with pytest.raises(NotFound):
            await n.recovery.retry_delivery("acme", delivery.id)
        with pytest.raises(NotFound):
            await n.ingest.ingest("gh", _github(body, "guid-2"), body)
        rows, nxt = await n.recovery.deliveries_page("acme", ep.id, None, None, None, 50)
        assert rows == [] and nxt is None
