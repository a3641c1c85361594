"""``process`` of ``GET /v1/cluster`` on a region of two processes on one PostgreSQL
database (issue 16): each one's actor, which one holds the replication role, and the
region's connected processes, over real HTTP on loopback; after the holder stops, the
other one takes the role and the view says so."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
from api_support import serving

from regionsync.adapters.http_api import create_app
from regionsync.demo import free_port

# the in-process node of a PostgreSQL region, as the cohort tests build it
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replication"))
from memnodes import eventually  # noqa: E402
from test_cohort import node  # noqa: E402


async def test_cluster_names_the_role_holder_among_the_processes(
    tmp_path: Path, pg_url: str
) -> None:
    grpc, nowhere = free_port(), free_port()  # the peer region is never up
    a = node(tmp_path, "pg", grpc, "lite", nowhere, pg_url, "host-a/11/aa")
    b = node(tmp_path, "pg", grpc, "lite", nowhere, pg_url, "host-b/22/bb")
    pa, pb = free_port(), free_port()
    await a.start()
    await b.start()
    running = [a, b]
    try:
        async with (
            serving(create_app(a), pa, lifespan="off"),
            serving(create_app(b), pb, lifespan="off"),
            httpx.AsyncClient() as c,
        ):
            procs = [
                {"holder": "host-a/11/aa", "replication_role": True},
                {"holder": "host-b/22/bb", "replication_role": False},
            ]
            ca = (await c.get(f"http://127.0.0.1:{pa}/v1/cluster")).json()
            cb = (await c.get(f"http://127.0.0.1:{pb}/v1/cluster")).json()
            assert ca["process"] == {"actor": a.writer.actor, "holder": "host-a/11/aa",
                                     "replication_role": True, "processes": procs}  # fmt: skip
            assert cb["process"] == {"actor": b.writer.actor, "holder": "host-b/22/bb",
                                     "replication_role": False, "processes": procs}  # fmt: skip
            assert ca["actor"] != cb["actor"]

            await a.stop()  # the holder leaves: b takes the role, a is no longer listed
            running.remove(a)
            await eventually(lambda: b.cohort is not None and b.cohort.leading)
            cb = (await c.get(f"http://127.0.0.1:{pb}/v1/cluster")).json()
            assert cb["process"]["replication_role"] is True
            assert cb["process"]["processes"] == [
                {"holder": "host-b/22/bb", "replication_role": True}
            ]
    finally:
        for n in running:
            await n.stop()
