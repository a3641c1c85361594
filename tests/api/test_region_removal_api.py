"""``POST /v1/cluster/regions/{name}/removal`` and ``regionsync regions remove NAME``:
problem bodies for bad input, the removal in ``/v1/cluster``, custody adopted for good."""

from __future__ import annotations

import json
from pathlib import Path

from api_support import running_node
from test_cli_manage import cli, ok

from regionsync.core.capabilities import ALL, RELEASE, announced


async def test_remove_region_over_api_and_cli(tmp_path: Path) -> None:
    peers = [{"region": "eu-west-1", "address": "127.0.0.1:9"},
             {"region": "ap-south-1", "address": "127.0.0.1:9"}]  # fmt: skip
    async with running_node(tmp_path, peers=peers) as api:
        c = api.client
        for name, status, field in [
            ("nope-1", 404, "name"),  # unknown
            ("us-east-1", 409, "name"),  # this node's own region
            ("Bad_Name", 400, "name"),
        ]:
            resp = await c.post(f"/v1/cluster/regions/{name}/removal")
            assert resp.status_code == status, resp.text
            assert resp.json()["detail"]
            assert resp.json()["field"] == field
        resp = await c.post("/v1/cluster/regions/eu-west-1/removal", json={"x": 1})
        assert resp.status_code == 422 and resp.json()["field"] == "x"  # no body allowed

        # ap-south-1 was never heard: its release may not read removal records
        resp = await c.post("/v1/cluster/regions/eu-west-1/removal")
        assert resp.status_code == 409 and resp.json()["error"] == "capability_missing"
        api.node.capabilities.announce("ap-south-1", RELEASE, announced(ALL), 0)  # its Hello
        resp = await c.post("/v1/cluster/regions/eu-west-1/removal")
        assert resp.status_code == 201, resp.text
        body = resp.json()
        assert body["region"] == "eu-west-1" and body["by"] == "us-east-1"
        again = await c.post("/v1/cluster/regions/eu-west-1/removal")
        assert again.status_code == 409 and "already removed" in again.json()["detail"]

        cluster = (await c.get("/v1/cluster")).json()
        assert list(cluster["removals"]["removed"]) == ["eu-west-1"]
        assert cluster["custody"]["records"]["eu-west-1"]["live"] == ["ap-south-1", "us-east-1"]

        out = ok(await cli(api, "regions", "remove", "ap-south-1"))
        assert out.strip().startswith("removed ap-south-1")
        res = await cli(api, "regions", "remove", "ap-south-1")
        assert res.exit_code == 1 and "already removed" in res.output
        res = await cli(api, "--json", "regions", "remove", "nope-2")
        assert res.exit_code == 1
        cluster = (await c.get("/v1/cluster")).json()
        assert sorted(cluster["removals"]["removed"]) == ["ap-south-1", "eu-west-1"]
        assert json.dumps(cluster)  # serializable
