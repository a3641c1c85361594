"""A token revoked in one region is refused by all three real processes within seconds
(issue 14): the revocation is a registry change, so the window is the replication lag.
Tokens are created and revoked with the ``regionsync token`` CLI."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import httpx
import pytest
from cluster_support import REGIONS, eventually

from regionsync.demo import Cluster

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def cli(base: str, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "regionsync.cli", "--url", base, "--json", "token", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_revoked_token_refused_in_every_region(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    made = json.loads(await cli(cluster.http[REGIONS[0]], "create", "--scope", "admin",
                                "--name", "integration"))  # fmt: skip
    secret, headers = made["token"], {"authorization": f"Bearer {made['token']}"}
    assert secret.startswith("rs_")

    async def status_everywhere() -> list[int]:
        return [
            (await client.get(f"{cluster.http[r]}/v1/cluster", headers=headers)).status_code
            for r in REGIONS
        ]

    async def accepted() -> bool:
        return await status_everywhere() == [200, 200, 200]

    await eventually(accepted, timeout_s=10)
    listed = await cli(cluster.http[REGIONS[2]], "list")
    assert made["id"] in listed and secret not in listed

    await cli(cluster.http[REGIONS[1]], "revoke", made["id"])
    revoked_at = time.monotonic()

    async def refused() -> bool:
        return await status_everywhere() == [401, 401, 401]

    await eventually(refused, timeout_s=5)
    assert time.monotonic() - revoked_at < 5


async def test_portal_session_works_in_every_region(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    """A portal session signed by one region (its key replicated in the registry) is
    accepted by all three processes, for its tenant only (issue 43). The first session
    waits for every region's Hello (capability ``portal-sessions``: 409 until then)."""
    us, eu, ap = (cluster.http[r] for r in REGIONS)
    resp = await client.post(f"{eu}/v1/tenants", json={"id": "portal-co", "name": "P"})
    assert resp.status_code == 201, resp.text

    async def session() -> dict | None:
        made = await client.post(f"{eu}/v1/tenants/portal-co/portal-sessions",
                                 json={"ttl_s": 300})  # fmt: skip
        if made.status_code == 409:  # a peer's Hello not heard yet
            return None
        assert made.status_code == 201, made.text
        return made.json()

    made = await eventually(session, timeout_s=20)
    headers = {"authorization": f"Bearer {made['token']}"}

    async def accepted() -> bool:
        codes = [
            (await client.get(f"{b}/v1/tenants/portal-co/endpoints", headers=headers)).status_code
            for b in (us, eu, ap)
        ]
        return codes == [200, 200, 200]

    await eventually(accepted, timeout_s=10)
    for b in (us, ap):
        other = await client.get(f"{b}/v1/cluster", headers=headers)
        assert other.status_code == 403, other.text
