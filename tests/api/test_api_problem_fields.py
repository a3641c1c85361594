"""Problem bodies name their field and say what is wrong (trial report findings 11, 12,
13, 15): a too-long GitHub delivery id or one with a C1 control, display text with
control or bidi characters, hmac header names that are not RFC 9110 tokens, settings of
another source kind, an empty Idempotency-Key."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from api_support import Api, assert_problem
from test_api_json_policy import GH_SECRET, _gh, _source

BAD_TEXT = ["\u0000", "a\u0007b", "\u202eabc", "x\u2066y", "a\u200bb", "l\u2028m", "\x7f"]


async def test_a_too_long_github_delivery_says_so(api: Api, tenant: str) -> None:
    src = await _source(api, kind="github", secret=GH_SECRET)
    body = b'{"action":"opened"}'
    resp = await api.client.post(f"/in/{src}", **_gh(body, "d" * 500))
    problem = assert_problem(resp, 400, "X-GitHub-Delivery")
    assert "too long" in problem["detail"] and "missing" not in problem["detail"]
    headers = _gh(body, "x")["headers"]
    del headers["x-github-delivery"]
    resp = await api.client.post(f"/in/{src}", content=body, headers=headers)
    assert "missing" in assert_problem(resp, 400, "X-GitHub-Delivery")["detail"]


async def test_a_github_delivery_with_a_c1_byte_is_400_and_stores_nothing(
    api: Api, tenant: str
) -> None:
    """Header bytes 0x80-0x9F arrive as C1 controls (Latin-1): refused like the body's ids."""
    src = await _source(api, kind="github", secret=GH_SECRET)
    body = b'{"action":"opened"}'
    args = _gh(body, "x")
    args["headers"]["x-github-delivery"] = b"d-\x9b1"
    resp = await api.client.post(f"/in/{src}", **args)
    assert "U+009B" in assert_problem(resp, 400, "X-GitHub-Delivery")["detail"]
    events = (await api.client.get(f"/v1/tenants/{tenant}/events")).json()
    assert events["items"] == []


@pytest.mark.parametrize("text", BAD_TEXT)
async def test_display_text_refuses_control_and_format_characters(api: Api, text: str) -> None:
    resp = await api.client.post("/v1/tenants", json={"id": "t1", "name": text})
    assert "control or format" in assert_problem(resp, 422, "name")["detail"]
    assert (await api.client.get("/v1/tenants/t1")).status_code == 404
    resp = await api.client.post("/v1/tokens", json={"scope": "admin", "name": text})
    assert_problem(resp, 422, "name")
    await api.client.post("/v1/tenants", json={"id": "t2", "name": "ok"})
    resp = await api.client.post("/v1/tenants/t2/endpoints", json={
        "url": "http://127.0.0.1:9/x", "description": f"desc {text}"})  # fmt: skip
    assert_problem(resp, 422, "description")


async def test_display_text_keeps_joiners_scripts_and_description_lines(api: Api) -> None:
    for name in ("Acme GmbH", "मैं", "می\u200cخواهم", "👩\u200d💻 team", "Ünïcødé"):
        resp = await api.client.post("/v1/tenants", json={"name": name})
        assert resp.status_code == 201 and resp.json()["name"] == name, resp.text
    await api.client.post("/v1/tenants", json={"id": "t2", "name": "ok"})
    resp = await api.client.post("/v1/tenants/t2/endpoints", json={
        "url": "http://127.0.0.1:9/x", "description": "line one\n\tline two"})  # fmt: skip
    assert resp.status_code == 201, resp.text


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"kind": "hmac", "header": "bad header"}, "header"),
        ({"kind": "hmac", "header": "x:sig"}, "header"),
        ({"kind": "hmac", "header": ""}, "header"),
        ({"kind": "hmac", "event_type_from": "header:bad name"}, "event_type_from"),
        ({"kind": "hmac", "id_from": "header:"}, "id_from"),
        ({"kind": "github", "header": "x-signature"}, "header"),
        ({"kind": "github", "event_type_from": "payload:type"}, "event_type_from"),
        ({"kind": "stripe", "algorithm": "sha1"}, "algorithm"),
        ({"kind": "standard-webhooks", "secret": "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3",
          "prefix": "v1="}, "prefix"),
        # QA 2026-12-02: a prefix no header can carry made a source that verifies nothing
        ({"kind": "hmac", "prefix": "\u00fc\u0000="}, "prefix"),
        ({"kind": "hmac", "prefix": "sha256=\n"}, "prefix"),
        ({"kind": "hmac", "prefix": "\u0101="}, "prefix"),
    ],
)  # fmt: skip
async def test_source_settings_checked_per_kind(
    api: Api, tenant: str, fields: dict, field: str
) -> None:
    body = {"tenant": tenant, "secret": "s3cret", **fields}
    assert_problem(await api.client.post("/v1/sources", json=body), 422, field)


async def test_sources_show_only_their_kinds_settings(api: Api, tenant: str) -> None:
    common = {"id", "tenant", "kind", "priority", "ack_policy", "created_at", "url_path"}
    gh = await api.client.post("/v1/sources", json={"tenant": tenant, "kind": "github",
                                                    "secret": "s"})  # fmt: skip
    assert set(gh.json()) == common, gh.json()
    hm = await api.client.post("/v1/sources", json={"tenant": tenant, "kind": "hmac",
                                                    "secret": "s", "header": "X-Sig"})  # fmt: skip
    assert hm.json()["header"] == "x-sig" and set(hm.json()) == common | {
        "header", "algorithm", "encoding", "prefix", "event_type_from", "id_from",
        "default_event_type"}  # fmt: skip
    listed = {s["id"]: s for s in (await api.client.get("/v1/sources")).json()["items"]}
    assert listed[gh.json()["id"]] == gh.json() and listed[hm.json()["id"]] == hm.json()
    # the hmac source verifies a request carrying its header
    body = b'{"type":"t"}'
    sig = hmac.new(b"s", body, hashlib.sha256).hexdigest()
    headers = {"content-type": "application/json", "X-Sig": sig}
    resp = await api.client.post(f"/in/{hm.json()['id']}", content=body, headers=headers)
    assert resp.status_code == 202, resp.text


async def test_an_empty_idempotency_key_is_422(api: Api, tenant: str) -> None:
    # (curl -H 'Idempotency-Key:' sends no header at all; -H 'Idempotency-Key;' an empty one)
    resp = await api.client.post(f"/v1/tenants/{tenant}/events", headers={"Idempotency-Key": ""},
                                 json={"event_type": "t", "payload": 1})  # fmt: skip
    assert_problem(resp, 422, "Idempotency-Key")
