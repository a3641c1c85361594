"""Fixtures of the console's browser tests: three real node processes on loopback
(``regionsync.demo.start_cluster``), a receiver whose endpoints can be made to answer
500, and headless Debian chromium driven by Playwright (``make system-deps`` installs it;
never ``playwright install``). Without /usr/bin/chromium the tests fail, never skip."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from console_support import SwitchableReceiver
from playwright.async_api import Browser, async_playwright

from regionsync.demo import Cluster, start_cluster

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
# screenshots of every page the tests open (git-ignored)
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def receiver() -> AsyncIterator[SwitchableReceiver]:
    rcv = SwitchableReceiver()
    async with rcv.running():
        yield rcv


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster() -> AsyncIterator[Cluster]:
    """us-east-1, eu-central-1, ap-southeast-1; fast retries so deliveries die in ~2 s and
    a failing endpoint is probed again soon."""
    async with start_cluster(
        retry_schedule_s=[0.2, 0.4, 0.6], probe_initial_s=0.2, probe_max_s=0.5
    ) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run `make system-deps` (apt-get install chromium)")
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture(scope="module")
def shots() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
