"""Issue 11 items 1, 2 and 5 over real HTTP: one JSON policy on every path, numbers in
request text, verified inbound requests never refused for their body's shape."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import urllib.parse
from typing import Any

import httpx
import pytest
from api_support import Api, RecordingReceiver, assert_problem, eventually, snapshot

from regionsync.adapters.routes.paging import seal_cursor

T = "acme"
EVENTS = f"/v1/tenants/{T}/events"
JSON = {"content-type": "application/json"}
GH_SECRET = "gh-secret"
HMAC_SECRET = "hmac-secret"
SW_KEY = b"0123456789abcdef0123456789abcdef"
SW_SECRET = "whsec_" + base64.b64encode(SW_KEY).decode()


async def _source(api: Api, **fields: Any) -> str:
    if fields["kind"] == "hmac":  # the type from a header: bodies of any shape
        fields.setdefault("event_type_from", "header:x-type")
    resp = await api.client.post("/v1/sources", json={"tenant": T, **fields})
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def _gh(body: bytes, delivery: str, ctype: str = "application/json") -> dict[str, Any]:
    sig = "sha256=" + hmac.new(GH_SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"content-type": ctype, "x-hub-signature-256": sig, "x-github-event": "issues",
               "x-github-delivery": delivery}  # fmt: skip
    return {"content": body, "headers": headers}


def _hmac(body: bytes) -> dict[str, Any]:
    sig = hmac.new(HMAC_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {"content": body, "headers": {**JSON, "x-signature": sig, "x-type": "t"}}


def _sw(body: bytes, msg_id: str = "msg_1", ts: str | None = None) -> dict[str, Any]:
    ts = str(int(time.time())) if ts is None else ts
    mac = hmac.new(SW_KEY, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    headers = [(b"content-type", b"application/json"), (b"webhook-id", msg_id.encode()),
               (b"webhook-timestamp", ts.encode("latin-1")),
               (b"webhook-signature", b"v1," + base64.b64encode(mac))]  # fmt: skip
    return {"content": body, "headers": headers}


async def _endpoint(api: Api, receiver: RecordingReceiver, name: str, **fields: Any) -> str:
    ep = await api.client.post(
        f"/v1/tenants/{T}/endpoints", json={"url": receiver.url(name), **fields}
    )
    assert ep.status_code == 201, ep.text
    receiver.secrets[name] = ep.json()["secret"]
    return ep.json()["id"]


async def _hits(receiver: RecordingReceiver, name: str, n: int = 1) -> list:
    async def got() -> list:
        hits = receiver.of(name)
        return hits if len(hits) >= n else []

    return await eventually(got)


# -- item 1: one JSON policy ----------------------------------------------------------------

NOT_JSON = [
    (b'{"v": NaN, "w": Infinity, "big": 1e400}', 400),
    (b'{"v": NaN}', 400),
    (b'{"w": -Infinity}', 400),
    (b'{"big": 1e400}', 422),
    (b'{"big": -1e400}', 422),
    (b'{"a": 1, "a": 2}', 422),
    (b'{"o": {"a": 1, "b": 2, "a": 1}}', 422),
    (b"[" * 965 + b"]" * 965, 422),
    (b"[" * 65 + b"]" * 65, 422),
]


@pytest.mark.parametrize(("payload", "status"), NOT_JSON)
async def test_refused_the_same_on_publish_and_inbound_never_stored(
    api: Api, tenant: str, payload: bytes, status: int
) -> None:
    src = await _source(api, kind="hmac", secret=HMAC_SECRET)
    before = await snapshot(api, T)
    inbound = await api.client.post(f"/in/{src}", **_hmac(payload))
    assert_problem(inbound, status, "body")
    body = b'{"event_type": "a", "payload": ' + payload + b"}"
    published = await api.client.post(EVENTS, content=body, headers=JSON)
    assert_problem(published, status, "body" if status == 400 else "payload")
    assert await snapshot(api, T) == before


async def test_deepest_accepted_payload_reads_back_and_is_delivered(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    await _endpoint(api, receiver, "deep")
    src = await _source(api, kind="hmac", secret=HMAC_SECRET)
    too_deep = b"[" * 65 + b"]" * 65
    assert_problem(await api.client.post(f"/in/{src}", **_hmac(too_deep)), 422, "body")
    payload = b"[" * 64 + b"]" * 64
    for resp in (
        await api.client.post(f"/in/{src}", **_hmac(payload)),
        await api.client.post(
            EVENTS, content=b'{"event_type":"a","payload":' + payload + b"}", headers=JSON
        ),
    ):
        assert resp.status_code == 202, resp.text
        got = await api.client.get(f"{EVENTS}/{resp.json()['id']}")
        assert got.status_code == 200, got.text
        assert b'"payload":' + payload in got.content
    assert [h.body for h in await _hits(receiver, "deep", 2)] == [payload, payload]


@pytest.mark.parametrize(
    "payload",
    [
        b'{"action":"opened","t":"\\ud83d"}',
        b'{"action":"opened","t":"\\udc00x"}',
        b'{"action":"opened","t":["\\ud83d\\ud83d"]}',
        b'{"action":"opened","\\ud800":1}',
    ],
)
async def test_lone_surrogate_escape_is_accepted_and_delivered_as_written(
    api: Api, tenant: str, receiver: RecordingReceiver, payload: bytes
) -> None:
    await _endpoint(api, receiver, "s")
    src = await _source(api, kind="github", secret=GH_SECRET)
    for attempt in range(2):  # a redelivery is the same event, never a 500
        resp = await api.client.post(f"/in/{src}", **_gh(payload, "guid-s"))
        assert resp.status_code == 202, resp.text
        assert resp.json()["duplicate"] is bool(attempt)
    pub = await api.client.post(
        EVENTS, content=b'{"event_type":"a","payload":' + payload + b"}", headers=JSON
    )
    assert pub.status_code == 202, pub.text
    assert [h.body for h in await _hits(receiver, "s", 2)] == [payload, payload]
    for ev in (resp, pub):
        got = await api.client.get(f"{EVENTS}/{ev.json()['id']}")
        assert got.status_code == 200, got.text
        assert b'"payload":' + payload in got.content


EXACT = b'{"amount":12345678901234567.89,"p":1.10,"e":1E2,"z":-0,"big":123456789012345678901}'


async def test_numbers_are_delivered_and_read_back_as_written(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    # filters still see parsed numbers
    await _endpoint(api, receiver, "n", filter={"amount": {"$gt": 1e16}, "p": {"$eq": 1.1}})
    src = await _source(api, kind="hmac", secret=HMAC_SECRET)
    ib = await api.client.post(f"/in/{src}", **_hmac(EXACT))
    spaced = b'{ "payload" : ' + EXACT + b' ,\n "event_type": "a" }'
    pub = await api.client.post(EVENTS, content=spaced, headers=JSON)
    assert ib.status_code == 202 and pub.status_code == 202, (ib.text, pub.text)
    assert [h.body for h in await _hits(receiver, "n", 2)] == [EXACT, EXACT]
    for ev in (ib, pub):
        got = await api.client.get(f"{EVENTS}/{ev.json()['id']}")
        assert got.status_code == 200 and b'"payload":' + EXACT in got.content, got.text
        assert got.json()["event_type"] in ("t", "a")


@pytest.mark.parametrize(
    "body",
    [
        b'{"event_type": "a", "event_type": "b", "payload": {}}',
        b'{"event_type": "a", "payload": {}, "payload": {}}',
        b'{"event_type": "a", "payload": [{"k": 1, "k": 1}]}',
    ],
)
async def test_publish_refuses_repeated_names(api: Api, tenant: str, body: bytes) -> None:
    resp = await api.client.post(EVENTS, content=body, headers=JSON)
    assert resp.status_code == 422, resp.text
    assert_problem(resp, 422)


async def test_registry_bodies_refuse_repeated_names(api: Api, tenant: str) -> None:
    before = await snapshot(api, T)
    resp = await api.client.post(
        "/v1/tenants", content=b'{"id": "x", "name": "a", "name": "b"}', headers=JSON
    )
    assert_problem(resp, 422, "name")
    assert await snapshot(api, T) == before


# -- item 2: numbers parsed from request text -------------------------------------------------


BAD_CURSORS = [
    "9223372036854775808:dlv_x:1",
    "99999999999999999999999:dlv_x:1",
    "\u00b2:dlv_x:1",
    "1:dlv_x:\u00b2",
    "1:dlv_x:9223372036854775808",
    "\u0661:dlv_x:1",
    "-1:dlv_x:1",
    "+1:dlv_x:1",
    " 1:dlv_x:1",
]


async def test_attempts_cursor_is_ascii_digits_in_range(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    eid = await _endpoint(api, receiver, "c")
    url = f"/v1/tenants/{T}/endpoints/{eid}/attempts"
    async with httpx.AsyncClient(
        base_url=api.base, limits=httpx.Limits(max_connections=1)
    ) as one_connection:
        good = seal_cursor("9223372036854775807:dlv_x:1", path=url)
        for cursor in BAD_CURSORS:  # correctly sealed (the checksum is not a secret)
            bad = await one_connection.get(url, params={"cursor": seal_cursor(cursor, path=url)})
            assert_problem(bad, 422, "cursor")
            ok = await one_connection.get(url, params={"cursor": good})
            assert ok.status_code == 200, ok.text  # the keep-alive connection is still good


@pytest.mark.parametrize("ts", ["\u00b2", "9223372036854775808", "1\u00b2", "\u00b9\u00b2"])
async def test_standard_webhooks_timestamp_not_ascii_digits_is_400(
    api: Api, tenant: str, ts: str
) -> None:
    src = await _source(api, kind="standard-webhooks", secret=SW_SECRET)
    resp = await api.client.post(f"/in/{src}", **_sw(b'{"type":"a"}', ts=ts))
    assert_problem(resp, 400, "webhook-timestamp")


@pytest.mark.parametrize("t", ["\u00b2", "9223372036854775808", "\u00b3"])
async def test_stripe_timestamp_not_ascii_digits_is_400(api: Api, tenant: str, t: str) -> None:
    src = await _source(api, kind="stripe", secret="whsec_s")
    body = b'{"id":"evt_1","type":"charge.succeeded"}'
    sig = hmac.new(b"whsec_s", t.encode() + b"." + body, hashlib.sha256).hexdigest()
    header = f"t={t},v1={sig}".encode("latin-1")
    resp = await api.client.post(
        f"/in/{src}",
        content=body,
        headers=[(b"content-type", b"application/json"), (b"stripe-signature", header)],
    )
    assert_problem(resp, 400, "Stripe-Signature")


# -- item 5: a verified inbound request is not refused for its body's shape ---------------


async def test_github_form_encoded_body_is_accepted(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    await _endpoint(api, receiver, "f")
    src = await _source(api, kind="github", secret=GH_SECRET)
    payload = '{"action":"opened","amount":1.10,"title":"caf\u00e9 & +"}'
    form = ("payload=" + urllib.parse.quote_plus(payload)).encode()
    resp = await api.client.post(
        f"/in/{src}", **_gh(form, "guid-f", "application/x-www-form-urlencoded")
    )
    assert resp.status_code == 202, resp.text
    assert resp.json()["event_type"] == "issues.opened"
    assert [h.body for h in await _hits(receiver, "f")] == [payload.encode()]
    # a form with no payload field is a client error, never a 500
    empty = await api.client.post(
        f"/in/{src}", **_gh(b"other=1", "guid-g", "application/x-www-form-urlencoded")
    )
    assert_problem(empty, 400, "payload")
    # only GitHub sends forms: another kind still answers 415 for one
    hm = await _source(api, kind="hmac", secret=HMAC_SECRET)
    body = b"payload=%7B%7D"
    sig = hmac.new(HMAC_SECRET.encode(), body, hashlib.sha256).hexdigest()
    resp = await api.client.post(
        f"/in/{hm}",
        content=body,
        headers={"content-type": "application/x-www-form-urlencoded", "x-signature": sig},
    )
    assert_problem(resp, 415, "content-type")


@pytest.mark.parametrize(
    ("fields", "payload", "want"),
    [
        ({}, b'{"data":{}}', "webhook"),
        ({"default_event_type": "sw.unknown"}, b'{"data":{}}', "sw.unknown"),
        ({"default_event_type": "sw.unknown"}, b"[1, 2]", "sw.unknown"),
        ({"default_event_type": "sw.unknown"}, b'{"type": 5}', "sw.unknown"),
        ({"default_event_type": "sw.unknown"}, b'{"type": "user.created"}', "user.created"),
    ],
)
async def test_standard_webhooks_without_type_gets_the_default(
    api: Api, tenant: str, fields: dict, payload: bytes, want: str
) -> None:
    src = await _source(api, kind="standard-webhooks", secret=SW_SECRET, **fields)
    resp = await api.client.post(f"/in/{src}", **_sw(payload))
    assert resp.status_code == 202, resp.text
    assert resp.json()["event_type"] == want
    got = (await api.client.get(f"/v1/sources/{src}")).json()
    assert got["default_event_type"] == fields.get("default_event_type", "webhook")


async def test_default_event_type_is_validated(api: Api, tenant: str) -> None:
    base = {"tenant": T, "kind": "standard-webhooks", "secret": SW_SECRET}
    ok = await api.client.post("/v1/sources", json={**base, "default_event_type": "a.b-c_1"})
    assert ok.status_code == 201 and ok.json()["default_event_type"] == "a.b-c_1", ok.text
    for value in ["a b", "", 5, None, "x" * 129, ["a"]]:
        resp = await api.client.post("/v1/sources", json={**base, "default_event_type": value})
        assert_problem(resp, 422, "default_event_type")


async def test_default_event_type_is_in_the_openapi_source_schema(api: Api) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    body = doc["paths"]["/v1/sources"]["post"]["requestBody"]["content"]["application/json"]
    assert "default_event_type" in body["schema"]["properties"]
