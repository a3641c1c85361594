"""Done-when 1 of issue 40: three regions on the previous release (previous_release.txt,
built in a virtualenv of its own: old_release.py), real processes on loopback with SQLite
stores, get data (a tenant, an endpoint on a local receiver, events), then are upgraded
one at a time (stopped, the current code started on the same store and config) under
publish and registry load. Measured throughout: the longest replication stall (a
record of one region not reaching a running peer while both run, rolling_support.py)
must stay under one restart plus a margin. At the end every acknowledged event reached
the receiver (by webhook-id) and the registries agree (``/v1/cluster`` registry hash and
version vector). Then one region is rolled back to the previous release on the same
store and keeps replicating both ways (issue bullet 7).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from old_release import OldRelease, spawn
from rolling_support import Load, StallMeter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from cluster_support import (  # noqa: E402
    RecordingReceiver,
    all_delivered,
    converged,
    endpoint_everywhere,
    eventually,
    http_base,
    stop_processes,
)

from regionsync import demo  # noqa: E402

REGIONS = ("us-east-1", "eu-central-1", "ap-southeast-1")
TENANT = "t-up"
# a restart ends when the node answers /readyz; its links then redial within
# reconnect_max_s (0.5 s) plus gRPC's own backoff: what a stall may add to one restart
MARGIN_S = 10.0


class Regions:
    """The three node processes, each on either release, and the stall meter."""

    def __init__(self, root: Path, old: OldRelease, client: httpx.AsyncClient):
        self.root, self.old, self.client = root, old, client
        self.configs = demo.write_configs(
            root, REGIONS, replication={"reconnect_min_s": 0.05, "reconnect_max_s": 0.5},
            retry_schedule_s=[0.2, 0.5, 1], timeout_s=5,
        )  # fmt: skip
        self.http = {r: http_base(c) for r, c in self.configs.items()}
        self.procs: dict[str, object] = {}
        self.meter = StallMeter()
        self.restarts_s: list[float] = []

    async def start(self, region: str, release: OldRelease | None) -> None:
        self.procs[region] = spawn(self.root, region, self.configs[region], release)
        await demo.wait_ready(self.client, self.http[region], time.monotonic() + 60)
        self.meter.up(region, time.monotonic())

    async def restart(self, region: str, release: OldRelease | None, load: Load) -> None:
        """Stop ``region`` (SIGTERM, out of the load first), start ``release`` on its store."""
        began = time.monotonic()
        load.up.discard(region)
        self.meter.down(region)
        proc = self.procs[region]
        proc.terminate()  # type: ignore[attr-defined]
        assert proc.wait(timeout=30) in (0, -15), self.log_tail(region)  # type: ignore[attr-defined]
        await self.start(region, release)
        self.restarts_s.append(time.monotonic() - began)
        load.up.add(region)

    def log_tail(self, region: str) -> str:
        return (self.root / f"{region}.log").read_text(errors="replace")[-3000:]


async def set_up(rs: Regions, receiver: RecordingReceiver) -> str:
    """The tenant and its endpoint, seen by every region; returns the endpoint's name."""
    await endpoint_everywhere(rs.client, rs.http, REGIONS[0], TENANT, "up", receiver)
    return "up"


async def settle(rs: Regions, load: Load, receiver: RecordingReceiver) -> None:
    """Every acknowledged event delivered, every region converged, tenants everywhere."""
    await all_delivered(load.acked, receiver, "up")
    cs = await eventually(lambda: converged(rs.client, rs.http), timeout_s=60, interval=0.2)
    assert len({c["registry_hash"] for c in cs.values()}) == 1
    for base in rs.http.values():
        resp = await rs.client.get(f"{base}/v1/tenants", params={"limit": 1000})
        assert load.tenants <= {t["id"] for t in resp.json()["items"]}, base
    assert receiver.failed == 0


@pytest.mark.asyncio
async def test_three_regions_upgrade_one_at_a_time_and_one_rolls_back(
    old_release: OldRelease,
) -> None:
    root = Path(tempfile.mkdtemp(prefix="regionsync-upgrade-"))
    receiver = RecordingReceiver()
    async with receiver.running(), httpx.AsyncClient(timeout=10.0) as client:
        rs = Regions(root, old_release, client)
        try:
            for region in REGIONS:
                await rs.start(region, old_release)
            await set_up(rs, receiver)
            load = Load(client, rs.http, TENANT, up=set(REGIONS))
            tasks = [asyncio.create_task(load.run(0.02)),
                     asyncio.create_task(rs.meter.run(client, rs.http, 0.1))]  # fmt: skip
            try:
                await asyncio.sleep(2)  # old regions under load
                for region in REGIONS:
                    await rs.restart(region, None, load)
                    await asyncio.sleep(2)
                before = load.acked_by.get(REGIONS[0], 0)
                await rs.restart(REGIONS[0], old_release, load)  # roll back
                await asyncio.sleep(3)
                rolled_back_wrote = load.acked_by.get(REGIONS[0], 0) - before
            finally:
                for t in tasks:
                    t.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await t
            await settle(rs, load, receiver)
            # converged: the rolled-back region's own records (it took load after the
            # roll back) reached the others, and theirs reached it
            assert rolled_back_wrote > 0
            bound = max(rs.restarts_s) + MARGIN_S
            print(f"restarts {[round(s, 1) for s in rs.restarts_s]} s; worst stall "
                  f"{rs.meter.worst_s:.1f} s {rs.meter.worst_pair}; {len(load.acked)} events, "
                  f"{len(load.tenants)} tenants")  # fmt: skip
            # it measured every pair throughout, and saw records on their way
            assert rs.meter.samples > 100 and rs.meter.seen_waiting > 0
            assert rs.meter.worst_s <= bound, (rs.meter.worst_s, rs.meter.worst_pair, bound)
            assert not load.server_errors, load.server_errors
        finally:
            stop_processes(list(rs.procs.values()), root)  # type: ignore[arg-type]
