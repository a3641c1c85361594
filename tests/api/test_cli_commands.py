"""The management commands of issue 43 against a real node on loopback: publish, endpoint
update/pause/resume/rotate-secret/test-filter and create options, event types, attempts,
audit, jobs, sources with every option, ``--json`` after any command. Each has a bad
input: the API's problem (detail and field) or the refused option, and exit != 0."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from api_support import Api, RecordingReceiver, eventually
from click.testing import CliRunner, Result

from regionsync.cli import main

EPOCH = "2000-01-01T00:00:00Z"


async def cli(api: Api, *args: str, stdin: str | None = None) -> Result:
    """``regionsync --url <node> ARGS`` in a thread (the node serves on this loop)."""
    env = {"REGIONSYNC_URL": api.base, "REGIONSYNC_TOKEN": None}
    return await asyncio.to_thread(CliRunner().invoke, main, list(args), input=stdin, env=env)


def ok(res: Result) -> str:
    assert res.exit_code == 0, (res.exit_code, res.output, res.exception)
    return res.output


async def js(api: Api, *args: str, stdin: str | None = None) -> object:
    """The JSON a command prints with ``--json`` after it (as well as before: global)."""
    return json.loads(ok(await cli(api, *args, "--json", stdin=stdin)))


def refused(res: Result, status: int, field: str) -> None:
    """The API's problem: status, detail and ``(field: ...)``; exit 1, no traceback."""
    assert res.exit_code == 1, (res.exit_code, res.output)
    assert f"{status} " in res.output and f"(field: {field})" in res.output, res.output
    assert "Traceback" not in res.output


async def test_publish_from_argument_file_and_stdin(api: Api, tenant: str, tmp_path: Path) -> None:
    text = '{"amount":1.10,"n":[1,2]}'
    a = await js(api, "publish", "--tenant", tenant, "--type", "invoice.paid", "--payload", text)
    assert a["id"].startswith("evt_")
    shown = ok(await cli(api, "events", "show", "--tenant", tenant, a["id"]))
    assert '"payload":' + text in shown  # byte for byte: 1.10 stays 1.10
    (tmp_path / "p.json").write_text(text + "\n")
    b = await js(api, "publish", "--tenant", tenant, "--type", "t", "--payload",
                 f"@{tmp_path / 'p.json'}")  # fmt: skip
    c = await js(api, "publish", "--tenant", tenant, "--type", "t", "--payload", "-", stdin=text)
    assert len({a["id"], b["id"], c["id"]}) == 3
    # the same Idempotency-Key: the first event, no second one
    first = await js(api, "publish", "--tenant", tenant, "--type", "t", "--payload", "{}",
                     "--idempotency-key", "k-1")  # fmt: skip
    again = await js(api, "publish", "--tenant", tenant, "--type", "t", "--payload", "{}",
                     "--idempotency-key", "k-1")  # fmt: skip
    assert again["id"] == first["id"]
    listed = await js(api, "events", "list", "--tenant", tenant)
    assert len(listed) == 4


async def test_publish_bad_input(api: Api, tenant: str, tmp_path: Path) -> None:
    res = await cli(api, "publish", "--tenant", tenant, "--type", "bad type!", "--payload", "{}")
    refused(res, 422, "event_type")
    (tmp_path / "latin1.json").write_bytes(b'{"a":"\xff"}')
    for payload in (f"@{tmp_path / 'latin1.json'}", '{"a": NaN}', "Infinity"):
        res = await cli(api, "publish", "--tenant", tenant, "--type", "t", "--payload", payload)
        assert res.exit_code == 2 and "--payload" in res.output, res.output  # not a traceback
    res = await asyncio.to_thread(
        CliRunner().invoke, main, ["publish", "--tenant", tenant, "--type", "t", "--payload", "-"],
        input=b'{"a":"\xff"}', env={"REGIONSYNC_URL": api.base, "REGIONSYNC_TOKEN": None},
    )  # fmt: skip
    assert res.exit_code == 2 and "stdin is not UTF-8" in res.output, res.output
    for value in ("nan", "inf", "-inf"):  # JSON has no such numbers
        res = await cli(api, "tenants", "create", "--name", "x", "--publish-rate", value)
        assert res.exit_code == 2 and "not a finite number" in res.output, res.output
    res = await cli(api, "publish", "--tenant", tenant, "--type", "t", "--payload", "{nope")
    assert res.exit_code == 2 and "--payload" in res.output and "not JSON" in res.output
    res = await cli(api, "publish", "--tenant", tenant, "--type", "t", "--payload", "@/no/such")
    assert res.exit_code == 2 and "cannot read" in res.output
    res = await cli(api, "publish", "--tenant", tenant, "--type", "t", "--payload", "{}",
                    "--idempotency-key", "x" * 300)  # fmt: skip
    refused(res, 422, "Idempotency-Key")


