"""Fixtures: an in-memory network, and nodes stopped after each test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.runtime.node import Node


@pytest.fixture
async def net() -> AsyncIterator[MemoryNetwork]:
    network = MemoryNetwork()
    yield network
    for t in list(network.tasks):
        t.cancel()
    await asyncio.gather(*network.tasks, return_exceptions=True)


@pytest.fixture
async def started() -> AsyncIterator[list[Node]]:
    nodes: list[Node] = []
    yield nodes
    for n in nodes:
        if n.started:
            await n.stop()
