"""Consumer portal sessions (issue 43): created by an admin or tenant-manage token, signed
with the region's replicated portal key, scoped to one tenant and the portal's routes
(the full route matrix is in test_api_isolation.py), refused once expired, tampered with,
signed by an unknown key or outliving their tenant; the portal page is framable by the
session's allowed origins only."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from api_support import Api, RecordingReceiver, assert_problem, running_node

from regionsync.core.capabilities import ALL
from regionsync.core.portal import (
    PortalClaims,
    frame_ancestors,
    portal_allows,
    sign_session,
    verify_frame,
    verify_session,
)

ADMIN = "static-admin-token-0123456789"
KEY = bytes(range(32))


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest_asyncio.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with running_node(tmp_path, tokens=[{"token": ADMIN, "scope": "admin"}]) as running:
        running.client.headers.update(bearer(ADMIN))
        for t in ("acme", "other"):
            resp = await running.client.post("/v1/tenants", json={"id": t, "name": t})
            assert resp.status_code == 201, resp.text
        yield running


async def _session(api: Api, tenant: str = "acme", **body: object) -> dict:
    resp = await api.client.post(f"/v1/tenants/{tenant}/portal-sessions", json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()


def test_sign_and_verify() -> None:
    claims = PortalClaims("us-east-1", "acme", "r#1", 1000, 61_000, "pss_1", ("https://a.example",))
    session, frame = sign_session(KEY, claims)
    keys = {"us-east-1": KEY}.get
    assert session.startswith("rsp_")
    assert verify_session(session, keys, 60_999) == claims
    assert verify_session(session, keys, 61_000) is None  # expired: exp is exclusive
    assert verify_session(session, {"us-east-1": bytes(32)}.get, 2000) is None  # other key
    assert verify_session(session, {}.get, 2000) is None  # unknown key id
    assert verify_session(session[:-2] + "AA", keys, 2000) is None  # signature changed
    # the claims changed (another tenant), signature kept: refused
    other, _ = sign_session(
        KEY, PortalClaims("us-east-1", "other", "r#1", 1000, 61_000, "pss_1", ())
    )
    forged = other.split(".")[0] + "." + session.split(".")[1]
    assert verify_session(forged, keys, 2000) is None
    # the frame grant is no session, and a session is no frame grant
    assert verify_session("rsp_" + frame, keys, 2000) is None
    assert verify_frame(session[4:], keys, 2000) is None
    assert verify_frame(frame, keys, 2000) == claims
    assert frame_ancestors(claims) == "https://a.example" and frame_ancestors(None) == "'none'"
    for junk in ("rsp_", "rsp_.", "rsp_x.y", "rs_abc", "rsp_e30.e30"):
        assert verify_session(junk, keys, 2000) is None


def test_portal_routes() -> None:
    assert portal_allows("GET", "/v1/tenants/acme/endpoints", "acme")
    assert portal_allows("POST", "/v1/tenants/acme/endpoints/ep_1/rotate-secret", "acme")
    assert portal_allows("HEAD", "/v1/tenants/acme/events/evt_1/payload", "acme")
    assert not portal_allows("GET", "/v1/tenants/acme2/endpoints", "acme")
    assert not portal_allows("GET", "/v1/tenants/other/endpoints", "acme")
    assert not portal_allows("POST", "/v1/tenants/acme/events", "acme")
    assert not portal_allows("POST", "/v1/tenants/acme/portal-sessions", "acme")
    assert not portal_allows("PATCH", "/v1/tenants/acme", "acme")
    assert not portal_allows("GET", "/v1/tokens", "acme")


async def test_session_acts_on_its_tenant_only(api: Api) -> None:
    made = await _session(api, ttl_s=600, allowed_origins=["https://app.example.com"])
    assert made["tenant"] == "acme" and made["id"].startswith("pss_")
    assert made["url"] == api.base + made["path"]
    assert made["path"].startswith("/portal?frame=") and made["path"].endswith(
        "#key=" + made["token"]
    )
    assert made["allowed_origins"] == ["https://app.example.com"]
    s, c = bearer(made["token"]), api.client
    me = (await c.get("/v1/whoami", headers=s)).json()
    assert me["scope"] == "tenant:acme:portal" and me["right"] == "portal"
    ep = await c.post("/v1/tenants/acme/endpoints", json={"url": "http://127.0.0.1:9/h"},
                      headers=s)  # fmt: skip
    assert ep.status_code == 201, ep.text
    eid, secret = ep.json()["id"], ep.json()["secret"]
    assert secret.startswith("whsec_") and "…" not in secret  # its own secret, in full
    rotated = await c.post(f"/v1/tenants/acme/endpoints/{eid}/rotate-secret", headers=s)
    assert rotated.status_code == 200 and rotated.json()["secret"] != secret
    patched = await c.patch(f"/v1/tenants/acme/endpoints/{eid}", json={"paused": True},
                            headers=s)  # fmt: skip
    assert patched.json()["paused"] is True
    # bad input: the API's problem, naming the field
    assert_problem(await c.post("/v1/tenants/acme/endpoints", json={"url": "ftp://x"},
                                headers=s), 422, "url")  # fmt: skip
    assert_problem(await c.get("/v1/tenants/other/endpoints", headers=s), 404, "tenant")
    assert_problem(await c.get("/v1/tokens", headers=s), 403, "authorization")
    assert_problem(await c.get("/v1/cluster", headers=s), 403, "authorization")
    assert_problem(await c.post("/v1/tenants/acme/events", headers=s,
                                json={"event_type": "a", "payload": {}}), 403)  # fmt: skip
    assert_problem(await c.post("/v1/tenants/acme/portal-sessions", json={}, headers=s), 403)
    assert_problem(await c.patch("/v1/tenants/acme", json={"name": "x"}, headers=s), 403)
    deleted = await c.delete(f"/v1/tenants/acme/endpoints/{eid}", headers=s)
    assert deleted.status_code == 204


async def test_who_may_create_and_bad_bodies(api: Api) -> None:
    c = api.client
    tokens = {}
    for right in ("manage", "publish", "read"):
        made = await c.post("/v1/tokens", json={"scope": f"tenant:acme:{right}", "name": right})
        tokens[right] = made.json()["token"]
    url = "/v1/tenants/acme/portal-sessions"
    ok = await c.post(url, json={}, headers=bearer(tokens["manage"]))
    assert ok.status_code == 201, ok.text
    for right in ("publish", "read"):
        assert_problem(await c.post(url, json={}, headers=bearer(tokens[right])), 403)
    assert_problem(await c.post("/v1/tenants/other/portal-sessions", json={},
                                headers=bearer(tokens["manage"])), 404, "tenant")  # fmt: skip
    assert_problem(await c.post("/v1/tenants/nope/portal-sessions", json={}), 404, "tenant")
    for body, field in (
        ({"ttl_s": 10}, "ttl_s"),
        ({"ttl_s": 10**9}, "ttl_s"),
        ({"ttl_s": "60"}, "ttl_s"),
        ({"ttl_s": True}, "ttl_s"),
        ({"allowed_origins": "https://a.example"}, "allowed_origins"),
        ({"allowed_origins": ["https://a.example/path"]}, "allowed_origins[0]"),
        ({"allowed_origins": ["https://ok.example", "https://a.example; script-src *"]},
         "allowed_origins[1]"),
        ({"allowed_origins": ["*"]}, "allowed_origins[0]"),
        # no such port (trial of 2026-12-06: went into frame-ancestors)
        ({"allowed_origins": ["https://a.example:99999"]}, "allowed_origins[0]"),
        ({"allowed_origins": ["https://a.example:443", "http://b.example:0"]},
         "allowed_origins[1]"),
        ({"allowed_origins": [f"https://a{i}.example" for i in range(11)]}, "allowed_origins"),
        ({"scope": "admin"}, "scope"),
    ):  # fmt: skip
        assert_problem(await c.post(url, json=body), 422, field)


async def test_expired_forged_and_orphaned_sessions_are_refused(api: Api) -> None:
    c, node = api.client, api.node
    made = await _session(api)
    s = bearer(made["token"])
    assert (await c.get("/v1/tenants/acme/endpoints", headers=s)).status_code == 200
    key = node.portal.key("us-east-1")
    assert key is not None
    now, gen = node.cluster_clock.wall_ms(), node.catalog.registry.tenant_gen("acme")
    expired, _ = sign_session(key, PortalClaims("us-east-1", "acme", gen, now - 120_000,
                                                now - 1, "pss_x", ()))  # fmt: skip
    assert_problem(await c.get("/v1/tenants/acme/endpoints", headers=bearer(expired)), 401,
                   "authorization")  # fmt: skip
    foreign, _ = sign_session(bytes(32), PortalClaims("us-east-1", "acme", gen, now, now + 60_000,
                                                      "pss_y", ()))  # fmt: skip
    assert_problem(await c.get("/v1/tenants/acme", headers=bearer(foreign)), 401)
    unknown_kid, _ = sign_session(key, PortalClaims("eu-west-9", "acme", gen, now, now + 60_000,
                                                    "pss_z", ()))  # fmt: skip
    assert_problem(await c.get("/v1/tenants/acme", headers=bearer(unknown_kid)), 401)
    # deleting the tenant ends its sessions, and a tenant created again under its id is
    # not the one the session was made for
    assert (await c.delete("/v1/tenants/acme")).status_code == 204
    assert_problem(await c.get("/v1/whoami", headers=s), 401, "authorization")
    assert (await c.post("/v1/tenants", json={"id": "acme", "name": "again"})).status_code == 201
    assert_problem(await c.get("/v1/tenants/acme", headers=s), 401, "authorization")
    # the key is a secret at rest: its hex is in no file of the data directory
    for path in api.data_dir.rglob("*"):
        if path.is_file():
            assert key.hex().encode() not in path.read_bytes(), path


async def test_portal_page_framing(api: Api) -> None:
    c = api.client
    made = await _session(api, allowed_origins=["https://app.example.com", "http://localhost:3000"])
    framed = await c.get(f"/portal?frame={made['frame']}")
    assert framed.status_code == 200 and "<main" in framed.text
    csp = framed.headers["content-security-policy"]
    assert csp.endswith("frame-ancestors https://app.example.com http://localhost:3000")
    assert "script-src 'self'" in csp and "x-frame-options" not in framed.headers
    for bad in ("", "?frame=junk", f"?frame={made['frame'][:-3]}abc"):
        page = await c.get(f"/portal{bad}")
        assert page.status_code == 200
        assert page.headers["content-security-policy"].endswith("frame-ancestors 'none'")
        assert page.headers["x-frame-options"] == "DENY"
    # a session without origins: not framable; the console never is
    plain = await _session(api)
    page = await c.get(f"/portal?frame={plain['frame']}")
    assert re.search(r"frame-ancestors 'none'$", page.headers["content-security-policy"])
    console = await c.get("/console")
    assert "frame-ancestors 'none'" in console.headers["content-security-policy"]
    assert console.headers["x-frame-options"] == "DENY"


async def test_no_key_written_before_every_region_reads_it(api: Api) -> None:
    """Capability ``portal-sessions``: a region that cannot read ``pk/`` keys would refuse
    the record, so while one is configured no key is written (409)."""
    api.node.capabilities.pin(ALL - {"portal-sessions"})
    resp = await api.client.post("/v1/tenants/acme/portal-sessions", json={})
    assert_problem(resp, 409, "tenant")
    assert api.node.portal.key("us-east-1") is None
    expire = await api.client.post("/v1/tenants/acme/portal-sessions/expire-all")
    assert_problem(expire, 409, "tenant")
    api.node.capabilities.pin(ALL)
    await _session(api)
    assert api.node.portal.key("us-east-1") is not None
    # a key once written signs on, whatever is announced later (it is replicated already)
    api.node.capabilities.pin(ALL - {"portal-sessions"})
    await _session(api)


@pytest.mark.parametrize("ttl", [60, 3600])
async def test_expiry_is_ttl(api: Api, ttl: int) -> None:
    made = await _session(api, ttl_s=ttl)
    from regionsync.adapters.routes.paging import parse_time

    exp = parse_time(made["expires_at"], "expires_at")
    now = api.node.cluster_clock.wall_ms()
    assert now + ttl * 1000 - 5_000 <= exp <= now + ttl * 1000


async def test_portal_sends_a_test_event(api: Api, receiver: RecordingReceiver) -> None:
    """The portal's "send example": one signed POST to the endpoint now, its outcome in
    the answer, nothing stored (no event, no delivery)."""
    s = bearer((await _session(api))["token"])
    c = api.client
    ep = await c.post("/v1/tenants/acme/endpoints", json={"url": receiver.url("portal")},
                      headers=s)  # fmt: skip
    assert ep.status_code == 201, ep.text
    receiver.secrets["portal"] = ep.json()["secret"]
    path = f"/v1/tenants/acme/endpoints/{ep.json()['id']}/test"
    raw = b'{"event_type": "invoice.paid", "payload": {"total": 1.10}}'
    sent = await c.post(path, content=raw, headers={**s, "content-type": "application/json"})
    assert sent.status_code == 200, sent.text
    out = sent.json()
    assert out["ok"] is True and out["status_code"] == 204 and out["error"] is None, out
    assert out["event_type"] == "invoice.paid" and out["id"].startswith("evt_test_")
    assert "webhook-signature: v1," in out["request_headers"]
    hit = receiver.of("portal")[-1]
    assert hit.body == b'{"total": 1.10}' and hit.headers["webhook-id"] == out["id"]
    default = (await c.post(path, json={}, headers=s)).json()
    assert default["event_type"] == "regionsync.test" and default["ok"] is True
    assert (await c.get("/v1/tenants/acme/events", headers=s)).json()["items"] == []
    assert_problem(await c.post(path, json={"event_type": "bad type!"}, headers=s), 422,
                   "event_type")  # fmt: skip
    assert_problem(await c.post(path, json={"nope": 1}, headers=s), 422, "nope")


async def test_expire_all_ends_the_sessions_made_before(api: Api) -> None:
    """Svix's expire-all: every session of the tenant made until the call is refused,
    later ones work; another tenant's sessions are untouched; a session cannot call it."""
    c = api.client
    old, other = await _session(api), await _session(api, "other")
    s_old = bearer(old["token"])
    assert (await c.get("/v1/tenants/acme/endpoints", headers=s_old)).status_code == 200
    url = "/v1/tenants/acme/portal-sessions/expire-all"
    assert_problem(await c.post(url, headers=s_old), 403, "authorization")
    assert (await c.post(url)).status_code == 204
    assert_problem(await c.get("/v1/tenants/acme/endpoints", headers=s_old), 401)
    new = bearer((await _session(api))["token"])
    assert (await c.get("/v1/tenants/acme/endpoints", headers=new)).status_code == 200
    mine = bearer(other["token"])
    assert (await c.get("/v1/tenants/other/endpoints", headers=mine)).status_code == 200
    assert_problem(await c.post("/v1/tenants/nope/portal-sessions/expire-all"), 404, "tenant")
    assert_problem(await c.post(url, json={"x": 1}), 422, "x")
