"""Retry, recover and replay-missing keep the webhook-id; secret rotation; attempt log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api_support import Api, RecordingReceiver, assert_problem, eventually
from standardwebhooks.webhooks import Webhook

EPOCH = "2000-01-01T00:00:00Z"


async def _endpoint(api: Api, tenant: str, receiver: RecordingReceiver, name: str, **kw) -> str:
    resp = await api.client.post(
        f"/v1/tenants/{tenant}/endpoints", json={"url": receiver.url(name), **kw}
    )
    assert resp.status_code == 201, resp.text
    receiver.secrets[name] = resp.json()["secret"]
    return resp.json()["id"]


async def _publish(api: Api, tenant: str, i: int = 0) -> str:
    resp = await api.client.post(
        f"/v1/tenants/{tenant}/events", json={"event_type": "t", "payload": {"i": i}}
    )
    assert resp.status_code == 202
    return resp.json()["id"]


async def _deliveries(api: Api, tenant: str, ep: str, status: str | None = None) -> list[dict]:
    q = f"?status={status}" if status else ""
    resp = await api.client.get(f"/v1/tenants/{tenant}/endpoints/{ep}/deliveries{q}")
    return resp.json()["items"]


async def _job_done(api: Api, tenant: str, job: dict) -> dict:
    async def finished() -> dict | None:
        body = (await api.client.get(f"/v1/tenants/{tenant}/jobs/{job['id']}")).json()
        return body if body["status"] != "running" else None

    return await eventually(finished)


async def test_recover_dead_deliveries_keeps_webhook_id(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    ep = await _endpoint(api, tenant, receiver, "r")
    receiver.fail_first["r"] = 100  # every try fails until we stop it
    events = [await _publish(api, tenant, i) for i in range(3)]

    async def all_dead() -> bool:
        return len(await _deliveries(api, tenant, ep, "dead")) == 3

    await eventually(all_dead)
    receiver.fail_first["r"] = 0
    resp = await api.client.post(
        f"/v1/tenants/{tenant}/endpoints/{ep}/recover", json={"since": EPOCH}
    )
    assert resp.status_code == 202 and resp.json()["kind"] == "recover"
    job = await _job_done(api, tenant, resp.json())
    assert job["status"] == "succeeded" and job["done"] == 3

    async def delivered() -> bool:
        return len(await _deliveries(api, tenant, ep, "delivered")) == 3

    await eventually(delivered)
    ok = [h for h in receiver.of("r") if h.status == 204]
    assert sorted(h.headers["webhook-id"] for h in ok) == sorted(events)
    d = (await _deliveries(api, tenant, ep))[0]
    assert d["generation"] == 1
    log = (await api.client.get(f"/v1/tenants/{tenant}/deliveries/{d['id']}/attempts")).json()
    assert [a["error"] for a in log["items"]][0] is None and len(log["items"]) >= 2


async def test_retry_one_and_replay_missing_after_pause(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    ep = await _endpoint(api, tenant, receiver, "p", paused=True)
    evt = await _publish(api, tenant)
    skipped = await _deliveries(api, tenant, ep, "skipped")
    assert len(skipped) == 1 and receiver.of("p") == []
    patched = await api.client.patch(f"/v1/tenants/{tenant}/endpoints/{ep}", json={"paused": False})
    assert patched.json()["state"] == "active"
    resp = await api.client.post(
        f"/v1/tenants/{tenant}/endpoints/{ep}/replay-missing", json={"since": EPOCH}
    )
    assert resp.status_code == 202
    await _job_done(api, tenant, resp.json())

    async def got(n: int):
        async def check() -> bool:
            return len([h for h in receiver.of("p") if h.status == 204]) == n

        return check

    await eventually(await got(1))
    retry = await api.client.post(f"/v1/tenants/{tenant}/deliveries/{skipped[0]['id']}/retry")
    assert retry.status_code == 202 and retry.json()["generation"] == 2
    await eventually(await got(2))
    assert {h.headers["webhook-id"] for h in receiver.of("p")} == {evt}
    assert_problem(await api.client.post(f"/v1/tenants/{tenant}/deliveries/dlv_x/retry"), 404)
    bad = await api.client.post(f"/v1/tenants/{tenant}/endpoints/{ep}/recover", json={})
    assert_problem(bad, 422, "since")


async def test_secret_rotation_signs_with_both(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    ep = await _endpoint(api, tenant, receiver, "s")
    old = receiver.secrets["s"]
    rotated = await api.client.post(f"/v1/tenants/{tenant}/endpoints/{ep}/rotate-secret")
    new = rotated.json()["secret"]
    assert rotated.status_code == 200 and new != old and new.startswith("whsec_")
    receiver.secrets["s"] = new
    await _publish(api, tenant)

    async def arrived() -> bool:
        return bool(receiver.of("s"))

    await eventually(arrived)
    hit = receiver.of("s")[0]
    assert len(hit.headers["webhook-signature"].split()) == 2
    for secret in (old, new):  # receivers on either secret verify during the overlap
        Webhook(secret).verify(hit.body, hit.headers)


async def test_refused_secrets_and_reserved_headers(api: Api, tenant: str) -> None:
    url = "http://127.0.0.1:9/x"
    for body, field in (
        ({"url": url, "secret": "v1,whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "secret"),
        ({"url": url, "secret": "whsec_c2hvcnQ="}, "secret"),
        ({"url": url, "headers": {"User-Agent": "x"}}, "headers.User-Agent"),
        ({"url": url, "headers": {"webhook-id": "x"}}, "headers.webhook-id"),
    ):
        resp = await api.client.post(f"/v1/tenants/{tenant}/endpoints", json=body)
        assert_problem(resp, 422, field)


async def test_endpoint_attempt_log_filters_and_pages(
    api: Api, tenant: str, receiver: RecordingReceiver
) -> None:
    ep = await _endpoint(api, tenant, receiver, "a")
    receiver.fail_first["a"] = 2
    for i in range(3):
        await _publish(api, tenant, i)

    async def settled() -> bool:
        return len(await _deliveries(api, tenant, ep, "delivered")) == 3

    await eventually(settled)
    base = f"/v1/tenants/{tenant}/endpoints/{ep}/attempts"
    failed = (await api.client.get(f"{base}?status=failed")).json()["items"]
    assert [a["status_code"] for a in failed] == [500, 500]
    seen, cursor = [], None
    while True:
        q = f"?limit=2&cursor={cursor}" if cursor else "?limit=2"
        page = (await api.client.get(base + q)).json()
        seen += page["items"]
        cursor = page["next"]
        if not cursor:
            break
    assert len(seen) == 5 and len({(a["delivery"], a["n"]) for a in seen}) == 5
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert (await api.client.get(base, params={"since": future})).json()["items"] == []
    assert_problem(await api.client.get(f"{base}?status=bogus"), 422, "status")
    assert_problem(await api.client.get(f"{base}?cursor=nope"), 422, "cursor")
    # retention: nothing is older than 35 days here, so a purge keeps everything
    assert await api.node.recovery.purge_attempts() == 0
