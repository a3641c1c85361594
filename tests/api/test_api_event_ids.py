"""A client-chosen event id (publish body member ``id``) over real HTTP against one node:
it becomes the event's id and ``webhook-id``; a repeat returns the event; a reuse with
another body is 409; a malformed id is 422 naming ``id``."""

from __future__ import annotations

import asyncio

import pytest
from api_support import Api, assert_problem, eventually

EID = "evt_01JEV7Q0T4G5Z8C3M9WBX2N6HR"


async def test_client_id_is_the_event_id_and_dedupes(api: Api, tenant: str, receiver) -> None:
    ep = await api.client.post(f"/v1/tenants/{tenant}/endpoints", json={"url": receiver.url("h")})
    receiver.secrets["h"] = ep.json()["secret"]
    body = {"id": EID, "event_type": "order.paid", "payload": {"n": 1}}
    first = await api.client.post(f"/v1/tenants/{tenant}/events", json=body)
    assert first.status_code == 202, first.text
    assert first.json()["id"] == EID and not first.json().get("duplicate")
    again = await api.client.post(f"/v1/tenants/{tenant}/events", json=body)
    assert again.status_code == 202 and again.json()["id"] == EID
    assert again.json()["duplicate"] is True
    assert again.json()["received_at"] == first.json()["received_at"]

    async def delivered() -> bool:
        return len(receiver.of("h")) >= 1

    await eventually(delivered)
    await asyncio.sleep(0.3)  # a second delivery would have come by now
    hits = receiver.of("h")
    assert [h.headers["webhook-id"] for h in hits] == [EID]
    event = await api.client.get(f"/v1/tenants/{tenant}/events/{EID}")
    assert event.status_code == 200 and len(event.json()["deliveries"]) == 1


async def test_concurrent_repeats_make_one_event(api: Api, tenant: str) -> None:
    body = {"id": EID, "event_type": "order.paid", "payload": {"n": 1}}
    answers = await asyncio.gather(
        *(api.client.post(f"/v1/tenants/{tenant}/events", json=body) for _ in range(8))
    )
    assert {a.status_code for a in answers} == {202}
    assert {a.json()["id"] for a in answers} == {EID}
    assert sum(not a.json().get("duplicate") for a in answers) == 1
    listed = await api.client.get(f"/v1/tenants/{tenant}/events")
    assert [e["id"] for e in listed.json()["items"]] == [EID]


async def test_id_reused_with_another_event_is_409(api: Api, tenant: str) -> None:
    url = f"/v1/tenants/{tenant}/events"
    body = {"id": EID, "event_type": "order.paid", "payload": {"n": 1}}
    assert (await api.client.post(url, json=body)).status_code == 202
    for other in ({"payload": {"n": 2}}, {"event_type": "order.refunded"}):
        resp = await api.client.post(url, json={**body, **other})
        assert assert_problem(resp, 409, "id")["error"] == "event_id_conflict"
    await api.client.post("/v1/tenants", json={"id": "beta", "name": "Beta"})
    resp = await api.client.post("/v1/tenants/beta/events", json=body)
    assert_problem(resp, 409, "id")


async def test_idempotency_key_with_another_id_is_409(api: Api, tenant: str) -> None:
    url = f"/v1/tenants/{tenant}/events"
    body = {"id": EID, "event_type": "order.paid", "payload": {"n": 1}}
    headers = {"Idempotency-Key": "k-1"}
    assert (await api.client.post(url, json=body, headers=headers)).status_code == 202
    same = await api.client.post(url, json=body, headers=headers)
    assert same.status_code == 202 and same.json()["id"] == EID and same.json()["duplicate"]
    other = {**body, "id": "evt_01JEV7Q0T4G5Z8C3M9WBX2N6HS"}
    resp = await api.client.post(url, json=other, headers=headers)
    assert_problem(resp, 409, "Idempotency-Key")


@pytest.mark.parametrize(
    "bad",
    [
        "evt_01jev7q0t4g5z8c3m9wbx2n6hr",  # lower case
        "evt_01JEV7Q0T4G5Z8C3M9WBX2N6H",  # 25 digits
        "evt_01JEV7Q0T4G5Z8C3M9WBX2N6HRR",  # 27
        "evt_01JEV7Q0T4G5Z8C3M9WBX2N6HI",  # I is not Crockford
        "evt_8ZZZZZZZZZZZZZZZZZZZZZZZZZ",  # over 128 bits (trial of 2026-12-06: accepted)
        "evt_ZZZZZZZZZZZZZZZZZZZZZZZZZZ",
        "dlv_01JEV7Q0T4G5Z8C3M9WBX2N6HR",
        "01JEV7Q0T4G5Z8C3M9WBX2N6HR",
        "",
        42,
        None,
    ],
)
async def test_malformed_id_is_422(api: Api, tenant: str, bad: object) -> None:
    body = {"id": bad, "event_type": "order.paid", "payload": {}}
    resp = await api.client.post(f"/v1/tenants/{tenant}/events", json=body)
    assert_problem(resp, 422, "id")
