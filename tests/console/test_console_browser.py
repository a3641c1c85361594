"""The web console in headless chromium against a real three-region loopback cluster
(issue 15): an operator logs in with an admin token, sees the regions, finds the failing
endpoint, opens its last attempt (the receiver's 500 and its body), fixes the receiver,
presses recover and sees the job end and every delivery succeed; a tenant token sees its
own tenant only (the consumer portal). Screenshots go to test-artifacts/console/."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import httpx
import pytest
from console_support import SwitchableReceiver
from playwright.async_api import Browser, Page, expect

from regionsync.demo import REGIONS, Cluster

pytestmark = pytest.mark.asyncio(loop_scope="module")

US, EU, AP = REGIONS
TIMEOUT_MS = 45_000  # a wide margin: a loaded two-core machine, not the browser's speed
expect.set_options(timeout=TIMEOUT_MS)
# receiver name -> the generated id of its endpoint, made by the first test
ENDPOINTS: dict[str, str] = {}


async def eventually(check, timeout_s: float = 30.0):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s (last: {value!r})")
        await asyncio.sleep(0.1)


async def ok(client: httpx.AsyncClient, method: str, url: str, status: int, **kw) -> dict:  # noqa: ANN003
    resp = await client.request(method, url, **kw)
    assert resp.status_code == status, f"{method} {url}: {resp.status_code} {resp.text}"
    return resp.json() if resp.content else {}


def script_errors(page: Page) -> list[str]:
    """The page's script errors; the 4xx answers the tests ask for are logged by chromium
    as "Failed to load resource" and are no error of the console."""
    return [e for e in page.errors if "Failed to load resource" not in e]  # type: ignore[attr-defined]


async def login(browser: Browser, base: str, token: str, *, refused: bool = False) -> Page:
    """A fresh browser context (its own sessionStorage) logged in with ``token``, its
    landing page drawn (so a later goto is never overtaken by the login's own redirect)."""
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: errors.append(f"{msg.text} {msg.location}") if msg.type == "error" else None,
    )
    page.errors = errors  # type: ignore[attr-defined]
    await page.goto(f"{base}/console")
    await page.fill("#token", token)
    await page.click("#login button[type=submit]")
    if not refused:
        await expect(page.locator("#login")).to_have_count(0)
    return page


