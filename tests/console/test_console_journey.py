"""The operator's and the consumer's journey end to end (issue 43, "Done when"), in
headless chromium against a real three-region loopback cluster with operational
webhooks on: from the console, by clicks and typing, create a tenant, an event type and
an endpoint, publish, see the delivery; break the receiver (503), publish, see the
endpoint failing and ``endpoint.failing`` sent once; fix it, see the delivery succeed,
the endpoint active and ``endpoint.recovered`` sent once. Then the same journey as the
consumer, through a portal link in the application's iframe. Screenshots go to
test-artifacts/console/."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from console_support import StatusReceiver, html_host
from playwright.async_api import Browser, FrameLocator, Page, expect
from test_console_browser import TIMEOUT_MS, eventually, login, ok, script_errors
from test_console_manage import fill_form

from regionsync.demo import REGIONS, Cluster, start_cluster

pytestmark = pytest.mark.asyncio(loop_scope="module")

US, EU, AP = REGIONS
WAIT_MS = 45_000  # every expect below: a behaviour that takes seconds, with a wide margin
# a payload whose digits a JSON round trip would change: sent and delivered as typed
TYPED = '{"amount": 1.10, "note": "first order",\n "big": 12345678901234567890}'
SCHEMA = '{"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}'


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def hooks() -> AsyncIterator[StatusReceiver]:
    rcv = StatusReceiver()
    async with rcv.running():
        yield rcv


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ops_cluster(hooks: StatusReceiver) -> AsyncIterator[Cluster]:
    """Three regions reporting to the operations tenant ``ops``, whose endpoint is the
    receiver's ``ops``; a delivery is retried every 0.3 s for a minute, three failures
    in a row make an endpoint failing, and a failing endpoint is probed within 0.5 s:
    each transition takes about a second."""
    async with start_cluster(
        sections={"operational_webhooks": {"tenant": "ops"}},
        retry_schedule_s=[0.3] * 200, failure_threshold=3, probe_initial_s=0.2,
        probe_max_s=0.5,
    ) as running:  # fmt: skip
        base = running.http[US]
        async with httpx.AsyncClient(timeout=10.0) as c:  # the platform owner's receiver
            await ok(c, "POST", f"{base}/v1/tenants", 201, json={"id": "ops", "name": "Ops"})
            await ok(c, "POST", f"{base}/v1/tenants/ops/endpoints", 201,
                     json={"url": hooks.url("ops"), "event_types": ["endpoint.*"]})  # fmt: skip
        yield running


def ops_events(hooks: StatusReceiver, event_type: str, endpoint: str) -> list[dict]:
    """The operational events of ``event_type`` about ``endpoint`` the ops receiver got."""
    out = []
    for hit in hooks.of("ops"):
        body = json.loads(hit.body)
        if hit.headers.get("webhook-event-type") == event_type and body["endpoint"] == endpoint:
            out.append(body)
    return out


async def once_in_every_region(
    c: httpx.AsyncClient, cluster: Cluster, event_type: str, endpoint: str
) -> None:
    """Every region's event log of ``ops`` holds one event of ``event_type`` about
    ``endpoint``: one per transition, whoever reported it (the log replicates)."""

    async def about(base: str) -> int:
        page = await ok(c, "GET", f"{base}/v1/tenants/ops/events", 200,
                        params={"event_type": event_type})  # fmt: skip
        n = 0
        for item in page["items"]:
            ev = await ok(c, "GET", f"{base}/v1/tenants/ops/events/{item['id']}", 200)
            n += ev["payload"]["endpoint"] == endpoint
        return n

    async def agreed() -> bool:
        return [await about(cluster.http[r]) for r in REGIONS] == [1, 1, 1]

    await eventually(agreed, timeout_s=30)


async def settle_then_once(hooks: StatusReceiver, event_type: str, endpoint: str) -> dict:
    """Wait for ``event_type`` about ``endpoint``, give a second report 3 s to arrive
    (failover_after_s is 5 s and no region is suspected, so none should), then return
    the one event."""

    async def arrived() -> bool:
        return bool(ops_events(hooks, event_type, endpoint))

    await eventually(arrived, timeout_s=30)
    await asyncio.sleep(3.0)
    got = ops_events(hooks, event_type, endpoint)
    assert len(got) == 1, got
    return got[0]


async def operator_publishes(page: Page, c: httpx.AsyncClient, base: str) -> None:
    """On the events page: the payload that is not JSON, and the one the schema refuses,
    are shown at the payload field (the latter in the API's words); then TYPED."""
    await page.click("summary >> text=Publish event")
    await fill_form(page, "publish", {"event_type": "order.paid", "payload": "{amount: 1}"})
    await expect(page.locator("#publish [data-error-for=payload]")).to_contain_text("not JSON")
    bad = '{"amount": "ten"}'
    await fill_form(page, "publish", {"payload": bad})
    refused = await c.post(f"{base}/v1/tenants/journey/events", content=(
        '{"event_type": "order.paid", "payload": ' + bad + "}").encode(),
        headers={"content-type": "application/json"})  # fmt: skip
    assert refused.status_code == 422 and refused.json()["field"].startswith("payload")
    await expect(page.locator("#publish [data-error-for=payload]")).to_contain_text(
        refused.json()["detail"]
    )
    await fill_form(page, "publish", {"payload": TYPED})
    await expect(page.locator("#published-event")).to_contain_text("evt_")


async def test_operator_journey_from_the_console(
    ops_cluster: Cluster, hooks: StatusReceiver, browser: Browser, shots: Path
) -> None:
    expect.set_options(timeout=WAIT_MS)
    base = ops_cluster.http[US]
    page = await login(browser, base, "")  # the open loopback node: anonymous admin
    page.set_default_timeout(WAIT_MS)

    # a tenant, an event type with a schema, an endpoint: every one through its form
    await page.click("nav >> text=Tenants")
    await page.click("summary >> text=New tenant")
    await fill_form(page, "new-tenant", {"id": "journey", "name": "Journey"})
    await expect(page).to_have_url(f"{base}/console#/t/journey/settings")
    await page.get_by_role("link", name="event types", exact=True).click()
    await page.click("summary >> text=New event type")
    await fill_form(page, "new-event-type", {"name": "order.paid", "schema": SCHEMA})
    await expect(page.locator("#event-types [data-event-type='order.paid']")).to_have_count(1)
    await page.click("nav >> text=Tenants")
    await (
        page.locator("#tenants [data-tenant=journey]")
        .get_by_role("link", name="endpoints", exact=True)
        .click()
    )
    await page.click("summary >> text=New endpoint")
    await fill_form(page, "new-endpoint", {"url": hooks.url("shop"), "event_types": "order.*"})
    await expect(page.locator("#endpoint")).to_contain_text(hooks.url("shop"))
    endpoint = page.url.rsplit("/", 1)[1]
    await expect(page.locator("#endpoint-state [data-state]")).to_have_text("active")

    # publish from the events page; see it delivered, byte-exact, on the event's page
    await page.locator("#endpoint").get_by_role("link", name="journey", exact=True).click()
    await page.get_by_role("link", name="Event log").click()
    await page.select_option("#live-interval", "2")
    await page.check("#live")
    async with httpx.AsyncClient(timeout=10.0) as c:
        await operator_publishes(page, c, base)
    await expect(page.locator("#events tbody tr")).to_have_count(1)
    await expect(page.locator("#events tbody tr")).to_contain_text("1/1 delivered")
    assert [h.body.decode() for h in hooks.of("shop")] == [TYPED]  # 1.10 as typed
    await page.click("#published-event")
    await expect(page.locator("section.delivery[data-status=delivered]")).to_have_count(1)
    assert await page.locator("#payload").text_content() == TYPED
    await page.screenshot(path=shots / "40-journey-delivered.png", full_page=True)

    # break the receiver, publish again: the endpoint turns failing, reported once
    hooks.broken.add("shop")
    await page.get_by_role("link", name="← event log").click()
    await page.click("summary >> text=Publish event")
    await fill_form(page, "publish", {"event_type": "order.paid", "payload": '{"amount": 2}'})
    await expect(page.locator("#published-event")).to_contain_text("evt_")
    await page.click("#published-event")
    await page.locator("section.delivery").get_by_role("link", name=endpoint).click()
    await expect(page.locator("#endpoint-state [data-state]")).to_have_text("failing")
    await expect(page.locator("#deliveries tbody tr[data-status=pending]")).to_have_count(1)
    await page.screenshot(path=shots / "41-journey-failing.png", full_page=True)
    failing = await settle_then_once(hooks, "endpoint.failing", endpoint)
    assert failing["tenant"] == "journey" and failing["from"] == "active"
    assert len(hooks.of("shop", 503)) >= 3

    # fix it: the waiting delivery succeeds, the endpoint is active, reported once
    hooks.broken.discard("shop")
    await expect(page.locator("#deliveries tbody tr[data-status=delivered]")).to_have_count(2)
    await expect(page.locator("#endpoint-state [data-state]")).to_have_text("active")
    await page.screenshot(path=shots / "42-journey-recovered.png", full_page=True)
    recovered = await settle_then_once(hooks, "endpoint.recovered", endpoint)
    assert recovered["trigger"] == "success" and recovered["from"] == "failing"
    assert failing["transition"] != recovered["transition"]
    async with httpx.AsyncClient(timeout=10.0) as c:
        await once_in_every_region(c, ops_cluster, "endpoint.failing", endpoint)
        await once_in_every_region(c, ops_cluster, "endpoint.recovered", endpoint)
    await page.uncheck("#live")
    assert script_errors(page) == []
    await page.context.close()
    expect.set_options(timeout=TIMEOUT_MS)


PORTAL_HTML = (
    '<!doctype html><title>app</title><iframe id="portal" src="{src}" width="1300" '
    'height="1400"></iframe>'
)


async def portal_page(browser: Browser, c: httpx.AsyncClient, base: str, host: dict) -> Page:
    """The application's page at ``host`` embedding a new portal link of ``consumer``
    that allows its origin (made through the API, as the tenant's application does)."""

    async def made() -> dict | None:
        resp = await c.post(f"{base}/v1/tenants/consumer/portal-sessions",
                            json={"ttl_s": 600, "allowed_origins": [host["origin"]]})  # fmt: skip
        if resp.status_code == 409:  # a peer's Hello not heard yet
            return None
        assert resp.status_code == 201, resp.text
        return resp.json()

    host["html"] = PORTAL_HTML.format(src=(await eventually(made))["url"])
    context = await browser.new_context(viewport={"width": 1400, "height": 1500})
    context.set_default_timeout(WAIT_MS)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors  # type: ignore[attr-defined]
    await page.goto(host["origin"])
    return page


async def consumer_adds_endpoint(frame: FrameLocator, page: Page, url: str) -> str:
    """Through the portal's form; returns the new endpoint's id."""
    await frame.locator("summary >> text=New endpoint").click()
    await frame.locator("#new-endpoint [name=url]").fill(url)
    await frame.locator("#new-endpoint [name=event_types]").fill("invoice.*")
    await frame.locator("#new-endpoint button[type=submit]").click()
    await expect(frame.locator("#endpoint")).to_contain_text(url)
    return page.frames[1].url.rsplit("/", 1)[1]


async def test_consumer_journey_through_a_portal_link_in_an_iframe(
    ops_cluster: Cluster, hooks: StatusReceiver, browser: Browser, shots: Path
) -> None:
    """The consumer adds an endpoint, sends a test event, sees the deliveries of what
    the application publishes, and sees its endpoint's health go failing and active
    again as its receiver breaks and is fixed; each transition reported once."""
    expect.set_options(timeout=WAIT_MS)
    base = ops_cluster.http[EU]
    events = f"{base}/v1/tenants/consumer/events"
    async with html_host() as host, httpx.AsyncClient(timeout=10.0) as c:
        await ok(c, "POST", f"{base}/v1/tenants", 201, json={"id": "consumer", "name": "C"})
        page = await portal_page(browser, c, base, host)
        frame = page.frame_locator("#portal")
        await expect(frame.locator("nav a")).to_have_text(["Endpoints", "Events", "Event types"])
        await frame.locator("#live-interval").select_option("2")
        await frame.locator("#live").check()
        endpoint = await consumer_adds_endpoint(frame, page, hooks.url("consumer"))

        # a test event: sent now, signed, not stored; its answer shown
        await frame.locator("summary >> text=Send a test event").click()
        await frame.locator("#test-event [name=payload]").fill('{"amount": 1.10}')
        await frame.locator("#test-event button[type=submit]").click()
        await expect(frame.locator("#test-result")).to_contain_text("delivered: 200")
        assert hooks.of("consumer")[-1].body == b'{"amount": 1.10}'
        assert "webhook-signature" in hooks.of("consumer")[-1].headers

        # what the application publishes: its delivery shown, then its event's page
        await ok(c, "POST", events, 202,
                 json={"event_type": "invoice.sent", "payload": {"n": 1}})  # fmt: skip
        delivered = frame.locator("#deliveries tbody tr[data-status=delivered]")
        await expect(delivered).to_have_count(1)
        await page.screenshot(path=shots / "43-portal-delivered.png", full_page=True)

        # the receiver breaks: the endpoint turns failing in the portal, reported once
        hooks.broken.add("consumer")
        await ok(c, "POST", events, 202,
                 json={"event_type": "invoice.sent", "payload": {"n": 2}})  # fmt: skip
        await expect(frame.locator("#endpoint-state [data-state]")).to_have_text("failing")
        waiting = frame.locator("#deliveries tbody tr[data-status=pending]")
        await expect(waiting).to_have_count(1)
        held = await waiting.get_attribute("data-delivery")
        await page.screenshot(path=shots / "44-portal-failing.png", full_page=True)
        failing = await settle_then_once(hooks, "endpoint.failing", endpoint)
        assert failing["tenant"] == "consumer" and failing["from"] == "active"

        # fixed: the waiting delivery succeeds and the endpoint is active again
        hooks.broken.discard("consumer")
        await expect(delivered).to_have_count(2)
        await expect(frame.locator("#endpoint-state [data-state]")).to_have_text("active")
        recovered = await settle_then_once(hooks, "endpoint.recovered", endpoint)
        assert recovered["trigger"] == "success"
        await once_in_every_region(c, ops_cluster, "endpoint.failing", endpoint)
        await once_in_every_region(c, ops_cluster, "endpoint.recovered", endpoint)

        # the event's page in the portal: its delivery delivered after the 503s
        await frame.locator("#live").uncheck()
        await frame.locator(f"#deliveries tr[data-delivery='{held}'] a").click()
        section = frame.locator("section.delivery")
        await expect(section).to_have_attribute("data-status", "delivered")
        await expect(section.locator(".attempt-status")).to_contain_text(["200", "503"])
        await expect(frame.locator("#payload")).to_have_text('{"n":2}')
        await page.screenshot(path=shots / "45-portal-recovered.png", full_page=True)
        # the events page: both events; no publish form (a portal session cannot publish)
        await frame.locator("nav >> text=Events").click()
        await expect(frame.locator("#events tbody tr")).to_have_count(2)
        await expect(frame.locator("#events tbody tr").first).to_contain_text("1/1 delivered")
        await expect(frame.locator("#publish")).to_have_count(0)
    assert page.errors == []  # type: ignore[attr-defined]
    await page.context.close()
    expect.set_options(timeout=TIMEOUT_MS)
