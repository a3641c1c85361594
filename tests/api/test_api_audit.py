"""GET /v1/audit (issue 14): who changed what, newest first; admin sees every tenant, a
tenant token only its own (another tenant's is 404, a publish-only token 403)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from api_support import Api, assert_problem, running_node

from regionsync.core.model import AuditEntry, WriteBatch

ADMIN = "static-admin-token-0123456789"
STATIC = "config:tokens[0]:admin"  # the audit name of ADMIN: its [[tokens]] entry


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest_asyncio.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with running_node(tmp_path, tokens=[{"token": ADMIN, "scope": "admin"}]) as running:
        running.client.headers.update(bearer(ADMIN))
        yield running


async def _token(api: Api, scope: str, name: str) -> str:
    resp = await api.client.post("/v1/tokens", json={"scope": scope, "name": name})
    assert resp.status_code == 201, resp.text
    return resp.json()["token"]


async def test_audit_names_the_caller_and_the_change(api: Api) -> None:
    c = api.client
    for tid in ("acme", "other"):
        assert (await c.post("/v1/tenants", json={"id": tid, "name": tid})).status_code == 201
    manage = await _token(api, "tenant:acme:manage", "acme ops")
    ep = await c.post(
        "/v1/tenants/acme/endpoints", json={"url": "http://127.0.0.1:9/x"},
        headers=bearer(manage),
    )  # fmt: skip
    assert ep.status_code == 201, ep.text
    eid = ep.json()["id"]
    secret = ep.json()["secret"]
    rotate = f"/v1/tenants/acme/endpoints/{eid}/rotate-secret"
    rotated = await c.post(rotate, headers=bearer(manage))
    assert rotated.status_code == 200
    src = await c.post("/v1/sources", json={"tenant": "other", "kind": "github", "secret": "s"})
    assert src.status_code == 201

    every = (await c.get("/v1/audit")).json()
    ops = [(i["who"], i["op"], i["object"], i["tenant"]) for i in every["items"]]
    tid = ops[3][2].removeprefix("token/")
    assert ops == [
        (STATIC, "source.create", f"source/{src.json()['id']}", "other"),
        (f"token:{tid}:acme ops", "endpoint.rotate_secret", f"endpoint/{eid}", "acme"),
        (f"token:{tid}:acme ops", "endpoint.create", f"endpoint/{eid}", "acme"),
        (STATIC, "token.create", f"token/{tid}", "acme"),
        (STATIC, "tenant.create", "tenant/other", "other"),
        (STATIC, "tenant.create", "tenant/acme", "acme"),
    ]
    first = every["items"][0]
    assert first["region"] == "us-east-1" and first["id"].startswith("us-east-1:")
    assert first["at"].endswith("Z") and first["hlc"].split(".")[0].isdigit()
    assert every["items"][3]["detail"] == "scope=tenant:acme:manage"
    assert secret not in str(every) and rotated.json()["secret"] not in str(every)

    # paging: the cursor walks the same list
    seen, cursor = [], None
    while True:
        page = (await c.get("/v1/audit", params={"limit": 2, **({"cursor": cursor} if cursor
                                                               else {})})).json()  # fmt: skip
        seen += [i["id"] for i in page["items"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == [i["id"] for i in every["items"]]
    assert [i["op"] for i in (await c.get("/v1/audit?tenant=other")).json()["items"]] == [
        "source.create", "tenant.create",
    ]  # fmt: skip
    since = every["items"][1]["at"]
    later = (await c.get("/v1/audit", params={"since": since})).json()["items"]
    assert 2 <= len(later) < len(every["items"])

    # a tenant token sees its own tenant only, whatever it asks for
    mine = (await c.get("/v1/audit", headers=bearer(manage))).json()["items"]
    assert {i["tenant"] for i in mine} == {"acme"} and len(mine) == 4
    assert_problem(await c.get("/v1/audit?tenant=other", headers=bearer(manage)), 404, "tenant")
    reader = await _token(api, "tenant:acme:read", "reader")
    assert len((await c.get("/v1/audit", headers=bearer(reader))).json()["items"]) >= 4
    publisher = await _token(api, "tenant:acme:publish", "pub")
    assert_problem(await c.get("/v1/audit", headers=bearer(publisher)), 403)
    assert_problem(await c.get("/v1/audit", headers={"authorization": ""}), 401)


async def test_audit_bad_parameters_are_422(api: Api) -> None:
    for params, name in (
        ({"limit": 0}, "limit"),
        ({"since": "yesterday"}, "since"),
        ({"cursor": "!!"}, "cursor"),
        ({"cursor": "MTIzOmFiYw"}, "cursor"),  # "123:abc": not an audit cursor
    ):
        assert_problem(await api.client.get("/v1/audit", params=params), 422, name)


async def test_audit_tenant_patch_and_event_types(api: Api) -> None:
    """Tenant changes and the event-type catalog are audited like endpoints: op, object,
    the changed field names (never their values)."""
    c = api.client
    assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
    patched = await c.patch("/v1/tenants/acme", json={"name": "Acme", "strict_event_types": True})
    assert patched.status_code == 200, patched.text
    base = "/v1/tenants/acme/event-types"
    schema = {"type": "object", "required": ["id"]}
    made = await c.post(base, json={"name": "order.paid", "schema": schema})
    assert made.status_code == 201, made.text
    changed = await c.patch(f"{base}/order.paid", json={"deprecated": True, "description": "x"})
    assert changed.status_code == 200, changed.text
    assert (await c.delete(f"{base}/order.paid")).status_code == 204
    items = (await c.get("/v1/audit?tenant=acme")).json()["items"]
    got = [(i["op"], i["object"], i["detail"]) for i in items]
    assert got == [
        ("event_type.delete", "event_type/order.paid", ""),
        ("event_type.update", "event_type/order.paid", "deprecated,description"),
        ("event_type.create", "event_type/order.paid", ""),
        ("tenant.update", "tenant/acme", "name,strict_event_types"),
        ("tenant.create", "tenant/acme", ""),
    ]
    assert all(i["who"] == STATIC for i in items)


async def test_two_tokens_of_one_name_are_two_callers(api: Api) -> None:
    """Issue 38 kind 5: two tokens named alike were one ``who``; the token id tells them
    apart (in ``whoami`` and ``created_by`` too), as each static token's entry does."""
    c = api.client
    assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
    made = []
    for _ in range(2):
        resp = await c.post("/v1/tokens", json={"scope": "tenant:acme:manage", "name": "ci"})
        made.append(resp.json())
    eids = []
    for token in made:
        body = {"url": "http://127.0.0.1:9/x"}
        resp = await c.post("/v1/tenants/acme/endpoints", json=body, headers=bearer(token["token"]))
        assert resp.status_code == 201, resp.text
        eids.append(resp.json()["id"])
        me = (await c.get("/v1/whoami", headers=bearer(token["token"]))).json()
        assert me["name"] == f"token:{token['id']}:ci"
    items = (await c.get("/v1/audit?tenant=acme")).json()["items"]
    who = {i["object"]: i["who"] for i in items if i["op"] == "endpoint.create"}
    assert who == {f"endpoint/{e}": f"token:{t['id']}:ci" for e, t in zip(eids, made, strict=True)}
    assert made[0]["created_by"] == STATIC