async def test_operator_finds_failing_endpoint_and_recovers_it(
    cluster: Cluster, receiver: SwitchableReceiver, browser: Browser, shots: Path
) -> None:
    base = cluster.http[US]
    async with httpx.AsyncClient(timeout=10.0) as c:
        admin = (await ok(c, "POST", f"{base}/v1/tokens", 201,
                          json={"scope": "admin", "name": "console"}))["token"]  # fmt: skip
        auth = {"authorization": f"Bearer {admin}"}
        for t in ("acme", "globex"):
            await ok(c, "POST", f"{base}/v1/tenants", 201, json={"id": t, "name": t.title()},
                     headers=auth)  # fmt: skip
        for tenant, name in (("acme", "acme-orders"), ("globex", "globex-hooks")):
            own = {"Authorization": "Bearer console-s3cr3t", "X-Team": "payments"}
            made = await ok(c, "POST", f"{base}/v1/tenants/{tenant}/endpoints", 201,
                            json={"url": receiver.url(name), "headers": own},
                            headers=auth)  # fmt: skip
            receiver.secrets[name] = made["secret"]
            ENDPOINTS[name] = made["id"]
        receiver.broken.add("acme-orders")
        orders = f"/v1/tenants/acme/endpoints/{ENDPOINTS['acme-orders']}"

        async def replicated() -> bool:
            codes = [(await c.get(f"{cluster.http[r]}{orders}", headers=auth)).status_code
                     for r in (EU, AP)]  # fmt: skip
            return codes == [200, 200]

        await eventually(replicated)
        events = []
        for region, n in ((US, 2), (EU, 1)):  # deliveries owned by two regions
            for i in range(n):
                ev = await ok(c, "POST", f"{cluster.http[region]}/v1/tenants/acme/events", 202,
                              json={"event_type": "order.paid", "payload": {"n": i}},
                              headers=auth)  # fmt: skip
                events.append(ev["id"])
        await ok(c, "POST", f"{base}/v1/tenants/globex/events", 202,
                 json={"event_type": "invoice.sent", "payload": {}}, headers=auth)  # fmt: skip

        async def all_dead_and_failing() -> bool:
            ds = (await ok(c, "GET", f"{base}{orders}/deliveries", 200, headers=auth))["items"]
            ep = await ok(c, "GET", f"{base}{orders}", 200, headers=auth)
            return (
                len(ds) == 3
                and {d["status"] for d in ds} == {"dead"}
                and (ep["state"] == "failing")
            )

        await eventually(all_dead_and_failing)

        # every attempt, with the request headers it sent, is readable in every region
        # (real gRPC replication): the same rows from us-east-1, eu-central-1, ap-southeast-1
        ds = (await ok(c, "GET", f"{base}{orders}/deliveries", 200, headers=auth))["items"]

        async def same_attempts_everywhere(d: dict) -> list | None:
            rows = [
                (
                    await ok(
                        c,
                        "GET",
                        f"{cluster.http[r]}/v1/tenants/acme/deliveries/{d['id']}/attempts",
                        200,
                        headers=auth,
                    )
                )["items"]  # fmt: skip
                for r in (US, EU, AP)
            ]
            done = len(rows[0]) == 4 and rows[0] == rows[1] == rows[2]
            return rows[0] if done else None

        for d in ds:
            for a in await eventually(lambda d=d: same_attempts_everywhere(d)):
                assert a["region"] == d["region"]
                assert f"webhook-id: {d['event']}\n" in a["request_headers"]
                assert "webhook-signature: v1," in a["request_headers"]

    page = await login(browser, base, admin)
    # the cluster page: this region and its two peers, connected, registry digests agree
    regions = page.locator("#regions tbody tr")
    await expect(regions).to_have_count(3)
    for r in (EU, AP):
        await expect(page.locator(f"#regions tr[data-region='{r}'] td").nth(1)).to_have_text("yes")
    await expect(page.locator("#regions")).to_contain_text(US)

    async def agree() -> bool:  # every region's own registry hash, asked over HTTP
        await page.reload()
        await page.locator("#regions").wait_for()
        return await page.locator("#regions [data-agrees='agrees']").count() == 2

    await eventually(agree)
    await expect(page.locator("#agreement")).to_contain_text("every region")
    await expect(page.locator("#role")).to_have_text("this process (the region's only one)")
    # issue 41: refusals on both sides (none here): this node's, and each peer's of ours
    await expect(page.locator("#refused")).to_have_text("none")
    await expect(page.locator("#regions [data-refused='0']")).to_have_count(2)
    # every region runs this release: each peer's version, and the new features in use
    await expect(page.locator("#regions [data-version='0.2.0']")).to_have_count(3)
    await expect(page.locator("#features")).to_contain_text("optional-fields")
    await page.screenshot(path=shots / "1-cluster.png", full_page=True)

    await page.click("nav >> text=Tenants")
    await expect(page.locator("#tenants tbody tr")).to_have_count(2)
    await page.screenshot(path=shots / "2-tenants.png", full_page=True)

    # find the failing endpoint among acme's
    await page.click("#tenants >> text=acme")
    failing = page.locator("#endpoints tr:has([data-state='failing'])")
    await expect(failing).to_have_count(1)
    await expect(failing).to_contain_text(ENDPOINTS["acme-orders"])
    await page.screenshot(path=shots / "3-endpoints.png", full_page=True)
    await failing.locator("a").first.click()

    # its last attempt: the receiver's 500 and the body it answered
    await expect(page.locator("#endpoint-state")).to_have_text("failing")
    await expect(page.locator("#deliveries tbody tr[data-status='dead']")).to_have_count(3)
    # attempts replicate with their delivery: eu-central-1's are readable in us-east-1
    await expect(page.locator("#attempts tbody")).to_contain_text(EU)
    await page.locator("#attempts button.open-attempt").first.click()
    details = page.locator("#attempts .attempt-details")
    await expect(details.locator(".attempt-status")).to_have_text("500")
    await expect(details.locator(".response-excerpt")).to_contain_text("NullPointerException")
    await expect(details).to_contain_text("webhook-id: evt_")
    # the request headers that attempt sent, as recorded with it (issue 15): its own
    # timestamp and signature, the endpoint's headers with the credential redacted
    sent = details.locator(".request-headers")
    await expect(sent).to_contain_text("webhook-id: evt_")
    await expect(sent).to_contain_text(re.compile(r"webhook-timestamp: \d{10}\n"))
    await expect(sent).to_contain_text(re.compile(r"webhook-signature: v1,[A-Za-z0-9+/=]{44}"))
    await expect(sent).to_contain_text("X-Team: payments")
    await expect(sent).to_contain_text("Authorization: [redacted]")
    await expect(sent).not_to_contain_text("console-s3cr3t")
    await page.screenshot(path=shots / "4-endpoint-last-attempt.png", full_page=True)

    # the event it belongs to: every delivery with its attempts and their regions
    await details.locator("a.event-link").click()
    await expect(page.locator("section.delivery")).to_have_count(1)
    await expect(page.locator("section.delivery .attempt-details")).to_have_count(4)
    each = page.locator("section.delivery .attempt-details .request-headers")
    await expect(each).to_have_count(4)
    for i in range(4):
        await expect(each.nth(i)).to_contain_text(re.compile(r"webhook-signature: v1,"))
    await expect(page.locator("section.delivery .attempt-status").first).to_have_text("500")
    await page.screenshot(path=shots / "5-event.png", full_page=True)

    # the event log, filtered by type
    await page.goto(f"{base}/console#/t/acme/events")
    await expect(page.locator("#events tbody tr")).to_have_count(3)
    await page.fill("#event-filters input[name=event_type]", "invoice.*")
    await page.click("#event-filters button[type=submit]")
    await expect(page.locator("#events tbody tr")).to_have_count(0)
    await page.fill("#event-filters input[name=event_type]", "order.*")
    await page.select_option("#event-filters select[name=status]", "dead")
    await page.click("#event-filters button[type=submit]")
    await expect(page.locator("#events tbody tr")).to_have_count(3)
    await page.screenshot(path=shots / "6-events.png", full_page=True)

    # fix the receiver, press recover, see the job end and every delivery succeed
    receiver.broken.clear()
    await page.goto(f"{base}/console#/t/acme/endpoints/{ENDPOINTS['acme-orders']}")
    await page.click("button.recover")
    await expect(page.locator("#job [data-status='succeeded']")).to_contain_text("3 done")

    async def delivered_in_console() -> bool:
        await page.reload()
        await page.locator("#deliveries").wait_for()
        return await page.locator("#deliveries tbody tr[data-status='delivered']").count() == 3

    await eventually(delivered_in_console)
    await expect(page.locator("#endpoint-state")).to_have_text("active")
    assert {wid for (name, wid) in receiver.seen if name == "acme-orders"} == set(events)
    await page.screenshot(path=shots / "7-recovered.png", full_page=True)

    # 410 Gone disables it; what is published meanwhile is skipped; re-enable, replay
    receiver.gone.add("acme-orders")
    async with httpx.AsyncClient(timeout=10.0, headers=auth) as c:
        publish = f"{base}/v1/tenants/acme/events"
        body = {"event_type": "order.paid", "payload": {"n": 9}}
        await ok(c, "POST", publish, 202, json=body)

        async def state(want: str) -> bool:
            ep = await ok(c, "GET", f"{base}{orders}", 200)
            return ep["state"] == want

        await eventually(lambda: state("disabled"))
        skipped = (await ok(c, "POST", publish, 202, json=body))["id"]

        async def is_skipped() -> bool:
            page_ = await ok(c, "GET", f"{base}/v1/tenants/acme/deliveries",
                             200, params={"status": "skipped"})  # fmt: skip
            return skipped in [d["event"] for d in page_["items"]]

        await eventually(is_skipped)
    receiver.gone.clear()
    await page.reload()
    await expect(page.locator("#endpoint-state")).to_have_text("disabled")
    # (the 410's own delivery may end skipped too, if it was retried once disabled)
    await expect(page.locator("#deliveries tbody tr[data-status='skipped']").first).to_be_visible()
    await page.screenshot(path=shots / "8-disabled.png", full_page=True)
    await page.click("button.reenable")
    await expect(page.locator("#endpoint-state")).to_have_text("active")
    await page.click("button.replay")
    await expect(page.locator("#job [data-status='succeeded']")).to_contain_text("replay-missing")

    async def replayed() -> bool:
        return any(wid == skipped for (_, wid) in receiver.seen)

    await eventually(replayed)

    # pause (after confirming), resume, rotate the secret (after confirming)
    await page.click("button.pause")
    await expect(page.locator("#confirm")).to_be_visible()
    await page.click("#confirm-ok")
    await expect(page.locator("#endpoint-state")).to_have_text("paused")
    await page.click("button.resume")
    await expect(page.locator("#endpoint-state")).to_have_text("active")
    secret = await page.locator("#secret").inner_text()
    await page.click("button.rotate")
    await page.click("#confirm-ok")
    await expect(page.locator("#flash")).to_contain_text("secret rotated")
    await expect(page.locator("#secret")).not_to_have_text(secret)
    await page.screenshot(path=shots / "9-after-actions.png", full_page=True)
    assert page.errors == []  # type: ignore[attr-defined]


