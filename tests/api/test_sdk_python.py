"""The Python SDK (clients/python) against a real node: every resource of the API through
the SDK's methods, publish with its event id, a refusal as ApiError, and the sync client
(in a thread: the node serves on this test's event loop)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json

from api_support import Api, eventually
from regionsync_client import ApiError, AsyncClient, Client


async def test_sdk_walks_the_api(api: Api, receiver) -> None:
    async with AsyncClient([api.base], discover=False) as sdk:
        assert (await sdk.healthz())["status"] == "ok"
        assert (await sdk.whoami())["scope"]
        await sdk.create_tenant(id="acme", name="Acme")
        assert (await sdk.get_tenant("acme"))["name"] == "Acme"
        assert (await sdk.update_tenant("acme", name="Acme Corp"))["name"] == "Acme Corp"
        assert [t["id"] async for t in sdk.iterate("list_tenants", limit=1)] == ["acme"]
        await sdk.create_event_type("acme", name="order.paid", description="paid")
        assert (await sdk.get_event_type("acme", "order.paid"))["description"] == "paid"
        await sdk.update_event_type("acme", "order.paid", description="settled")
        assert len((await sdk.list_event_types("acme"))["items"]) == 1
        ep = await sdk.create_endpoint("acme", url=receiver.url("sdk"))
        receiver.secrets["sdk"] = ep["secret"]
        assert (await sdk.get_endpoint("acme", ep["id"]))["url"] == receiver.url("sdk")
        test = await sdk.test_filter("acme", ep["id"], payload={"a": 1})
        assert test["matches"] is True
        await sdk.update_endpoint("acme", ep["id"], description="sdk")
        rotated = await sdk.rotate_secret("acme", ep["id"])
        receiver.secrets["sdk"] = rotated["secret"]
        assert len((await sdk.list_endpoints("acme"))["items"]) == 1

        event = await sdk.publish("acme", "order.paid", {"order": 7}, "key-7")
        again = await sdk.publish("acme", "order.paid", {"order": 7}, "key-7", event_id=event["id"])
        assert again["id"] == event["id"] and again.get("duplicate") is True

        async def delivered() -> bool:
            return any(h.headers["webhook-id"] == event["id"] for h in receiver.of("sdk"))

        await eventually(delivered)
        full = await sdk.get_event("acme", event["id"])
        assert full["payload"] == {"order": 7} and len(full["deliveries"]) == 1
        summaries = await sdk.list_events("acme", event_type="order.*")
        assert [e["id"] for e in summaries["items"]] == [event["id"]]
        dlv = full["deliveries"][0]
        assert (await sdk.list_deliveries("acme", endpoint=ep["id"]))["items"][0]["id"] == dlv["id"]
        assert (await sdk.list_endpoint_deliveries("acme", ep["id"]))["items"]

        async def attempted() -> bool:
            return bool((await sdk.list_attempts("acme", dlv["id"]))["items"])

        await eventually(attempted)
        assert (await sdk.list_endpoint_attempts("acme", ep["id"]))["items"]
        retried = await sdk.retry_delivery("acme", dlv["id"])
        assert retried["event"] == event["id"]
        job = await sdk.recover("acme", ep["id"], since="2020-01-01T00:00:00Z")
        assert (await sdk.get_job("acme", job["id"]))["kind"] == job["kind"]
        assert (await sdk.list_jobs("acme"))["items"]
        await sdk.replay_missing("acme", ep["id"], since="2020-01-01T00:00:00Z")
        await _sources_and_tokens(sdk)
        assert (await sdk.cluster())["region"] == "us-east-1"
        assert "items" in await sdk.cluster_regions()
        assert "regionsync" in await sdk.metrics()
        assert (await sdk.readyz())["status"]
        assert "items" in await sdk.list_audit(tenant="acme")
        await sdk.delete_event_type("acme", "order.paid")
        await sdk.delete_endpoint("acme", ep["id"])
        await sdk.delete_tenant("acme")
        try:
            await sdk.get_tenant("acme")
        except ApiError as err:
            assert err.status == 404 and err.field == "tenant"
        else:
            raise AssertionError("a deleted tenant was found")


async def _sources_and_tokens(sdk: AsyncClient) -> None:
    src = await sdk.create_source(tenant="acme", kind="github", secret="s3cret")
    assert (await sdk.get_source(src["id"]))["kind"] == "github"
    assert [s["id"] for s in (await sdk.list_sources(tenant="acme"))["items"]] == [src["id"]]
    body = json.dumps({"action": "opened"}).encode()
    sig = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    headers = {"content-type": "application/json", "x-hub-signature-256": sig,
               "x-github-event": "issues", "x-github-delivery": "d-1"}  # fmt: skip
    first = await sdk.send_inbound(src["id"], body, headers)
    assert (await sdk.send_inbound(src["id"], body, headers))["id"] == first["id"]
    await sdk.delete_source(src["id"])
    token = await sdk.create_token(scope="tenant:acme:publish", name="ci")
    assert token["token"] and any(
        t["id"] == token["id"] for t in (await sdk.list_tokens())["items"]
    )
    await sdk.revoke_token(token["id"])
    try:
        await sdk.remove_region("nowhere-1")
    except ApiError as err:
        assert err.status in (404, 409)


async def test_sync_client_and_refusals(api: Api, tenant: str) -> None:
    def work() -> tuple[str, str, ApiError]:
        with Client(api.base, discover=False) as sdk:
            event = sdk.publish(tenant, "order.paid", {"n": 1})
            same = sdk.publish(tenant, "order.paid", {"n": 1}, event_id=event["id"])
            try:
                sdk.publish(tenant, "order.paid", {"n": 2}, event_id=event["id"])
            except ApiError as err:
                return event["id"], same["id"], err
            raise AssertionError("an id reused with another payload was accepted")

    first, same, err = await asyncio.to_thread(work)
    assert first == same and err.status == 409 and err.field == "id"
    assert err.error == "event_id_conflict"
