"""The management CLI (``regionsync.manage``) against a real node on loopback: one test
per subcommand, a refused token and an unreachable node (exit 2, no traceback)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from api_support import Api, RecordingReceiver, eventually, running_node
from click.testing import CliRunner, Result

from regionsync.cli import main
from regionsync.core.capabilities import RELEASE
from regionsync.demo import free_port

EPOCH = "2000-01-01T00:00:00Z"


async def cli(api: Api | str, *args: str, token: str | None = None) -> Result:
    """Run ``regionsync --url <node> ARGS`` in a thread (the node serves on this loop)."""
    url = api if isinstance(api, str) else api.base
    env = {"REGIONSYNC_URL": url, "REGIONSYNC_TOKEN": token}
    return await asyncio.to_thread(CliRunner().invoke, main, list(args), env=env)


def ok(res: Result) -> str:
    assert res.exit_code == 0, (res.exit_code, res.output, res.exception)
    return res.output


async def test_status_table(api: Api) -> None:
    out = ok(await cli(api, "status"))
    header, row = out.splitlines()[:2]
    assert header.split() == ["REGION", "VERSION", "REACHED", "CONNECTED", "RECORDS_BEHIND",
                              "LAST_CONTACT", "REGISTRY", "AGREES", "PEERS_UP", "CUSTODY",
                              "REFUSED", "CLOCK"]  # fmt: skip
    cells = row.split()
    assert cells[:4] == ["us-east-1", RELEASE, "self", "self"] and cells[-3] == "own"
    assert cells[-4] == "0/0"  # a node without peers
    assert cells[-2] == "none"  # it refused nothing
    assert cells[-1] == "ok"  # no peer: nothing to compare the clock with
    body = json.loads(ok(await cli(api, "--json", "status")))
    assert body["region"] == "us-east-1" and list(body["regions"]) == ["us-east-1"]


async def test_tenants_create_list_delete(api: Api) -> None:
    created = json.loads(ok(await cli(api, "--json", "tenants", "create", "--id", "t1",
                                      "--name", "T one")))  # fmt: skip
    assert created["id"] == "t1" and created["name"] == "T one"
    assert "t1" in ok(await cli(api, "tenants", "list"))
    assert ok(await cli(api, "tenants", "delete", "t1")) == "deleted tenant t1\n"
    assert json.loads(ok(await cli(api, "--json", "tenants", "list"))) == []


async def test_endpoints_create_list_delete(api: Api, tenant: str) -> None:
    out = ok(await cli(api, "--json", "endpoints", "create", "--tenant", tenant,
                       "--url", "http://127.0.0.1:9/hook", "--event-type", "a.*"))  # fmt: skip
    e1 = json.loads(out)["id"]
    assert e1.startswith("ep_") and json.loads(out)["event_types"] == ["a.*"]
    listing = ok(await cli(api, "endpoints", "list", "--tenant", tenant))
    assert "http://127.0.0.1:9/hook" in listing
    # values for people, not Python reprs (QA 2026-12-02: "['a.*']", "None")
    assert listing.splitlines()[1].split()[-1] == "a.*" and "['" not in listing
    shown = ok(await cli(api, "endpoints", "create", "--tenant", tenant,
                         "--url", "http://127.0.0.1:9/two"))  # fmt: skip
    assert "filter: -" in shown and "None" not in shown and "paused: false" in shown
    (e2,) = [line.split()[1] for line in shown.splitlines() if line.startswith("id:")]
    assert e2.startswith("ep_") and e2 != e1
    # ids are generated (issue 37): the option to choose one is gone
    chosen = await cli(api, "endpoints", "create", "--tenant", tenant, "--id", "e3",
                       "--url", "http://127.0.0.1:9/three")  # fmt: skip
    assert chosen.exit_code == 2 and "--id" in chosen.output, chosen.output
    ok(await cli(api, "endpoints", "delete", "--tenant", tenant, e2))
    ok(await cli(api, "endpoints", "delete", "--tenant", tenant, e1))
    listed = json.loads(ok(await cli(api, "--json", "endpoints", "list", "--tenant", tenant)))
    assert listed == []


async def test_sources_create_list_delete(api: Api, tenant: str) -> None:
    out = ok(await cli(api, "--json", "sources", "create", "--tenant", tenant, "--kind",
                       "github", "--secret", "s3cret"))  # fmt: skip
    sid = json.loads(out)["id"]
    assert sid.startswith("src_") and json.loads(out)["url_path"] == f"/in/{sid}"
    assert "s3cret" not in out
    assert sid in ok(await cli(api, "sources", "list", "--tenant", tenant))
    ok(await cli(api, "sources", "delete", sid))
    assert json.loads(ok(await cli(api, "--json", "sources", "list"))) == []


async def _publish(api: Api, tenant: str, etype: str) -> str:
    resp = await api.client.post(
        f"/v1/tenants/{tenant}/events", json={"event_type": etype, "payload": {"n": 1.10}}
    )
    assert resp.status_code == 202
    return resp.json()["id"]


async def test_events_list_and_show(api: Api, tenant: str) -> None:
    a = await _publish(api, tenant, "issues.opened")
    b = await _publish(api, tenant, "push")
    listed = json.loads(ok(await cli(api, "--json", "events", "list", "--tenant", tenant)))
    assert [e["id"] for e in listed] == [b, a]
    only = ok(await cli(api, "events", "list", "--tenant", tenant, "--type", "issues.*"))
    assert a in only and b not in only
    shown = json.loads(ok(await cli(api, "events", "show", "--tenant", tenant, a)))
    assert shown["payload"] == {"n": 1.1} and shown["id"] == a


async def test_events_show_prints_the_payload_text_exactly(api: Api, tenant: str) -> None:
    text = '{"amount":1.10,"big":12345678901234567890,"e":1E2,"z":-0}'
    resp = await api.client.post(
        f"/v1/tenants/{tenant}/events",
        content='{"event_type":"t","payload":' + text + "}",
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 202, resp.text
    for mode in ((), ("--json",)):
        out = ok(await cli(api, *mode, "events", "show", "--tenant", tenant, resp.json()["id"]))
        assert '"payload":' + text in out, out


async def _dead_endpoint(api: Api, tenant: str, receiver: RecordingReceiver) -> tuple[str, str]:
    resp = await api.client.post(f"/v1/tenants/{tenant}/endpoints", json={"url": receiver.url("r")})
    receiver.secrets["r"] = resp.json()["secret"]
    receiver.fail_first["r"] = 1000  # every try fails until the delivery is dead
    await _publish(api, tenant, "t")

    async def dead() -> list:
        resp = await api.client.get(f"/v1/tenants/{tenant}/deliveries?status=dead")
        return resp.json()["items"]

    dlv = (await eventually(dead))[0]["id"]
    receiver.fail_first["r"] = 0
    return resp.json()["id"], dlv


async def test_deliveries_retry(api: Api, tenant: str, receiver: RecordingReceiver) -> None:
    _ep, dlv = await _dead_endpoint(api, tenant, receiver)
    out = json.loads(ok(await cli(api, "--json", "deliveries", "retry", "--tenant", tenant, dlv)))
    assert out["id"] == dlv and out["generation"] == 1 and out["custodian"] == "us-east-1"


async def test_recover_follows_the_job(api: Api, tenant: str, receiver: RecordingReceiver) -> None:
    ep, _dlv = await _dead_endpoint(api, tenant, receiver)
    res = await cli(api, "--json", "recover", "--tenant", tenant, "--endpoint", ep,
                    "--since", EPOCH, "--poll", "0.05")  # fmt: skip
    job = json.loads(ok(res)[res.output.index("{") :])
    assert job["kind"] == "recover" and job["status"] == "succeeded" and job["done"] == 1


async def test_replay_follows_the_job(api: Api, tenant: str) -> None:
    res = await cli(api, "replay", "--tenant", tenant, "--endpoint", "nope", "--since", EPOCH)
    assert res.exit_code == 1 and "404 not_found" in res.output
    assert "field: endpoint" in res.output and "Traceback" not in res.output
    body = {"url": "http://127.0.0.1:9/p", "paused": True}
    ep = (await api.client.post(f"/v1/tenants/{tenant}/endpoints", json=body)).json()["id"]
    res = await cli(api, "replay", "--tenant", tenant, "--endpoint", ep, "--since", EPOCH,
                    "--poll", "0.05")  # fmt: skip
    assert "status: succeeded" in ok(res) and "kind: replay-missing" in res.output


async def test_api_error_shows_detail_and_field(api: Api) -> None:
    res = await cli(api, "events", "list", "--tenant", "acme", "--since", "yesterday")
    assert res.exit_code == 1
    assert "422" in res.output or "404" in res.output  # no tenant acme here: 404 first
    res = await cli(api, "tenants", "create", "--id", "bad id!", "--name", "x")
    assert res.exit_code == 1 and "(field: id)" in res.output, res.output


async def test_bad_token_exits_2_with_a_clear_message(tmp_path: Path) -> None:
    tokens = [{"token": "right-token-0123456789", "scope": "admin"}]
    async with running_node(tmp_path, tokens=tokens) as api:
        res = await cli(api, "tenants", "list", token="wrong-token-0123456789")
        assert res.exit_code == 2 and "401" in res.output and "--token" in res.output
        assert "Traceback" not in res.output
        ok(await cli(api, "tenants", "list", token="right-token-0123456789"))


async def test_unreachable_node_exits_2_without_traceback() -> None:
    res = await cli(f"http://127.0.0.1:{free_port()}", "status")
    assert res.exit_code == 2 and "cannot reach" in res.output
    assert "Traceback" not in res.output


async def test_a_url_that_is_not_a_node_exits_2_without_traceback() -> None:
    """--url at a web server that is not a node (trial of 2026-12-06: a 204 with no body
    gave a TypeError traceback on a list, and ``null``, exit 0, on a create)."""
    from aiohttp import web

    async def answer(request: web.Request) -> web.Response:
        if request.path.startswith("/v1/tenants"):
            return web.Response(status=204 if request.method != "DELETE" else 200, text="")
        if request.path.startswith("/v1/"):  # JSON, but not the API's
            return web.json_response({"hello": "world"})
        return web.Response(status=404, text="<html><h1>Not Found</h1></html>",
                            content_type="text/html")  # fmt: skip

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}"
    try:
        for args in (("tenants", "list"), ("tenants", "create", "--name", "x"),
                     ("tenants", "delete", "t1"), ("sources", "list"), ("status",),
                     ("events", "show", "--tenant", "t", "evt_1")):  # fmt: skip
            res = await cli(url, *args)
            assert res.exit_code == 2, (args, res.exit_code, res.output)
            assert "not as a regionsync node does" in res.output, res.output
            assert "Traceback" not in res.output and "null" not in res.output
            assert "deleted" not in res.output
    finally:
        await runner.cleanup()


async def test_status_peer_url_that_cannot_be_asked_shows_a_row_and_exits_3(api: Api) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    for url in ("notaurl", dead, "http://[::1"):
        res = await cli(api, "status", "--peer-url", url)
        assert res.exit_code == 3, (res.exit_code, res.output)
        assert "Traceback" not in res.output and f"could not ask {url}" in res.output
        rows = {line.split()[0]: line for line in res.output.splitlines()[1:]}
        assert url in rows and "no:" in rows[url], res.output
    res = await cli(api, "status", "--peer-url", api.base)  # itself: reached, no failure
    assert res.exit_code == 0, res.output


def test_status_rows_show_the_clock() -> None:
    """A suspect clock and the peers' offsets (issue 41)."""
    from regionsync.manage.status import status_rows

    peer = {"region": "b", "connected": True, "records_behind": 0,
            "seconds_since_contact": 1.0, "last_digest_at": None, "state_agrees": None}  # fmt: skip
    cluster = {"region": "a", "registry_hash": "h" * 64, "peers": [peer], "custody": {},
               "clock": {"status": "suspect", "error_ms": 600_000,
                         "offsets_ms": {"b": -600_000}}}  # fmt: skip
    rows = status_rows(cluster)
    assert [r["clock"] for r in rows] == ["SUSPECT:+600000ms", "-600000ms"]
    del cluster["clock"]  # a node of an older release
    assert [r["clock"] for r in status_rows(cluster)] == ["-", "-"]
