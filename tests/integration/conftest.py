"""Fixtures: three real node processes (us-east-1, eu-central-1, ap-southeast-1) on
loopback, and a recording receiver, shared by the tests of one module."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest_asyncio
from cluster_support import RecordingReceiver

from regionsync.demo import Cluster, start_cluster

RETRY_SCHEDULE_S = [0.2, 0.5, 1]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def receiver() -> AsyncIterator[RecordingReceiver]:
    rcv = RecordingReceiver()
    async with rcv.running():
        yield rcv


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster() -> AsyncIterator[Cluster]:
    """The three regions, peered with each other; stopped (and their files removed) after
    the module. A test may replace a process in ``cluster.procs`` (restart)."""
    async with start_cluster(retry_schedule_s=RETRY_SCHEDULE_S) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10.0) as c:
        yield c