async def test_a_delivery_retry_is_audited(api: Api) -> None:
    """Issue 38 kind 5: ``POST .../deliveries/{d}/retry`` left no entry (recover and
    replay did): it is ``delivery.retry`` on ``delivery/<id>``, by its caller."""
    c = api.client
    assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
    ep = await c.post("/v1/tenants/acme/endpoints", json={"url": "http://127.0.0.1:9/x"})
    assert ep.status_code == 201, ep.text
    event = {"event_type": "a", "payload": {}}
    assert (await c.post("/v1/tenants/acme/events", json=event)).status_code == 202
    (d,) = (await c.get("/v1/tenants/acme/deliveries")).json()["items"]
    manage = await _token(api, "tenant:acme:manage", "ops")
    retried = await c.post(f"/v1/tenants/acme/deliveries/{d['id']}/retry", headers=bearer(manage))
    assert retried.status_code == 202, retried.text
    items = (await c.get("/v1/audit?tenant=acme")).json()["items"]
    (entry,) = [i for i in items if i["op"] == "delivery.retry"]
    tid = next(i["object"] for i in items if i["op"] == "token.create").removeprefix("token/")
    assert entry["object"] == f"delivery/{d['id']}" and entry["tenant"] == "acme"
    assert entry["who"] == f"token:{tid}:ops" and entry["detail"] == f"endpoint={ep.json()['id']}"


async def test_entries_written_before_read_as_they_were(api: Api) -> None:
    """Entries of the earlier ``who`` forms (``token:<name>``, ``config:<scope>``) are
    shown as written."""
    old = [
        AuditEntry("us-east-1:1", 900 + i, 1_000 + i, 0, who, "tenant.update", "tenant/t", "t")
        for i, who in enumerate(("token:ops", "config:admin"))
    ]
    await api.node.store.commit(WriteBatch(audit=old))
    items = (await api.client.get("/v1/audit")).json()["items"]
    assert [i["who"] for i in items if i["object"] == "tenant/t"] == ["config:admin", "token:ops"]
