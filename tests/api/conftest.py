"""Fixtures: one real node in-process (see api_support.py), a tenant, a receiver.

127.0.0.1/32 is exempt from the SSRF guard so a loopback receiver can be an endpoint;
every other private address stays refused. Retries are fast (0.1 s) for the delivery
tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from api_support import Api, RecordingReceiver, running_node


@pytest_asyncio.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    """A fresh node for us-east-1 (SQLite in tmp_path) on a free loopback port."""
    async with running_node(tmp_path) as running:
        yield running


@pytest_asyncio.fixture
async def tenant(api: Api) -> str:
    """Tenant ``acme`` on the node."""
    resp = await api.client.post("/v1/tenants", json={"id": "acme", "name": "Acme Corp"})
    assert resp.status_code == 201, resp.text
    return "acme"


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[RecordingReceiver]:
    """A signature-verifying loopback receiver that records every request."""
    rcv = RecordingReceiver()
    async with rcv.running():
        yield rcv
