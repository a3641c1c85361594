"""The management CLI never lets an id name another route (trial report finding 1) and
``regionsync token`` takes the global ``--url``/``--token``/``--json`` with the same exit
codes and error format as every other command (finding 2). Against a real node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api_support import Api, running_node
from test_cli_manage import cli, ok

from regionsync.demo import free_port
from regionsync.manage import ManageError, api_path

G_EP = "<g-ep>"  # stands for the generated id of gamma's endpoint in the cases below


async def _setup(api: Api) -> tuple[str, str]:
    """Tenants gamma and acme (each with an endpoint), delta and zeta; the id of gamma's
    endpoint and acme's endpoint secret."""
    for t in ("gamma", "delta", "zeta", "acme"):
        assert (await api.client.post("/v1/tenants", json={"id": t, "name": t})).status_code == 201
    made = {}
    for t in ("gamma", "acme"):
        resp = await api.client.post(f"/v1/tenants/{t}/endpoints",
                                     json={"url": "http://127.0.0.1:9/x"})  # fmt: skip
        assert resp.status_code == 201, resp.text
        made[t] = resp.json()
    return made["gamma"]["id"], made["acme"]["secret"]


async def _still_there(api: Api, g_ep: str) -> None:
    listed = (await api.client.get("/v1/tenants")).json()["items"]
    assert sorted(t["id"] for t in listed) == ["acme", "delta", "gamma", "zeta"]
    assert (await api.client.get(f"/v1/tenants/gamma/endpoints/{g_ep}")).status_code == 200


@pytest.mark.parametrize(
    "args",
    [
        ("endpoints", "delete", "../../delta", "--tenant", "gamma"),
        ("tenants", "delete", f"gamma/endpoints/{G_EP}"),
        ("tenants", "delete", "zeta?confirm=no"),
        ("tenants", "delete", "zeta#frag"),
        ("tenants", "delete", ".."),
        ("endpoints", "delete", "..", "--tenant", "gamma"),
        ("endpoints", "delete", G_EP, "--tenant", "gamma/../delta"),
        ("endpoints", "delete", "%2e%2e", "--tenant", "gamma"),
        ("sources", "delete", "../tenants/delta"),
        ("deliveries", "retry", "--tenant", "gamma", "../../delta"),
        ("token", "revoke", "é/.."),
        ("token", "revoke", "../tenants/delta"),
        (
            "recover",
            "--tenant",
            "gamma",
            "--endpoint",
            "../../delta",
            "--since",
            "2000-01-01T00:00:00Z",
        ),
    ],
)
async def test_ids_that_could_name_another_route_are_refused(api: Api, args: tuple) -> None:
    g_ep, _ = await _setup(api)
    res = await cli(api, *(a.replace(G_EP, g_ep) for a in args))
    assert res.exit_code == 2, res.output
    assert "is not an id" in res.output and "Traceback" not in res.output
    assert "deleted" not in res.output and "revoked" not in res.output
    await _still_there(api, g_ep)


async def test_events_show_of_a_path_does_not_print_endpoints(api: Api) -> None:
    _, secret = await _setup(api)
    res = await cli(api, "events", "show", "--tenant", "acme", "../endpoints")
    assert res.exit_code == 2 and secret not in res.output, res.output
    res = await cli(api, "events", "show", "--tenant", "acme", "no-such-event")
    assert res.exit_code == 1 and "404" in res.output and "field: event" in res.output


def test_api_path_encodes_each_segment() -> None:
    assert api_path("/v1/tenants/{t}/endpoints/{e}", t="a.b", e="x_y-1") == (
        "/v1/tenants/a.b/endpoints/x_y-1"
    )
    for bad in ("", ".", "..", "a/b", "a b", "a%2Fb", "x" * 65, "é"):
        with pytest.raises(ManageError) as err:
            api_path("/v1/tenants/{t}", t=bad)
        assert err.value.exit_code == 2


async def test_token_honours_global_url_token_and_json(tmp_path: Path) -> None:
    admin = "right-token-0123456789"
    async with running_node(tmp_path, tokens=[{"token": admin, "scope": "admin"}]) as api:
        dead = f"http://127.0.0.1:{free_port()}"
        made = await cli(api, "--json", "token", "create", "--scope", "tenant:acme:read",
                         "--name", "ro", token=admin)  # fmt: skip
        assert made.exit_code == 1 and "no tenant 'acme'" in made.output, made.output
        headers = {"authorization": f"Bearer {admin}"}
        resp = await api.client.post(
            "/v1/tenants", json={"id": "acme", "name": "A"}, headers=headers
        )
        assert resp.status_code == 201, resp.text
        # the global --url wins over REGIONSYNC_URL (the env names an unreachable node)
        made = await cli(dead, "--url", api.base, "--token", admin, "--json", "token",
                         "create", "--scope", "tenant:acme:read", "--name", "ro")  # fmt: skip
        body = json.loads(ok(made))
        assert body["token"].startswith("rs_")
        listed = ok(await cli(dead, "--url", api.base, "--token", admin, "token", "list"))
        header, *rows = listed.splitlines()
        assert header.split()[:3] == ["ID", "NAME", "SCOPE"]
        assert any(body["id"] in r and "tenant:acme:read" in r for r in rows)
        as_json = json.loads(ok(await cli(api, "--json", "token", "list", token=admin)))
        assert [t["id"] for t in as_json] == [body["id"]]
        # a refused token and an unreachable node exit 2, in the common error format
        res = await cli(api, "--token", "wrong-token-0123456789", "token", "list")
        assert res.exit_code == 2 and "Error: 401 unauthorized" in res.output, res.output
        assert "(field: authorization); check --token" in res.output
        res = await cli(api, "--url", dead, "token", "list", token=admin)
        assert res.exit_code == 2 and f"cannot reach {dead}" in res.output
        res = await cli(api, "token", "revoke", "tok_nope", token=admin)
        assert res.exit_code == 1 and "404" in res.output and "(field: token)" in res.output
        assert ok(await cli(api, "token", "revoke", body["id"], token=admin)) == (
            f"revoked {body['id']}\n"
        )


async def test_the_api_refuses_dot_segment_ids(api: Api) -> None:
    for dots in (".", ".."):
        resp = await api.client.post("/v1/tenants", json={"id": dots, "name": "x"})
        assert resp.status_code == 422 and resp.json()["field"] == "id", resp.text
    await api.client.post("/v1/tenants", json={"id": "acme", "name": "x"})
    resp = await api.client.post("/v1/tenants/acme/endpoints",
                                 json={"id": "..", "url": "http://127.0.0.1:9/x"})  # fmt: skip
    assert resp.status_code == 422 and resp.json()["field"] == "id", resp.text


def test_tables_show_control_and_bidi_characters_escaped() -> None:
    from regionsync.manage.client import table

    text = table([{"id": "t1", "name": "a\u0000b\u202ec\tz"}], ["id", "name"])
    assert "\u0000" not in text and "\u202e" not in text and "\t" not in text
    assert "a\\u0000b\\u202ec\\u0009z" in text
