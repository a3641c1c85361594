"""API tokens as replicated registry objects (issue 14): create once, list, revoke, scopes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from api_support import Api, assert_problem, running_node

from regionsync.core.tokens import TokenView, hash_token, make_token

ADMIN = "static-admin-token-0123456789"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest_asyncio.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with running_node(tmp_path, tokens=[{"token": ADMIN, "scope": "admin"}]) as running:
        running.client.headers.update(bearer(ADMIN))
        resp = await running.client.post("/v1/tenants", json={"id": "acme", "name": "Acme"})
        assert resp.status_code == 201, resp.text
        resp = await running.client.post("/v1/tenants", json={"id": "other", "name": "O"})
        assert resp.status_code == 201, resp.text
        yield running


async def _create(api: Api, scope: str, name: str = "ci", **extra: object) -> dict:
    resp = await api.client.post("/v1/tokens", json={"scope": scope, "name": name, **extra})
    assert resp.status_code == 201, resp.text
    return resp.json()


def test_token_shape() -> None:
    t = make_token(bytes(range(32)))
    assert t.startswith("rs_") and len(t) == 3 + 43 and "=" not in t
    assert hash_token(t) == hash_token(t) and len(hash_token(t)) == 64
    view = TokenView("tok_1", "h", "admin", "n", 1000, 0, "x")
    assert not view.expired(999) and view.expired(1000)
    with pytest.raises(ValueError):
        make_token(b"short")


async def test_create_list_revoke(api: Api) -> None:
    made = await _create(api, "tenant:acme:manage", "deploy bot")
    secret = made.pop("token")
    assert secret.startswith("rs_")
    assert made["scope"] == "tenant:acme:manage" and made["created_by"] == "config:tokens[0]:admin"
    assert made["expires_at"] is None and made["name"] == "deploy bot"
    listed = (await api.client.get("/v1/tokens")).json()["items"]
    assert listed == [made]  # no secret, no hash
    assert secret not in str(listed) and hash_token(secret) not in str(listed)

    c = api.client
    ok = await c.get("/v1/tenants/acme", headers=bearer(secret))
    assert ok.status_code == 200, ok.text
    assert_problem(await c.get("/v1/tenants/other", headers=bearer(secret)), 404, "tenant")
    assert_problem(await c.get("/v1/tokens", headers=bearer(secret)), 403, "authorization")

    assert (await c.delete(f"/v1/tokens/{made['id']}")).status_code == 204
    assert_problem(await c.get("/v1/tenants/acme", headers=bearer(secret)), 401, "authorization")
    assert (await c.get("/v1/tokens")).json()["items"] == []
    assert_problem(await c.delete(f"/v1/tokens/{made['id']}"), 404, "token")
    # stored only as its hash: the token's text is in no file of the data directory
    for path in api.data_dir.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


async def test_read_and_publish_scopes(api: Api) -> None:
    read = (await _create(api, "tenant:acme:read"))["token"]
    publish = (await _create(api, "tenant:acme:publish"))["token"]
    c = api.client
    assert (await c.get("/v1/tenants/acme/endpoints", headers=bearer(read))).status_code == 200
    ep = {"url": "https://example.com/hook"}
    resp = await c.post("/v1/tenants/acme/endpoints", json=ep, headers=bearer(read))
    assert_problem(resp, 403, "authorization")
    event = {"event_type": "a.b", "payload": {}}
    resp = await c.post("/v1/tenants/acme/events", json=event, headers=bearer(read))
    assert_problem(resp, 403, "authorization")
    resp = await c.post("/v1/tenants/acme/events", json=event, headers=bearer(publish))
    assert resp.status_code == 202, resp.text
    resp = await c.get("/v1/tenants/acme/endpoints", headers=bearer(publish))
    assert_problem(resp, 403, "authorization")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scope": "root", "name": "x"}, "scope"),
        ({"scope": "tenant:acme:write", "name": "x"}, "scope"),
        ({"scope": "admin"}, "name"),
        ({"scope": "admin", "name": ""}, "name"),
        ({"scope": "admin", "name": "x", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"scope": "admin", "name": "x", "expires_at": "tomorrow"}, "expires_at"),
        ({"scope": "admin", "name": "x", "expires_at": 5}, "expires_at"),
        # QA 2026-12-02: a time past 9999 was stored, and every token list a 500
        ({"scope": "admin", "name": "x", "expires_at": "9999-12-31T23:59:59-01:00"}, "expires_at"),
        ({"scope": "admin", "name": "x", "secret": "mine"}, "secret"),
    ],
)
async def test_bad_token_bodies(api: Api, body: dict, field: str) -> None:
    assert_problem(await api.client.post("/v1/tokens", json=body), 422, field)


async def test_expiry_is_kept_and_shown(api: Api) -> None:
    made = await _create(api, "admin", expires_at="2999-01-01T00:00:00Z")
    assert made["expires_at"] == "2999-01-01T00:00:00.000Z"
    # digits below the millisecond are cut (through a float this was year 10000)
    last = await _create(api, "admin", expires_at="9999-12-31T23:59:59.999999Z")
    assert last["expires_at"] == "9999-12-31T23:59:59.999Z"
    assert (await api.client.get("/v1/tokens")).status_code == 200
    assert (await api.client.get("/v1/cluster", headers=bearer(made["token"]))).status_code == 200


async def test_unknown_token_refused_on_open_node(tmp_path: Path) -> None:
    async with running_node(tmp_path / "open") as api:  # no static tokens, loopback
        made = (await api.client.post("/v1/tokens", json={"scope": "admin", "name": "a"})).json()
        assert (await api.client.get("/v1/cluster")).status_code == 200  # anonymous
        assert (await api.client.get("/v1/cluster", headers=bearer(made["token"]))).is_success
        resp = await api.client.get("/v1/cluster", headers=bearer("rs_unknown"))
        assert_problem(resp, 401, "authorization")
