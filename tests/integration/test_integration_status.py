"""``regionsync status`` against the three real processes: one table across all regions,
each peer asked at the ``http_url`` of its ``[[peers]]`` entry (issue 15)."""

from __future__ import annotations

import asyncio
import json
import re
import sys

import httpx
import pytest
from cluster_support import REGIONS, converged, eventually

from regionsync.core.capabilities import ALL, RELEASE, announced
from regionsync.demo import Cluster

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def status(base: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "regionsync.cli", "--url", base, *args, "status",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


def table(out: str) -> dict[str, dict[str, str]]:
    """The status table by region, cells cut at the header's column starts (the
    ``features in use`` line under it left out)."""
    header, *lines = (x for x in out.splitlines() if not x.startswith("features in use"))
    names = header.split()
    starts = [header.index(n) for n in names] + [None]
    return {
        line.split()[0]: {
            n: line[a:b].strip() for n, a, b in zip(names, starts, starts[1:], strict=False)
        }
        for line in lines
    }


async def test_status_shows_every_region_from_any_node(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    resp = await client.post(f"{cluster.http[REGIONS[1]]}/v1/tenants", json={"name": "s"})
    assert resp.status_code == 201
    await eventually(lambda: converged(client, cluster.http))

    async def all_links_up() -> bool:
        cs = [(await client.get(f"{b}/v1/cluster")).json() for b in cluster.http.values()]
        return all(p["connected"] for c in cs for p in c["peers"])

    await eventually(all_links_up)
    for asked in REGIONS:
        code, out, err = await status(cluster.http[asked])
        assert code == 0, err
        rows = table(out)
        assert set(rows) == set(REGIONS), out
        assert rows[asked]["REACHED"] == rows[asked]["CONNECTED"] == "self"
        assert {r["REFUSED"] for r in rows.values()} == {"none"}, out  # issue 41
        # every region on this release: its version, the new features in use
        assert {r["VERSION"] for r in rows.values()} == {RELEASE}, out
        assert f"features in use: {', '.join(announced(ALL))}" in out.splitlines(), out
        hashes = {r["REGISTRY"] for r in rows.values()}
        assert len(hashes) == 1 and "-" not in hashes, out  # every region's own hash
        for region in set(REGIONS) - {asked}:
            assert rows[region]["REACHED"] == rows[region]["CONNECTED"] == "yes", out
            assert rows[region]["AGREES"] == "yes" and rows[region]["PEERS_UP"] == "2/2", out
            assert rows[region]["LAST_CONTACT"].endswith("s ago"), out

    code, out, _ = await status(cluster.http[REGIONS[0]], "--json")
    assert code == 0 and sorted(json.loads(out)["regions"]) == sorted(REGIONS)
    # the console's table: the same through the node, each peer asked at its http_url
    items = (await client.get(f"{cluster.http[REGIONS[0]]}/v1/cluster/regions")).json()["items"]
    assert [i["region"] for i in items] == list(REGIONS)
    assert all(i["reached"] and i["agrees"] and i["peers_connected"] == 2 for i in items)
    assert [i["http_url"] for i in items[1:]] == [cluster.http[r] for r in REGIONS[1:]]


async def test_status_marks_a_region_it_cannot_ask(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    victim = REGIONS[2]
    cluster.procs[victim].terminate()
    cluster.procs[victim].wait(timeout=10)
    code, out, err = await status(cluster.http[REGIONS[0]])
    assert code == 3 and f"could not ask {victim}" in err, err  # the table is still printed
    items = (await client.get(f"{cluster.http[REGIONS[0]]}/v1/cluster/regions")).json()["items"]
    lost = next(i for i in items if i["region"] == victim)
    assert not lost["reached"] and lost["error"].startswith("cannot reach"), lost
    row = table(out)[victim]
    assert row["REACHED"].startswith("no: cannot reach"), out
    assert row["REGISTRY"] == "-", out
    assert re.fullmatch(r"agreed \(digest at \d\d:\d\d:\d\dZ\)|not compared", row["AGREES"]), out
    assert len(row["REACHED"]) <= 44 and f"could not ask {victim}: cannot reach" in err, err