async def test_tenant_token_sees_only_its_tenant(
    cluster: Cluster, receiver: SwitchableReceiver, browser: Browser, shots: Path
) -> None:
    base = cluster.http[US]
    async with httpx.AsyncClient(timeout=10.0) as c:
        if not receiver.secrets:  # run alone: the first test made the tenants
            pytest.fail("run with test_operator_finds_failing_endpoint_and_recovers_it")
        scope = {"scope": "tenant:globex:manage", "name": "globex-portal"}
        made = await ok(c, "POST", f"{base}/v1/tokens", 201, json=scope)
    page = await login(browser, base, made["token"])
    await expect(page).to_have_url(f"{base}/console#/t/globex/endpoints")
    await expect(page.locator("#endpoints tbody tr")).to_have_count(1)
    await expect(page.locator("#endpoints")).to_contain_text(ENDPOINTS["globex-hooks"])
    await expect(page.locator("nav a")).to_have_text(["Endpoints", "Events", "Event types"])
    content = await page.content()
    assert "acme" not in content and ENDPOINTS["acme-orders"] not in content
    await page.screenshot(path=shots / "10-portal-endpoints.png", full_page=True)

    await page.click(f"#endpoints >> text={ENDPOINTS['globex-hooks']}")
    await expect(page.locator("#deliveries tbody tr[data-status='delivered']")).to_have_count(1)
    # a manage token may pause or delete its endpoints (the API allows it): the buttons
    # are there, asking first
    await expect(page.locator("button.pause")).to_have_count(1)
    ids_before = receiver.seen.copy()
    await page.click("#deliveries button.retry")
    await expect(page.locator("#flash")).to_contain_text("Retry of dlv_")

    async def sent_again() -> bool:
        return sum(receiver.seen.values()) > sum(ids_before.values())

    await eventually(sent_again)
    await page.screenshot(path=shots / "11-portal-endpoint.png", full_page=True)

    # another tenant's pages and the operator's pages are refused
    await page.goto(f"{base}/console#/t/acme/endpoints")
    await expect(page.locator("#error")).to_contain_text("404")
    await expect(page.locator("#error")).to_contain_text("no tenant")
    await page.goto(f"{base}/console#/t/acme/endpoints/{ENDPOINTS['acme-orders']}")
    await expect(page.locator("#error")).to_contain_text("404")
    await page.goto(f"{base}/console#/cluster")
    await expect(page.locator("#error")).to_contain_text("403")
    await page.screenshot(path=shots / "12-portal-refused.png", full_page=True)


