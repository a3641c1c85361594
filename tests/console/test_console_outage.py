"""The console's cluster page during an outage (issue 43): it said in green that every
region's registry agreed, from a state digest taken before the region died. Now the
down region is red, its agreement is a past verdict with its age, and the summary says
what is known now. Its own cluster: this module kills a region."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, expect

from regionsync.demo import REGIONS, Cluster, start_cluster

pytestmark = pytest.mark.asyncio(loop_scope="module")

US, EU, AP = REGIONS
expect.set_options(timeout=20_000)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster() -> AsyncIterator[Cluster]:
    """Three regions that compare state digests every second."""
    async with start_cluster(replication={"digest_interval_s": 1.0}) as running:
        yield running


async def test_a_dead_region_is_red_and_its_agreement_is_dated(
    cluster: Cluster, browser: Browser, shots: Path
) -> None:
    base = cluster.http[US]
    page = await (await browser.new_context(viewport={"width": 1400, "height": 900})).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{base}/console")
    await page.click("#login button[type=submit]")  # the open loopback node: anonymous admin
    await expect(page.locator("#regions tbody tr")).to_have_count(3)
    # every region's own hash asked now: green
    await expect(page.locator("#agreement")).to_have_text(
        "every region's registry agrees with this region's"
    )
    await expect(page.locator("#agreement")).to_have_class("ok")
    # this node has compared digests with AP (they agree), then AP dies
    async with httpx.AsyncClient(timeout=5.0) as c:
        deadline = time.monotonic() + 30
        while True:
            peers = (await c.get(f"{base}/v1/cluster")).json()["peers"]
            if any(p["region"] == AP and p["state_agrees"] for p in peers):
                break
            assert time.monotonic() < deadline, "no digest compared with AP"
            time.sleep(0.1)  # noqa: ASYNC251 (a short poll of another process)
    victim = cluster.procs[AP]
    victim.kill()
    assert victim.wait(timeout=10) == -9
    row = page.locator(f"#regions tr[data-region='{AP}']")
    for _ in range(300):  # the link notices the reset at once; a few reloads at most
        await page.reload()
        await page.locator("#regions").wait_for()
        if await row.get_attribute("data-down") == "true":
            break
    else:
        pytest.fail(f"{AP} never shown down")
    await expect(row).to_have_class("bad")
    await expect(row.locator("td").nth(1)).to_have_text("NO")
    agrees = row.locator("[data-agrees]")
    await expect(agrees).to_have_text(re.compile(r"^agreed \(last digest, \d+ s ago\)$"))
    await expect(agrees).to_have_class("bad")
    summary = page.locator("#agreement")
    await expect(summary).to_have_class("bad")
    await expect(summary).to_contain_text(f"{AP} DOWN")
    await expect(summary).to_contain_text("unknown")
    assert "every region" not in (await summary.inner_text())
    # the living peer is still asked now: green
    await expect(page.locator(f"#regions tr[data-region='{EU}'] [data-agrees]")).to_have_text(
        "agrees"
    )
    await page.screenshot(path=shots / "13-cluster-outage.png", full_page=True)
    assert errors == []
