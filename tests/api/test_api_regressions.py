"""Regression tests for bugs found while testing the HTTP API."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_support import Api, RecordingReceiver, assert_problem, eventually, snapshot

T = "acme"
OK_URL = "http://127.0.0.1:9/hook"
JSON = {"content-type": "application/json"}
TENANTS = f"/v1/tenants/{T}"
ENDPOINTS = f"{TENANTS}/endpoints"
EVENTS = f"{TENANTS}/events"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/tenants", '{"name": "\\ud800"}'),
        (ENDPOINTS, f'{{"url": "{OK_URL}", "description": "\\udc00"}}'),
    ],
    ids=["tenant-name", "endpoint-description"],
)  # event payloads keep the escape as written: tests/api/test_api_json_policy.py
async def test_lone_surrogate_in_json_string_is_a_client_error(
    api: Api, tenant: str, path: str, body: str
) -> None:
    before = await snapshot(api, T)
    resp = await api.client.post(path, content=body.encode(), headers=JSON)
    assert resp.status_code in (400, 422), resp.text
    assert_problem(resp, resp.status_code)
    assert await snapshot(api, T) == before


def _strict_json(data: bytes) -> Any:
    def reject(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(data, parse_constant=reject)


async def test_out_of_range_number_is_rejected_or_delivered_as_json(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    ep = await api.client.post(f"/v1/tenants/{T}/endpoints", json={"url": receiver.url("n")})
    receiver.secrets["n"] = ep.json()["secret"]
    resp = await api.client.post(
        EVENTS, content=b'{"event_type": "a", "payload": {"n": 1e400}}', headers=JSON
    )
    if resp.status_code != 202:
        assert_problem(resp, 422, "payload")
        return
    hits = await eventually(lambda: _async(receiver.of("n")))
    _strict_json(hits[0].body)  # what the receiver got must be JSON
    ev = (await api.client.get(f"{EVENTS}/{resp.json()['id']}")).json()
    assert ev["payload"] is not None


async def _async(value: Any) -> Any:
    return value


async def test_endpoint_header_value_that_cannot_be_sent(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    resp = await api.client.post(
        f"/v1/tenants/{T}/endpoints",
        json={"url": receiver.url("h"), "headers": {"X-Note": "snow \u2603"}},
    )
    if resp.status_code != 201:
        assert_problem(resp, 422, "headers.X-Note")
        return
    receiver.secrets["h"] = resp.json()["secret"]
    ev = await api.client.post(EVENTS, json={"event_type": "a", "payload": {}})
    dlv = await eventually(lambda: _deliveries(api, ev.json()["id"]), timeout_s=30)

    async def attempted() -> list:
        resp = await api.client.get(f"{TENANTS}/deliveries/{dlv[0]['id']}/attempts")
        return resp.json()["items"]

    # the failure is recorded as an attempt (and retried on the schedule), or it succeeds
    await eventually(attempted, timeout_s=30)


async def _deliveries(api: Api, event_id: str) -> list:
    return (await api.client.get(f"{EVENTS}/{event_id}")).json()["deliveries"]
