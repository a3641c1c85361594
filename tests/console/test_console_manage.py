"""The console as an operator runs the platform from it, and the consumer portal in an
iframe (issue 43), in headless chromium against a real three-region loopback cluster:
create, edit and delete through forms whose errors are the API's problem bodies shown
next to their field; a confirmation before destructive actions; paged lists; search by
event and delivery id; payloads shown byte-exact; live refresh keeping form input; a
portal session's link embedded by the application's page (frame-ancestors) and scoped to
its tenant. Screenshots go to test-artifacts/console/."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from console_support import SwitchableReceiver, html_host
from playwright.async_api import Browser, Page, expect
from test_console_browser import TIMEOUT_MS, eventually, login, ok, script_errors

from regionsync.demo import REGIONS, Cluster

pytestmark = pytest.mark.asyncio(loop_scope="module")

US, EU, AP = REGIONS
expect.set_options(timeout=TIMEOUT_MS)
# a payload whose numbers a JSON round trip would change, and text that must stay text
RAW_PAYLOAD = (
    '{"amount": 1.10, "big": 12345678901234567890, "exp": 1E+2,\n'
    '  "note": "<img src=x onerror=alert(1)>", "nested": [0.0, -0, {"k": 2.50}]}'
)


async def fill_form(page: Page, form: str, values: dict[str, str]) -> None:
    for name, value in values.items():
        await page.fill(f"#{form} [name={name}]", value)
    await page.click(f"#{form} button[type=submit]")


async def confirm(page: Page, answer: str = "ok") -> None:
    await expect(page.locator("#confirm")).to_be_visible()
    await page.click(f"#confirm-{answer}")
    await expect(page.locator("#confirm")).to_have_count(0)


async def test_operator_creates_edits_and_deletes_through_forms(
    cluster: Cluster, receiver: SwitchableReceiver, browser: Browser, shots: Path
) -> None:
    base = cluster.http[US]
    page = await login(browser, base, "")  # the open loopback node: anonymous admin
    await page.click("nav >> text=Tenants")
    await page.click("summary >> text=New tenant")
    await fill_form(page, "new-tenant", {"id": "bad id!", "name": "Shop"})
    await expect(page.locator("#new-tenant [data-error-for=id]")).not_to_be_empty()
    await fill_form(page, "new-tenant", {"id": "shop", "name": "Shop"})
    await expect(page).to_have_url(f"{base}/console#/t/shop/settings")
    await fill_form(page, "edit-tenant", {"delivery_max_in_flight": "many"})
    err = page.locator("#edit-tenant [data-error-for=delivery_max_in_flight]")
    await expect(err).not_to_be_empty()

    # an endpoint through the form: a bad URL is refused by the API, next to the field
    await page.goto(f"{base}/console#/t/shop/endpoints")
    await page.click("summary >> text=New endpoint")
    await fill_form(page, "new-endpoint", {"url": "ftp://files.example/in"})
    url_error = page.locator("#new-endpoint [data-error-for=url]")
    await expect(url_error).not_to_be_empty()
    async with httpx.AsyncClient(timeout=30.0) as c:
        resp = await c.post(
            f"{base}/v1/tenants/shop/endpoints", json={"url": "ftp://files.example/in"}
        )
    assert resp.status_code == 422 and resp.json()["field"] == "url"
    await expect(url_error).to_have_text(resp.json()["detail"])  # the API's words
    await expect(page.locator("#new-endpoint [name=url]")).to_have_attribute("aria-invalid", "true")
    await page.screenshot(path=shots / "20-endpoint-form-error.png", full_page=True)
    await fill_form(page, "new-endpoint", {"url": receiver.url("shop-hook"),
                                           "event_types": "order.*",
                                           "headers": "X-Team: shop"})  # fmt: skip
    await expect(page.locator("#endpoint")).to_contain_text(receiver.url("shop-hook"))
    endpoint = page.url.rsplit("/", 1)[1]
    ep_path = f"{base}/v1/tenants/shop/endpoints/{endpoint}"
    async with httpx.AsyncClient(timeout=30.0) as c:
        made = await ok(c, "GET", ep_path, 200)
        assert made["event_types"] == ["order.*"] and made["headers"] == {"X-Team": "shop"}
        receiver.secrets["shop-hook"] = made["secret"]

        # edit: only what changed is sent; a bad rate is the API's problem at its field
        await page.click("summary >> text=Edit endpoint")
        await fill_form(page, "edit-endpoint", {"rate_limit_per_s": "fast"})
        await expect(
            page.locator("#edit-endpoint [data-error-for=rate_limit_per_s]")
        ).not_to_be_empty()
        await fill_form(page, "edit-endpoint", {"rate_limit_per_s": "",
                                                "description": "orders to the shop"})  # fmt: skip
        await expect(page.locator("#flash")).to_contain_text("endpoint saved")
        assert (await ok(c, "GET", ep_path, 200))["description"] == "orders to the shop"

        # rotate asks first: cancelled, nothing changes; confirmed, the secret changes
        await page.click("button.rotate")
        await expect(page.locator("#confirm")).to_contain_text("Rotate the secret")
        await page.screenshot(path=shots / "21-confirm-rotate.png")
        await confirm(page, "cancel")
        assert (await ok(c, "GET", ep_path, 200))["secret"] == made["secret"]
        await page.click("button.rotate")
        await confirm(page)
        await expect(page.locator("#flash")).to_contain_text("secret rotated")
        rotated = (await ok(c, "GET", ep_path, 200))["secret"]
        assert rotated != made["secret"]
        receiver.secrets["shop-hook"] = rotated

        # delete asks first too
        await page.click("button.delete")
        await confirm(page)
        await expect(page).to_have_url(f"{base}/console#/t/shop/endpoints")
        await ok(c, "GET", ep_path, 404)

    # event types, tokens and sources: created, refused with the API's words, removed
    await page.goto(f"{base}/console#/t/shop/event-types")
    await page.click("summary >> text=New event type")
    await fill_form(page, "new-event-type", {"name": "order.paid", "schema": "{not json"})
    await expect(page.locator("#new-event-type [data-error-for=schema]")).to_contain_text(
        "not JSON"
    )
    await fill_form(page, "new-event-type", {"schema": '{"type": "object"}'})
    await expect(page.locator("#event-types [data-event-type='order.paid']")).to_have_count(1)
    await page.click("#event-types >> text=order.paid")
    await fill_form(page, "edit-event-type", {"description": "an order was paid"})
    await expect(page.locator("#flash")).to_contain_text("event type saved")
    await expect(page.locator("#edit-event-type [name=description]")).to_have_value(
        "an order was paid"
    )
    await page.click("button.delete")
    await confirm(page)
    await expect(page).to_have_url(f"{base}/console#/t/shop/event-types")
    await expect(page.locator("#event-types tbody tr")).to_have_count(0)
    await page.goto(f"{base}/console#/tokens")
    await page.click("summary >> text=New token")
    await fill_form(page, "new-token-form", {"scope": "tenant:nope:read", "name": "ci"})
    await expect(page.locator("#new-token-form [data-error-for=scope]")).to_contain_text("nope")
    await fill_form(page, "new-token-form", {"scope": "tenant:shop:read"})
    await expect(page.locator("#new-token pre")).to_contain_text("rs_")
    row = page.locator("#tokens tbody tr", has_text="tenant:shop:read")
    await row.locator("button.revoke").click()
    await confirm(page)
    await expect(row).to_have_count(0)
    await page.goto(f"{base}/console#/sources")
    await page.click("summary >> text=New source")
    await fill_form(page, "new-source", {"tenant": "nope", "secret": "s3cret"})
    await expect(page.locator("#new-source [data-error-for=tenant]")).not_to_be_empty()
    await fill_form(page, "new-source", {"tenant": "shop"})
    src = page.locator("#sources tbody tr", has_text="shop")
    await expect(src).to_have_count(1)
    await src.locator("button.delete").click()
    await confirm(page)
    await expect(src).to_have_count(0)
    await page.screenshot(path=shots / "22-sources.png", full_page=True)

    # the tenant: a portal link made, every session ended, renamed, deleted after confirming
    await page.goto(f"{base}/console#/t/shop/settings")
    await fill_form(page, "new-portal", {"ttl_s": "600"})
    link = await page.locator("#portal-url").text_content()
    assert link is not None and "/portal?frame=" in link and "#key=rsp_" in link
    session = {"authorization": "Bearer " + link.split("#key=")[1]}
    async with httpx.AsyncClient(timeout=30.0) as c:
        await ok(c, "GET", f"{base}/v1/tenants/shop/endpoints", 200, headers=session)
        await page.click("button.expire-portal")
        await confirm(page)
        await expect(page.locator("#flash")).to_contain_text("portal sessions ended")
        await ok(c, "GET", f"{base}/v1/tenants/shop/endpoints", 401, headers=session)
    await fill_form(page, "edit-tenant", {"delivery_max_in_flight": "", "name": "Shop Ltd"})
    await expect(page.locator("#flash")).to_contain_text("tenant saved")
    await expect(page.locator("#edit-tenant [name=name]")).to_have_value("Shop Ltd")
    await page.click("button.delete")
    await confirm(page)
    await expect(page).to_have_url(f"{base}/console#/tenants")
    await expect(page.locator("#tenants [data-tenant=shop]")).to_have_count(0)
    assert script_errors(page) == []


async def test_paging_search_payload_and_live_refresh(
    cluster: Cluster, receiver: SwitchableReceiver, browser: Browser, shots: Path
) -> None:
    base = cluster.http[US]
    async with httpx.AsyncClient(timeout=30.0) as c:
        await ok(c, "POST", f"{base}/v1/tenants", 201, json={"id": "pager", "name": "Pager"})
        for i in range(30):
            await ok(c, "POST", f"{base}/v1/tenants/pager/endpoints", 201,
                     json={"url": f"http://127.0.0.1:9/h{i}", "paused": True})  # fmt: skip
        hook = await ok(c, "POST", f"{base}/v1/tenants/pager/endpoints", 201,
                        json={"url": receiver.url("pager-hook")})  # fmt: skip
        receiver.secrets["pager-hook"] = hook["secret"]
        ev = await ok(c, "POST", f"{base}/v1/tenants/pager/events", 202, content=(
            '{"event_type": "order.paid", "payload": ' + RAW_PAYLOAD + "}").encode(),
            headers={"content-type": "application/json"})  # fmt: skip
        hook_path = f"{base}/v1/tenants/pager/endpoints/{hook['id']}"

        async def delivered() -> dict | None:
            items = (await ok(c, "GET", f"{hook_path}/deliveries", 200))["items"]
            return items[0] if items and items[0]["status"] == "delivered" else None

        delivery = await eventually(delivered)

    page = await login(browser, base, "")
    await page.goto(f"{base}/console#/t/pager/endpoints")
    await expect(page.locator("#endpoints tbody tr")).to_have_count(25)
    await expect(page.locator("#endpoints-more")).to_be_visible()
    await page.click("#endpoints-more")
    await expect(page.locator("#endpoints tbody tr")).to_have_count(31)
    await expect(page.locator("#endpoints-more")).to_be_hidden()

    # search by delivery id, then by event id: the event page shows the payload as sent
    await page.fill("#search-q", delivery["id"])
    await page.click("#search button[type=submit]")
    await expect(page.locator("#found-delivery")).to_contain_text(ev["id"])
    await page.fill("#search-q", "dlv_00000000000000000000000000")
    await page.click("#search button[type=submit]")
    await expect(page.locator("#search-miss")).to_contain_text("no delivery")
    await page.fill("#search-q", ev["id"])
    await page.click("#search button[type=submit]")
    await expect(page).to_have_url(f"{base}/console#/t/pager/events/{ev['id']}")
    shown = await page.locator("#payload").text_content()
    assert shown == RAW_PAYLOAD  # 1.10, 1E+2, -0, the big integer: as written
    assert json.loads(shown) == json.loads(RAW_PAYLOAD)
    assert await page.locator("#payload img").count() == 0  # text, never markup
    # the scanner that cuts the payload's text out of the event body, on harder texts
    for payload in ('"a\\"}b"', "1.10", "-0.5e+3", "true", "null", '[1,{"a":"]"}]',
                    '{"a":"\\\\"}', '{"k": [ {"x": "}"} ], "n": 1.0}'):  # fmt: skip
        for rest in ("}", ',"id":"evt_1","deliveries":[]}'):
            body = '{"payload":' + payload + rest
            assert await page.evaluate("payloadText", body) == payload, body
    await page.screenshot(path=shots / "23-payload.png", full_page=True)

    # live refresh of the event page: a retry's attempt appears; an attempt closed by the
    # operator stays closed, the new newest opens
    attempts = page.locator(f"section[data-delivery='{delivery['id']}'] details[data-attempt]")
    await expect(attempts).to_have_count(1)
    await attempts.first.locator("summary").click()
    await expect(attempts.first).not_to_have_attribute("open", "")
    await page.select_option("#live-interval", "2")
    await page.check("#live")
    async with httpx.AsyncClient(timeout=30.0) as c:
        await ok(c, "POST", f"{base}/v1/tenants/pager/deliveries/{delivery['id']}/retry", 202)
    await expect(attempts).to_have_count(2)
    await expect(attempts.and_(page.locator("[data-attempt='1/0']"))).not_to_have_attribute(
        "open", ""
    )  # attempt 1 of the first generation
    await expect(attempts.and_(page.locator("[data-attempt='1/1']"))).to_have_attribute("open", "")
    await page.uncheck("#live")

    # live refresh: a new delivery appears while a half-typed edit stays as typed
    await page.goto(f"{base}/console#/t/pager/endpoints/{hook['id']}")
    await expect(page.locator("#deliveries tbody tr[data-status]")).to_have_count(1)
    await page.click("summary >> text=Edit endpoint")
    await page.fill("#edit-endpoint [name=description]", "half-typed")
    await page.select_option("#live-interval", "2")
    await page.check("#live")
    async with httpx.AsyncClient(timeout=30.0) as c:
        await ok(c, "POST", f"{base}/v1/tenants/pager/events", 202,
                 json={"event_type": "order.paid", "payload": {"n": 2}})  # fmt: skip
    await expect(page.locator("#deliveries tbody tr[data-status]")).to_have_count(2)
    await expect(page.locator("#live-at")).to_contain_text("updated")
    await expect(page.locator("#edit-endpoint [name=description]")).to_have_value("half-typed")
    await page.uncheck("#live")
    assert script_errors(page) == []


async def test_consumer_portal_in_an_iframe(
    cluster: Cluster, receiver: SwitchableReceiver, browser: Browser, shots: Path
) -> None:
    """The tenant's application creates a portal session and embeds its link; the
    consumer adds an endpoint, sees and rotates its secret, retries a delivery, and
    cannot reach another tenant or the operator's pages. A link without allowed origins
    cannot be framed."""
    base = cluster.http[EU]
    async with httpx.AsyncClient(timeout=30.0) as c:
        for t in ("consumer", "neighbour"):
            await ok(c, "POST", f"{base}/v1/tenants", 201, json={"id": t, "name": t})
        hook = await ok(c, "POST", f"{base}/v1/tenants/consumer/endpoints", 201,
                        json={"url": receiver.url("consumer-hook")})  # fmt: skip
        receiver.secrets["consumer-hook"] = hook["secret"]
        await ok(c, "POST", f"{base}/v1/tenants/consumer/events", 202,
                 json={"event_type": "invoice.sent", "payload": {"total": 9.90}})  # fmt: skip
    html = (
        '<!doctype html><title>app</title><iframe id="portal" src="{src}" width="1300" '
        'height="1400"></iframe>'
    )
    context = await browser.new_context(viewport={"width": 1400, "height": 1500})
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    async with html_host() as host, httpx.AsyncClient(timeout=30.0) as c:

        async def session(**body: object) -> dict:
            async def made() -> dict | None:
                resp = await c.post(f"{base}/v1/tenants/consumer/portal-sessions", json=body)
                if resp.status_code == 409:  # a peer's Hello not heard yet
                    return None
                assert resp.status_code == 201, resp.text
                return resp.json()

            return await eventually(made)

        # a link without allowed origins is not framed (frame-ancestors 'none')
        host["html"] = html.format(src=(await session(ttl_s=300))["url"])
        await page.goto(host["origin"])

        async def refused() -> bool:
            return len(page.frames) > 1 and page.frames[1].url.startswith("chrome-error:")

        await eventually(refused, timeout_s=10)

        # with the application's origin allowed, the portal works inside its page
        made = await session(ttl_s=600, allowed_origins=[host["origin"]])
        host["html"] = html.format(src=made["url"])
        await page.goto(host["origin"])
        frame = page.frame_locator("#portal")
        await expect(frame.locator("#endpoints tbody tr")).to_have_count(1)
        await expect(frame.locator("nav a")).to_have_text(["Endpoints", "Events", "Event types"])
        child = page.frames[1]
        assert "key=" not in child.url  # the session left the URL once read
        content = await child.content()
        assert "neighbour" not in content
        await page.screenshot(path=shots / "30-portal-iframe.png", full_page=True)

        # add an endpoint: the API's refusal at the field, then created
        await frame.locator("summary >> text=New endpoint").click()
        await frame.locator("#new-endpoint [name=url]").fill("not a url")
        await frame.locator("#new-endpoint button[type=submit]").click()
        await expect(frame.locator("#new-endpoint [data-error-for=url]")).not_to_be_empty()
        await frame.locator("#new-endpoint [name=url]").fill(receiver.url("consumer-second"))
        await frame.locator("#new-endpoint button[type=submit]").click()
        await expect(frame.locator("#endpoint")).to_contain_text("consumer-second")

        # its own secret, in full, and rotated after confirming
        await frame.locator("#reveal-secret").click()
        second = child.url.rsplit("/", 1)[1]
        ep = await ok(c, "GET", f"{base}/v1/tenants/consumer/endpoints/{second}", 200)
        await expect(frame.locator("#secret code")).to_have_text(ep["secret"])
        await frame.locator("button.rotate").click()
        await expect(frame.locator("#confirm")).to_be_visible()
        await frame.locator("#confirm-ok").click()
        await expect(frame.locator("#flash")).to_contain_text("secret rotated")

        # send a test event: signed, delivered now, its answer shown
        receiver.secrets["consumer-second"] = (
            await ok(c, "GET", f"{base}/v1/tenants/consumer/endpoints/{second}", 200)
        )["secret"]
        await frame.locator("summary >> text=Send a test event").click()
        await frame.locator("#test-event [name=payload]").fill('{"amount": 1.10}')
        await frame.locator("#test-event button[type=submit]").click()
        await expect(frame.locator("#test-result")).to_contain_text("delivered: 204")
        assert any(name == "consumer-second" for (name, _) in receiver.seen)

        # retry a delivery of the first endpoint
        await child.evaluate(f"location.hash = '#/t/consumer/endpoints/{hook['id']}'")
        await expect(frame.locator("#deliveries tbody tr[data-status]")).to_have_count(1)
        before = sum(n for (name, _), n in receiver.seen.items() if name == "consumer-hook")
        await frame.locator("#deliveries button.retry").click()
        await expect(frame.locator("#flash")).to_contain_text("Retry of dlv_")

        async def sent_again() -> bool:
            return sum(n for (name, _), n in receiver.seen.items()
                       if name == "consumer-hook") > before  # fmt: skip

        await eventually(sent_again)
        await page.screenshot(path=shots / "31-portal-endpoint.png", full_page=True)

        # another tenant, the operator's pages: refused by the API
        await child.evaluate("location.hash = '#/t/neighbour/endpoints'")
        await expect(frame.locator("#error")).to_contain_text("404")
        await child.evaluate("location.hash = '#/tokens'")
        await expect(frame.locator("#error")).to_contain_text("403")
    assert errors == []
    await context.close()
