"""``/docs`` in headless chromium under the Content-Security-Policy of every HTML page
(issue 38, kind 7): Swagger UI starts and fetches the document with no policy violation
and no script error (tests/api/test_api_docs.py checks the headers themselves); and it
renders the OpenAPI 3.1 document's operations (issue 43: Swagger UI 4 showed "Unable to
render this definition")."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import uvicorn
from playwright.async_api import Browser, expect

from regionsync.adapters.http_api import create_app
from regionsync.adapters.wiring import build_node
from regionsync.config import load_settings
from regionsync.demo import free_port

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def base(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """One node (SQLite) serving its HTTP API on a free loopback port."""
    port = free_port()
    settings = load_settings(
        None, region="us-east-1", data_dir=Path(tmp_path_factory.mktemp("docs")),
        http_listen=f"127.0.0.1:{port}", grpc_listen="127.0.0.1:0", log_level="warning",
    )  # fmt: skip
    app = create_app(build_node(settings), manage_node=True)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 30
    while not server.started:
        assert not task.done() and time.monotonic() < deadline, "the node did not start"
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_docs_render_under_the_policy(browser: Browser, base: str) -> None:
    page = await browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    violations: list[str] = []
    await page.expose_function("violated", lambda text: violations.append(text))
    await page.add_init_script(
        "document.addEventListener('securitypolicyviolation',"
        " e => window.violated(e.violatedDirective + ' ' + e.blockedURI))"
    )
    await page.goto(f"{base}/docs", wait_until="load")
    # Swagger UI ran (its script and the initializer file) and fetched the document
    await expect(page.locator("#swagger-ui .swagger-ui").first).to_be_attached()
    await page.wait_for_load_state("networkidle")
    # the document rendered: its version badge and its operations, no error box
    await expect(page.locator(".opblock-summary").first).to_be_visible(timeout=20_000)
    assert await page.get_by_text("Unable to render this definition").count() == 0
    assert await page.locator(".version-stamp", has_text="OAS 3.1").count() == 1
    paths = await page.locator(".opblock-summary-path").all_inner_texts()
    assert "/v1/tenants/{tenant}/events" in {p.replace("\u200b", "") for p in paths}
    assert len(paths) >= 40, len(paths)
    assert violations == [] and problems == []
