"""Event-type catalogs over real HTTP (issue 18): CRUD under
``/v1/tenants/{t}/event-types``, schemas checked at registration and at publish (both the
fast lane and the FastAPI route, and inbound sources), strict mode, deprecation."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import httpx
import pytest
from api_support import Api, assert_problem, snapshot

from regionsync.adapters.http_api import create_app

T = "acme"
TYPES = f"/v1/tenants/{T}/event-types"
EVENTS = f"/v1/tenants/{T}/events"
ORDER = {
    "type": "object",
    "required": ["id", "items"],
    "properties": {
        "id": {"type": "string"},
        "items": {"type": "array", "items": {"type": "object", "required": ["id"],
                                             "properties": {"id": {"type": "integer"}}}},
    },
}  # fmt: skip
GOOD = {"id": "o1", "items": [{"id": 1}]}
BAD = {"id": "o1", "items": [{"id": "one"}]}


def schema_problem(resp: httpx.Response, path: str) -> dict[str, Any]:
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert body["error"] == "schema_violation" and body["field"] == "payload", body
    assert body["path"] == path, body
    assert isinstance(body["schema_path"], str) and body["detail"], body
    return body


async def _order_type(api: Api, **extra: Any) -> dict[str, Any]:
    body = {"name": "order.paid", "description": "an order was paid", "schema": ORDER, **extra}
    resp = await api.client.post(TYPES, json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()


async def test_crud(api: Api, tenant: str) -> None:
    c = api.client
    made = await _order_type(api)
    assert made["name"] == "order.paid" and made["schema"] == ORDER
    assert made["deprecated"] is False and made["deprecated_at"] is None
    assert_problem(await c.post(TYPES, json={"name": "order.paid"}), 409, "name")
    await c.post(TYPES, json={"name": "user.created"})
    listed = (await c.get(TYPES)).json()
    assert [t["name"] for t in listed["items"]] == ["order.paid", "user.created"]
    assert listed["next"] is None
    got = await c.get(f"{TYPES}/user.created")
    assert got.status_code == 200 and got.json()["schema"] is None
    patched = await c.patch(f"{TYPES}/order.paid", json={"description": "paid", "schema": None})
    assert patched.status_code == 200, patched.text
    assert patched.json()["description"] == "paid" and patched.json()["schema"] is None
    assert (await c.delete(f"{TYPES}/order.paid")).status_code == 204
    assert_problem(await c.get(f"{TYPES}/order.paid"), 404, "event_type")
    assert_problem(await c.delete(f"{TYPES}/order.paid"), 404, "event_type")
    assert_problem(await c.patch(f"{TYPES}/order.paid", json={}), 404, "event_type")
    assert_problem(await c.get("/v1/tenants/nobody/event-types"), 404, "tenant")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "schema": {"type": "strin"}}, "schema"),
        ({"name": "x", "schema": {"required": "id"}}, "schema"),
        ({"name": "x", "schema": {"$ref": "https://example.com/x.json"}}, "schema"),
        ({"name": "x", "schema": 7}, "schema"),
        ({"name": "x y"}, "name"),
        ({"name": "x", "deprecated": 1}, "deprecated"),
        ({"name": "x", "extra": 1}, "extra"),
    ],
)
async def test_bad_definitions_422_and_nothing_stored(
    api: Api, tenant: str, body: dict[str, Any], field: str
) -> None:
    before = await snapshot(api, T)
    assert_problem(await api.client.post(TYPES, json=body), 422, field)
    assert await snapshot(api, T) == before


async def test_schema_checked_on_both_lanes(api: Api, tenant: str) -> None:
    """The fast lane (what a server serves) and the FastAPI route (behind it) judge a
    payload alike: 422 with the JSON Pointer of the failing value, 202 when it conforms."""
    await _order_type(api)
    fastapi_app = create_app(api.node).app  # the FastAPI app without the fast lane
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=fastapi_app), base_url="http://node"
    ) as routed:
        for client in (api.client, routed):
            before = await snapshot(api)
            bad = await client.post(EVENTS, json={"event_type": "order.paid", "payload": BAD})
            schema_problem(bad, "/items/0/id")
            missing = await client.post(EVENTS, json={"event_type": "order.paid",
                                                      "payload": {"items": []}})  # fmt: skip
            schema_problem(missing, "")
            assert await snapshot(api) == before  # nothing stored or counted
            ok = await client.post(EVENTS, json={"event_type": "order.paid", "payload": GOOD})
            assert ok.status_code == 202, ok.text
            assert "Deprecation" not in ok.headers and "warnings" not in ok.json()
    # a type without a schema, and a type not in the catalog, take any payload
    assert (await api.client.post(TYPES, json={"name": "free"})).status_code == 201
    for name in ("free", "not.catalogued"):
        resp = await api.client.post(EVENTS, json={"event_type": name, "payload": [1, "x"]})
        assert resp.status_code == 202, resp.text


async def test_schema_change_applies_to_the_next_publish(api: Api, tenant: str) -> None:
    await _order_type(api)
    strict_id = {
        "schema": {
            **ORDER,
            "properties": {**ORDER["properties"], "id": {"type": "string", "minLength": 3}},
        }
    }
    assert (await api.client.patch(f"{TYPES}/order.paid", json=strict_id)).status_code == 200
    resp = await api.client.post(EVENTS, json={"event_type": "order.paid", "payload": GOOD})
    schema_problem(resp, "/id")
    await api.client.delete(f"{TYPES}/order.paid")
    resp = await api.client.post(EVENTS, json={"event_type": "order.paid", "payload": BAD})
    assert resp.status_code == 202, resp.text


async def test_idempotent_repeat_is_not_judged_again(api: Api, tenant: str) -> None:
    await _order_type(api)
    key = {"idempotency-key": "k1"}
    first = await api.client.post(EVENTS, json={"event_type": "order.paid", "payload": GOOD},
                                  headers=key)  # fmt: skip
    assert first.status_code == 202
    await api.client.patch(f"{TYPES}/order.paid", json={"schema": False})  # refuses all
    again = await api.client.post(EVENTS, json={"event_type": "order.paid", "payload": GOOD},
                                  headers=key)  # fmt: skip
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]
    other = await api.client.post(EVENTS, json={"event_type": "order.paid", "payload": GOOD})
    schema_problem(other, "")


async def test_strict_mode(api: Api, tenant: str) -> None:
    c = api.client
    await _order_type(api)
    before_strict = await c.post(
        f"/v1/tenants/{T}/endpoints", json={"url": "http://127.0.0.1:9/a", "event_types": ["x"]}
    )
    assert before_strict.status_code == 201  # not strict yet
    resp = await c.patch(f"/v1/tenants/{T}", json={"strict_event_types": True})
    assert resp.status_code == 200 and resp.json()["strict_event_types"] is True
    assert (await c.get(f"/v1/tenants/{T}")).json()["strict_event_types"] is True
    # publishing an unknown type is refused; a known one is judged by its schema
    unknown = await c.post(EVENTS, json={"event_type": "order.shipped", "payload": {}})
    body = assert_problem(unknown, 422, "event_type")
    assert body["error"] == "unknown_event_type" and "order.shipped" in body["detail"]
    ok = await c.post(EVENTS, json={"event_type": "order.paid", "payload": GOOD})
    assert ok.status_code == 202
    # subscriptions: exact types must be known, prefix.* must match one, * always passes
    eps = f"/v1/tenants/{T}/endpoints"
    for bad in (["order.paid", "order.shipped"], ["invoice.*"]):
        resp = await c.post(eps, json={"url": "http://127.0.0.1:9/a", "event_types": bad})
        body = assert_problem(resp, 422, "event_types")
        assert body["error"] == "unknown_event_type" and bad[-1] in body["detail"]
    good = await c.post(
        eps, json={"url": "http://127.0.0.1:9/a", "event_types": ["order.paid", "order.*", "*"]}
    )
    assert good.status_code == 201, good.text
    ep = good.json()["id"]
    resp = await c.patch(f"{eps}/{ep}", json={"event_types_add": ["nope"]})
    assert_problem(resp, 422, "event_types")
    resp = await c.patch(f"{eps}/{ep}", json={"event_types": ["nope"]})
    assert_problem(resp, 422, "event_types")
    # an endpoint created before strict mode keeps working and can be changed otherwise
    old = before_strict.json()["id"]
    assert (await c.patch(f"{eps}/{old}", json={"description": "d"})).status_code == 200
    off = await c.patch(f"/v1/tenants/{T}", json={"strict_event_types": False})
    assert off.status_code == 200
    resp = await c.post(EVENTS, json={"event_type": "order.shipped", "payload": {}})
    assert resp.status_code == 202


async def test_deprecated_type_is_accepted_with_a_deprecation_header(api: Api, tenant: str) -> None:
    await _order_type(api)
    resp = await api.client.patch(f"{TYPES}/order.paid", json={"deprecated": True})
    assert resp.status_code == 200 and resp.json()["deprecated"] is True
    deprecated_at = resp.json()["deprecated_at"]
    assert deprecated_at is not None
    ok = await api.client.post(EVENTS, json={"event_type": "order.paid", "payload": GOOD})
    assert ok.status_code == 202, ok.text
    header = ok.headers["deprecation"]
    assert header.startswith("@") and header[1:].isdigit()  # RFC 9745: @<unix seconds>
    assert ok.json()["warnings"] == ["event type 'order.paid' is deprecated"]
    # still judged by its schema
    schema_problem(
        await api.client.post(EVENTS, json={"event_type": "order.paid", "payload": BAD}),
        "/items/0/id",
    )
    await api.client.patch(f"{TYPES}/order.paid", json={"deprecated": False})
    ok = await api.client.post(EVENTS, json={"event_type": "order.paid", "payload": GOOD})
    assert ok.status_code == 202 and "deprecation" not in ok.headers


async def test_inbound_payloads_are_judged_strict_mode_does_not_refuse_them(
    api: Api, tenant: str
) -> None:
    secret = "hmac-secret"
    src = await api.client.post(
        "/v1/sources",
        json={"tenant": T, "kind": "hmac", "secret": secret, "event_type_from": "header:x-type"},
    )
    assert src.status_code == 201, src.text
    sid = src.json()["id"]

    def signed(payload: bytes, event_type: str) -> dict[str, Any]:
        sig = hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()
        headers = {"content-type": "application/json", "x-signature": sig, "x-type": event_type}
        return {"content": payload, "headers": headers}

    await _order_type(api)
    await api.client.patch(f"/v1/tenants/{T}", json={"strict_event_types": True})
    bad = await api.client.post(f"/in/{sid}", **signed(b'{"id": 5, "items": []}', "order.paid"))
    schema_problem(bad, "/id")
    ok = await api.client.post(f"/in/{sid}", **signed(b'{"id": "5", "items": []}', "order.paid"))
    assert ok.status_code == 202, ok.text
    unknown = await api.client.post(f"/in/{sid}", **signed(b"{}", "not.catalogued"))
    assert unknown.status_code == 202, unknown.text
    await api.client.patch(f"{TYPES}/order.paid", json={"deprecated": True})
    old = await api.client.post(f"/in/{sid}", **signed(b'{"id": "6", "items": []}', "order.paid"))
    assert old.status_code == 202 and old.headers["deprecation"].startswith("@")
    assert old.json()["warnings"] and old.json()["duplicate"] is False


async def test_tenant_patch_rights(api: Api, tenant: str) -> None:
    c = api.client
    made = await c.post("/v1/tokens", json={"scope": f"tenant:{T}:manage", "name": "m"})
    manage = {"authorization": f"Bearer {made.json()['token']}"}
    resp = await c.patch(f"/v1/tenants/{T}", json={"strict_event_types": True, "name": "A"},
                         headers=manage)  # fmt: skip
    assert resp.status_code == 200 and resp.json()["name"] == "A"
    for field, value in (("publish_rate_per_s", 5), ("ack_policy", "one-remote")):
        resp = await c.patch(f"/v1/tenants/{T}", json={field: value}, headers=manage)
        assert_problem(resp, 403, field)
        assert (await c.patch(f"/v1/tenants/{T}", json={field: value})).status_code == 200
    assert_problem(await c.patch(f"/v1/tenants/{T}", json={"strict_event_types": 1}), 422,
                   "strict_event_types")  # fmt: skip
    assert_problem(await c.patch(f"/v1/tenants/{T}", json={"id": "x"}), 422, "id")
    created = await c.post("/v1/tenants", json={"id": "s", "name": "S", "strict_event_types": True})
    assert created.status_code == 201 and created.json()["strict_event_types"] is True