async def test_login_refusals_and_the_open_loopback_node(
    cluster: Cluster, browser: Browser
) -> None:
    """A wrong token is refused on the login form; on a node with no configured tokens
    listening on loopback (these), an empty token is the anonymous admin."""
    base = cluster.http[EU]
    page = await login(browser, base, "rs_not-a-token", refused=True)
    await expect(page.locator("#flash")).to_contain_text("Login refused: 401")
    await expect(page.locator("#login")).to_be_visible()
    await page.fill("#token", "")
    await page.click("#login button[type=submit]")
    await expect(page.locator("#regions tbody tr")).to_have_count(3)
    await expect(page.locator("#who")).to_have_text("admin (anonymous)")
    await page.click("#logout")
    await expect(page.locator("#login")).to_be_visible()
    # a deep link opened logged out: after the login, the page it names, not the home page
    await page.goto(f"{base}/console#/tokens")
    await page.fill("#token", "")
    await page.click("#login button[type=submit]")
    await expect(page.locator("#tokens")).to_be_visible()
    await expect(page).to_have_url(f"{base}/console#/tokens")


async def test_broker_endpoint_shows_its_destination_without_password(
    cluster: Cluster, browser: Browser, shots: Path
) -> None:
    """Issue 46: the list names the destination type, the endpoint page the broker's
    names and its URL; the URL's password appears nowhere in the console."""
    base, password = cluster.http[AP], "console-broker-pw"
    dest = {"type": "rabbitmq", "url": f"amqp://app:{password}@127.0.0.1:1/prod",
            "exchange": "events", "routing_key": "orders"}  # fmt: skip
    async with httpx.AsyncClient(timeout=10.0) as c:
        await ok(c, "POST", f"{base}/v1/tenants", 201, json={"id": "initech", "name": "I"})
        made = await ok(c, "POST", f"{base}/v1/tenants/initech/endpoints", 201,
                        json={"destination": dest})  # fmt: skip
    page = await login(browser, base, "")
    await expect(page.locator("#regions tbody tr")).to_have_count(3)  # the landing page
    await page.goto(f"{base}/console#/t/initech/endpoints")
    row = page.locator(f"#endpoints tr[data-endpoint='{made['id']}']")
    await expect(row).to_contain_text("rabbitmq")
    await expect(row).to_contain_text("amqp://app:\u2026@127.0.0.1:1/prod")
    assert password not in await page.content()
    await page.click(f"#endpoints >> text={made['id']}")
    await expect(page.locator("#endpoint-destination")).to_have_text(
        "rabbitmq: exchange events, routing key orders"
    )
    assert password not in await page.content()
    await page.screenshot(path=shots / "20-broker-endpoint.png", full_page=True)

    # made from the console's form: the API's problem shown at the destination field
    await page.goto(f"{base}/console#/t/initech/endpoints")
    await page.click("summary >> text=New endpoint")
    form = page.locator("#new-endpoint")
    redis = {"type": "redis", "url": f"redis://:{password}@127.0.0.1:1/0"}
    await form.locator("[name=destination]").fill(json.dumps(redis))
    await form.locator("button[type=submit]").click()
    await expect(page.locator("#new-endpoint-destination-error")).to_contain_text("stream")
    await form.locator("[name=destination]").fill(json.dumps({**redis, "stream": "orders"}))
    await form.locator("button[type=submit]").click()
    await expect(page.locator("#endpoint-destination")).to_have_text("redis: stream orders")
    # edited: another stream; the form never shows the stored destination (its password)
    await page.click("summary >> text=Edit endpoint")
    edit = page.locator("#edit-endpoint [name=destination]")
    await expect(edit).to_have_value("")
    await edit.fill(json.dumps({**redis, "stream": "orders-2"}))
    await page.locator("#edit-endpoint button[type=submit]").click()
    await expect(page.locator("#endpoint-destination")).to_have_text("redis: stream orders-2")
    assert password not in await page.content()
    assert script_errors(page) == []
