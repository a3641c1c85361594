"""Issue 18 item 1: every delivery names its event type (``webhook-event-type``), and an
endpoint may ask for the Standard Webhooks payload shape ``{type, timestamp, data}`` with
``data`` the exact payload text; the signature covers the body sent, checked with the
official ``standardwebhooks`` library."""

from __future__ import annotations

import json
from datetime import datetime

from api_support import Api, RecordingReceiver, assert_problem, eventually
from standardwebhooks.webhooks import Webhook

# numbers as the sender wrote them: a parse-and-dump would change each of these
EXACT = b'{"amount": 1.10, "big": 12345678901234567890, "e": 1E2, "neg": -0}'


async def _hits(receiver: RecordingReceiver, name: str, n: int) -> list:
    hits = receiver.of(name)
    return hits if len(hits) >= n else []


async def _endpoint(api: Api, tenant: str, receiver: RecordingReceiver, name: str, **kw) -> dict:
    resp = await api.client.post(
        f"/v1/tenants/{tenant}/endpoints", json={"url": receiver.url(name), **kw}
    )
    assert resp.status_code == 201, resp.text
    ep = resp.json()
    receiver.secrets[name] = ep["secret"]
    return ep


async def _publish_exact(api: Api, tenant: str) -> str:
    body = b'{"event_type": "invoice.paid", "payload": ' + EXACT + b"}"
    resp = await api.client.post(
        f"/v1/tenants/{tenant}/events",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 202, resp.text
    return resp.json()["id"]


async def test_raw_delivery_names_its_event_type_and_keeps_the_payload(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    ep = await _endpoint(api, tenant, receiver, "raw")
    assert ep["payload_format"] == "raw"
    event_id = await _publish_exact(api, tenant)
    (hit,) = await eventually(lambda: _hits(receiver, "raw", 1))
    assert hit.headers["webhook-event-type"] == "invoice.paid"
    assert hit.headers["webhook-id"] == event_id
    assert hit.body == EXACT
    Webhook(ep["secret"]).verify(hit.body, hit.headers)


async def test_standard_webhooks_shape_embeds_the_exact_payload_and_is_signed(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    ep = await _endpoint(api, tenant, receiver, "sw", payload_format="standard-webhooks")
    assert ep["payload_format"] == "standard-webhooks"
    event_id = await _publish_exact(api, tenant)
    (hit,) = await eventually(lambda: _hits(receiver, "sw", 1))
    assert hit.headers["webhook-event-type"] == "invoice.paid"
    # the signature is over the envelope actually sent
    verified = Webhook(ep["secret"]).verify(hit.body, hit.headers)
    assert set(verified) == {"type", "timestamp", "data"}
    assert verified["type"] == "invoice.paid"
    assert hit.body.endswith(b',"data":' + EXACT + b"}")  # byte for byte
    event = (await api.client.get(f"/v1/tenants/{tenant}/events/{event_id}")).json()
    stamp = datetime.fromisoformat(verified["timestamp"].replace("Z", "+00:00"))
    assert verified["timestamp"] == event["received_at"] and stamp.tzinfo is not None
    assert receiver.failed == 0


async def test_payload_format_patch_and_validation(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    c = api.client
    resp = await c.post(
        f"/v1/tenants/{tenant}/endpoints",
        json={"url": receiver.url("x"), "payload_format": "cloudevents"},
    )
    assert_problem(resp, 422, "payload_format")
    ep = await _endpoint(api, tenant, receiver, "p")
    url = f"/v1/tenants/{tenant}/endpoints/{ep['id']}"
    assert_problem(await c.patch(url, json={"payload_format": 3}), 422, "payload_format")
    resp = await c.patch(url, json={"payload_format": "standard-webhooks"})
    assert resp.status_code == 200 and resp.json()["payload_format"] == "standard-webhooks"
    await _publish_exact(api, tenant)
    (hit,) = await eventually(lambda: _hits(receiver, "p", 1))
    assert json.loads(hit.body)["type"] == "invoice.paid"
    # the event type header is ours: an endpoint cannot set it
    resp = await c.patch(url, json={"headers": {"Webhook-Event-Type": "x"}})
    assert_problem(resp, 422, "headers.Webhook-Event-Type")