async def test_endpoint_create_options_update_pause_resume(api: Api, tenant: str) -> None:
    ep = await js(api, "endpoints", "create", "--tenant", tenant, "--url",
                  "http://127.0.0.1:9/h", "--event-type", "a.*", "--filter",
                  '{"amount": {"$gt": 10}}', "--header", "X-Team: billing",
                  "--rate-limit", "5", "--max-in-flight", "3", "--description", "d",
                  "--payload-format", "standard-webhooks", "--paused")  # fmt: skip
    assert ep["filter"] == {"amount": {"$gt": 10}} and ep["headers"] == {"X-Team": "billing"}
    assert ep["rate_limit_per_s"] == 5 and ep["max_in_flight"] == 3 and ep["paused"] is True
    assert ep["payload_format"] == "standard-webhooks" and ep["description"] == "d"
    eid = ep["id"]
    up = await js(api, "endpoints", "update", "--tenant", tenant, eid, "--url",
                  "http://127.0.0.1:9/two", "--add-event-type", "b", "--no-filter")  # fmt: skip
    assert up["url"] == "http://127.0.0.1:9/two" and sorted(up["event_types"]) == ["a.*", "b"]
    assert up["filter"] is None
    assert (await js(api, "endpoints", "resume", "--tenant", tenant, eid))["paused"] is False
    assert (await js(api, "endpoints", "pause", "--tenant", tenant, eid))["paused"] is True
    assert (await js(api, "endpoints", "show", "--tenant", tenant, eid))["paused"] is True
    res = await cli(api, "endpoints", "update", "--tenant", tenant, eid)
    assert res.exit_code == 2 and "nothing to change" in res.output
    refused(await cli(api, "endpoints", "update", "--tenant", tenant, eid, "--url",
                      "ftp://127.0.0.1/x"), 422, "url")  # fmt: skip
    refused(await cli(api, "endpoints", "pause", "--tenant", tenant, "ep_nope"), 404, "endpoint")
    refused(await cli(api, "endpoints", "rotate-secret", "--tenant", tenant, "ep_nope"), 404,
            "endpoint")  # fmt: skip


async def test_endpoint_bad_options_name_the_field(api: Api, tenant: str) -> None:
    base = ("endpoints", "create", "--tenant", tenant, "--url", "http://127.0.0.1:9/h")
    refused(await cli(api, *base, "--rate-limit", "0"), 422, "rate_limit_per_s")
    refused(await cli(api, *base, "--header", "Content-Type: x"), 422, "headers.Content-Type")
    refused(await cli(api, *base, "--filter", '{"a": {"$nope": 1}}'), 422, "filter.a.$nope")
    res = await cli(api, *base, "--header", "no colon")
    assert res.exit_code == 2 and "'Name: value'" in res.output
    res = await cli(api, *base, "--filter", "{bad")
    assert res.exit_code == 2 and "--filter" in res.output


async def test_rotate_secret_and_test_filter(api: Api, tenant: str) -> None:
    ep = await js(api, "endpoints", "create", "--tenant", tenant, "--url",
                  "http://127.0.0.1:9/h", "--filter", '{"amount": {"$gt": 10}}')  # fmt: skip
    rotated = await js(api, "endpoints", "rotate-secret", "--tenant", tenant, ep["id"])
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != ep["secret"]
    hit = await js(api, "endpoints", "test-filter", "--tenant", tenant, ep["id"],
                   "--payload", '{"amount": 11}')  # fmt: skip
    miss = await js(api, "endpoints", "test-filter", "--tenant", tenant, ep["id"],
                    "--payload", "-", stdin='{"amount": 1}')  # fmt: skip
    assert hit["matches"] is True and miss["matches"] is False and miss["failed_clause"]
    res = await cli(api, "endpoints", "test-filter", "--tenant", tenant, "ep_nope",
                    "--payload", "{}")  # fmt: skip
    refused(res, 404, "endpoint")


async def test_event_types_create_list_update_delete(api: Api, tenant: str) -> None:
    schema = '{"type": "object", "required": ["id"]}'
    made = await js(api, "event-types", "create", "--tenant", tenant, "--name", "invoice.paid",
                    "--description", "paid", "--schema", schema)  # fmt: skip
    assert made["name"] == "invoice.paid" and made["schema"]["required"] == ["id"]
    assert "invoice.paid" in ok(await cli(api, "event-types", "list", "--tenant", tenant))
    up = await js(api, "event-types", "update", "--tenant", tenant, "invoice.paid",
                  "--deprecated", "--no-schema")  # fmt: skip
    assert up["deprecated"] is True and up["schema"] is None
    shown = await js(api, "event-types", "show", "--tenant", tenant, "invoice.paid")
    assert shown["deprecated"] is True
    assert await js(api, "event-types", "delete", "--tenant", tenant, "invoice.paid") == {
        "deleted": "event type", "id": "invoice.paid"}  # fmt: skip
    assert await js(api, "event-types", "list", "--tenant", tenant) == []
    res = await cli(api, "event-types", "create", "--tenant", tenant, "--name", "x",
                    "--schema", '{"type": 5}')  # fmt: skip
    refused(res, 422, "schema")
    res = await cli(api, "event-types", "update", "--tenant", tenant, "nope", "--deprecated")
    refused(res, 404, "event_type")


