"""The TypeScript SDK's own tests (clients/typescript/test) under Node: its unit tests,
then its integration tests against this module's three real regions (the operations
table against their /openapi.json, every operation, one id published in two regions)."""

from __future__ import annotations

import pytest
from cluster_support import RecordingReceiver
from ts_sdk import node_test

from regionsync.demo import REGIONS, Cluster

pytestmark = [pytest.mark.asyncio(loop_scope="module")]


async def test_typescript_sdk_unit_tests() -> None:
    counts = await node_test("test/unit", {})
    assert counts["pass"] >= 18


async def test_typescript_sdk_against_three_regions(
    cluster: Cluster, receiver: RecordingReceiver
) -> None:
    urls = ",".join(cluster.http[r] for r in REGIONS)
    counts = await node_test(
        "test/integration",
        {"REGIONSYNC_URLS": urls, "REGIONSYNC_HOOK_URL": receiver.url("ts-api")},
    )
    assert counts["pass"] >= 4
