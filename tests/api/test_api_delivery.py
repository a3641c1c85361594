"""Delivery end to end on one node in-process: a loopback receiver gets published events,
signed per Standard Webhooks (checked here with the official library), and a failing
receiver gets retried with the same webhook-id while every attempt is logged."""

from __future__ import annotations

import base64
import json

import pytest
from api_support import Api, RecordingReceiver, eventually
from standardwebhooks.webhooks import Webhook, WebhookVerificationError


async def _hits(receiver: RecordingReceiver, name: str, n: int) -> list:
    hits = receiver.of(name)
    return hits if len(hits) >= n else []


async def test_published_event_arrives_signed_with_event_id(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    c = api.client
    ep = (
        await c.post(
            f"/v1/tenants/{tenant}/endpoints",
            json={"url": receiver.url("orders"), "headers": {"X-Tenant": tenant}},
        )
    ).json()
    receiver.secrets["orders"] = ep["secret"]
    payload = {"order": 1, "total": "9.99", "tags": ["a", "ü"]}
    resp = await c.post(
        f"/v1/tenants/{tenant}/events", json={"event_type": "order.created", "payload": payload}
    )
    assert resp.status_code == 202, resp.text
    event_id = resp.json()["id"]

    (hit,) = await eventually(lambda: _hits(receiver, "orders", 1))
    assert hit.status == 204
    assert hit.headers["webhook-id"] == event_id
    assert hit.headers["content-type"].startswith("application/json")
    assert hit.headers["x-tenant"] == tenant
    assert json.loads(hit.body) == payload
    # the official Standard Webhooks library accepts the signature ...
    verified = Webhook(ep["secret"]).verify(hit.body, hit.headers)
    assert verified == payload
    # ... and rejects it under another secret or for another body
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + base64.b64encode(b"k" * 32).decode()).verify(hit.body, hit.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(ep["secret"]).verify(hit.body + b" ", hit.headers)
    assert receiver.failed == 0 and receiver.seen == {("orders", event_id): 1}

    async def delivered() -> bool:
        ev = (await c.get(f"/v1/tenants/{tenant}/events/{event_id}")).json()
        return ev["deliveries"][0]["status"] == "delivered"

    await eventually(delivered)


async def test_500_then_204_is_retried_with_the_same_webhook_id(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    c = api.client
    ep = (
        await c.post(f"/v1/tenants/{tenant}/endpoints", json={"url": receiver.url("flaky")})
    ).json()
    receiver.secrets["flaky"] = ep["secret"]
    receiver.fail_first["flaky"] = 1
    resp = await c.post(
        f"/v1/tenants/{tenant}/events", json={"event_type": "a", "payload": {"n": 1}}
    )
    event_id = resp.json()["id"]

    first, second = await eventually(lambda: _hits(receiver, "flaky", 2))
    assert (first.status, second.status) == (500, 204)
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == event_id
    assert first.body == second.body
    for hit in (first, second):
        Webhook(ep["secret"]).verify(hit.body, hit.headers)

    async def final() -> dict | None:
        ev = (await c.get(f"/v1/tenants/{tenant}/events/{event_id}")).json()
        (d,) = ev["deliveries"]
        return d if d["status"] == "delivered" else None

    d = await eventually(final)
    assert d["attempts"] == 2
    attempts = (await c.get(f"/v1/tenants/{tenant}/deliveries/{d['id']}/attempts")).json()
    rows = attempts["items"][::-1]  # newest first by default
    assert [a["status_code"] for a in rows] == [500, 204]
    assert rows[0]["error"] == "http_500" and rows[1]["error"] is None
    assert "try again" in rows[0]["response_excerpt"]
    assert rows[0]["at"] <= rows[1]["at"]
    assert all(a["region"] == "us-east-1" for a in rows)
    assert len(receiver.of("flaky")) == 2  # nothing more once delivered


def _header_lines(text: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in text.split("\n"))


async def test_attempts_record_the_request_headers_they_sent(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    """Each attempt keeps the headers it sent (issue 15): the Standard Webhooks ones, whose
    recorded signature verifies with the official library against the recorded timestamp
    and the payload, and the endpoint's own, credential-named ones redacted."""
    c = api.client
    own = {"X-Team": "blue", "Authorization": "Bearer s3cr3t-value", "X-Api-Key": "key-123"}
    ep = (
        await c.post(
            f"/v1/tenants/{tenant}/endpoints", json={"url": receiver.url("rh"), "headers": own}
        )
    ).json()
    receiver.secrets["rh"] = ep["secret"]
    receiver.fail_first["rh"] = 1
    payload = b'{"total":1.10,"n":7}'  # delivered as written (raw payload format)
    resp = await c.post(
        f"/v1/tenants/{tenant}/events",
        content=b'{"event_type":"order.paid","payload":' + payload + b"}",
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 202, resp.text
    event_id = resp.json()["id"]
    hits = await eventually(lambda: _hits(receiver, "rh", 2))
    assert [h.status for h in hits] == [500, 204] and hits[1].body == payload

    async def both_attempts() -> list | None:
        ev = (await c.get(f"/v1/tenants/{tenant}/events/{event_id}")).json()
        (d,) = ev["deliveries"]
        url = f"/v1/tenants/{tenant}/deliveries/{d['id']}/attempts?order=asc"
        rows = (await c.get(url)).json()["items"]
        return rows if len(rows) == 2 else None

    rows = await eventually(both_attempts)
    for a, hit in zip(rows, hits, strict=True):
        sent = _header_lines(a["request_headers"])
        assert sent["webhook-id"] == event_id
        assert sent["webhook-timestamp"].isdigit()
        assert sent["webhook-signature"].startswith("v1,")
        # what was recorded is what the receiver got, credentials aside
        for name in ("webhook-id", "webhook-timestamp", "webhook-signature",
                     "webhook-event-type", "content-type", "user-agent", "X-Team"):  # fmt: skip
            assert sent[name] == hit.headers[name.lower()], name
        assert sent["Authorization"] == sent["X-Api-Key"] == "[redacted]"
        assert hit.headers["authorization"] == "Bearer s3cr3t-value"
        text = a["request_headers"]
        assert "s3cr3t" not in text and "key-123" not in text and ep["secret"] not in text
        # the recorded signature verifies against the recorded timestamp and the payload
        std = {k: sent[k] for k in ("webhook-id", "webhook-timestamp", "webhook-signature")}
        assert Webhook(ep["secret"]).verify(payload, std) == json.loads(payload)
        with pytest.raises(WebhookVerificationError):
            Webhook(ep["secret"]).verify(payload.replace(b"7", b"8"), std)
        with pytest.raises(WebhookVerificationError):  # another timestamp: another signature
            Webhook(ep["secret"]).verify(
                payload, {**std, "webhook-timestamp": str(int(std["webhook-timestamp"]) - 1)}
            )
    log = (await c.get(f"/v1/tenants/{tenant}/endpoints/{ep['id']}/attempts?order=asc")).json()
    assert [a["request_headers"] for a in log["items"]] == [a["request_headers"] for a in rows]