async def test_attempts_in_both_orders_audit_and_jobs(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    ep = await js(api, "endpoints", "create", "--tenant", tenant, "--url", receiver.url("r"))
    receiver.secrets["r"] = ep["secret"]
    receiver.fail_first["r"] = 2  # two failures, then a success
    ev = await js(api, "publish", "--tenant", tenant, "--type", "t", "--payload", "{}")

    async def delivered() -> list:
        resp = await api.client.get(f"/v1/tenants/{tenant}/deliveries?status=delivered")
        return resp.json()["items"]

    dlv = (await eventually(delivered, timeout_s=60))[0]
    assert ev["id"] in ok(await cli(api, "events", "list", "--tenant", tenant))
    newest = await js(api, "attempts", "list", "--tenant", tenant, "--delivery", dlv["id"])
    oldest = await js(api, "attempts", "list", "--tenant", tenant, "--delivery", dlv["id"],
                      "--order", "asc")  # fmt: skip
    assert [a["status_code"] for a in oldest] == [500, 500, 204]
    assert newest == oldest[::-1]
    by_ep = await js(api, "attempts", "list", "--tenant", tenant, "--endpoint", ep["id"],
                     "--status", "failed")  # fmt: skip
    assert [a["status_code"] for a in by_ep] == [500, 500]
    table = ok(await cli(api, "attempts", "list", "--tenant", tenant, "--delivery", dlv["id"]))
    assert table.splitlines()[0].split()[:3] == ["DELIVERY", "GENERATION", "N"]
    res = await cli(api, "attempts", "list", "--tenant", tenant, "--delivery", dlv["id"],
                    "--order", "sideways")  # fmt: skip
    refused(res, 422, "order")
    res = await cli(api, "attempts", "list", "--tenant", tenant)
    assert res.exit_code == 2 and "--delivery or --endpoint" in res.output
    entries = await js(api, "audit", "list", "--tenant", tenant)
    assert any(e["op"] == "endpoint.create" for e in entries), entries
    refused(await cli(api, "audit", "list", "--since", "yesterday"), 422, "since")
    res = await cli(api, "replay", "--tenant", tenant, "--endpoint", ep["id"], "--since",
                    EPOCH, "--poll", "0.05", "--json")  # fmt: skip
    job = json.loads(ok(res)[res.output.index("{") :])  # after the progress (stderr)
    listed = await js(api, "jobs", "list", "--tenant", tenant)
    assert [j["id"] for j in listed] == [job["id"]]
    assert (await js(api, "jobs", "show", "--tenant", tenant, job["id"]))["status"] == "succeeded"
    refused(await cli(api, "jobs", "show", "--tenant", tenant, "job_nope"), 404, "job")


async def test_sources_create_with_every_option(api: Api, tenant: str) -> None:
    gh = await js(api, "sources", "create", "--tenant", tenant, "--kind", "github", "--secret",
                  "s3cret", "--ack-policy", "one-remote")  # fmt: skip
    assert gh["ack_policy"] == "one-remote"
    hm = await js(api, "sources", "create", "--tenant", tenant, "--kind", "hmac", "--secret",
                  "k", "--header", "x-sig", "--algorithm", "sha512", "--encoding", "base64",
                  "--prefix", "v1=", "--event-type-from", "header:x-type", "--id-from",
                  "payload:id", "--default-event-type", "thing", "--priority", "low")  # fmt: skip
    want = {"header": "x-sig", "algorithm": "sha512", "encoding": "base64", "prefix": "v1=",
            "event_type_from": "header:x-type", "id_from": "payload:id",
            "default_event_type": "thing", "priority": "low"}  # fmt: skip
    assert {k: hm[k] for k in want} == want, hm
    res = await cli(api, "sources", "create", "--tenant", tenant, "--kind", "hmac", "--secret",
                    "k", "--id-from", "nowhere")  # fmt: skip
    refused(res, 422, "id_from")
    res = await cli(api, "sources", "create", "--tenant", tenant, "--kind", "github",
                    "--secret", "s", "--ack-policy", "always")  # fmt: skip
    assert res.exit_code == 2 and "--ack-policy" in res.output


async def test_tenant_create_options_and_json_after_every_command(api: Api) -> None:
    t = await js(api, "tenants", "create", "--id", "t2", "--name", "Two", "--publish-rate",
                 "50", "--strict-event-types", "--ack-policy", "one-remote")  # fmt: skip
    assert t["publish_rate_per_s"] == 50 and t["strict_event_types"] is True
    assert t["ack_policy"] == "one-remote"
    refused(await cli(api, "tenants", "create", "--name", "x", "--publish-rate", "-1"), 422,
            "publish_rate_per_s")  # fmt: skip
    assert await js(api, "tenants", "delete", "t2") == {"deleted": "tenant", "id": "t2"}
    assert isinstance(await js(api, "status"), dict)
    assert await js(api, "tenants", "list") == []
