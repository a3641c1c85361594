"""Done-when 2 of issue 40: a PostgreSQL region of two ``regionsync serve`` processes on
the previous release (previous_release.txt, old_release.py), beside a SQLite region
that stays on it, is upgraded one process at a time under publish and registry load.

The first process of the current code applies the expand steps (postgres_schema.STEPS)
while the other, older one keeps serving on the same database; then the second is
upgraded; then one is rolled back to the previous release, which starts on the expanded
database and serves again. Throughout, a publish to a process that stays up never
answers 5xx, and no record of a process or of the peer waits to reach another running
one longer than the longest restart plus a margin (``StallMeter``); at the end every
acknowledged event reached the receiver, both regions agree, ``schema_version`` is still
the previous release's and each current process is recorded in ``processes`` with this
code's schema level.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from subprocess import Popen
from typing import Any

import httpx
import psycopg
import pytest
from old_release import OldRelease, spawn
from rolling_support import Load, StallMeter

from regionsync import demo
from regionsync.adapters.postgres_schema import LEVEL, MIGRATIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from cluster_support import (  # noqa: E402
    RecordingReceiver,
    all_delivered,
    converged,
    endpoint_everywhere,
    eventually,
    http_base,
    process_config,
    stop_processes,
)

PG, PEER = "pg-east", "sq-west"
TENANT = "t-pg-up"
# a restart ends when the process answers /readyz; the replication role then moves within
# leader_poll_s and links redial within reconnect_max_s (test_rolling_upgrade.MARGIN_S)
MARGIN_S = 10.0


class Region:
    """The SQLite peer and the two PostgreSQL processes (``p0``, ``p1``)."""

    def __init__(self, root: Path, pg_url: str, client: httpx.AsyncClient):
        self.root, self.client = root, client
        configs = demo.write_configs(
            root, (PG, PEER), replication={"leader_poll_s": 0.2, "reconnect_max_s": 0.5},
            retry_schedule_s=[0.2, 0.5, 1], timeout_s=2, claim_lease_s=4,
        )  # fmt: skip
        configs[PG].write_text(f'store = "{pg_url}"\n' + configs[PG].read_text())
        self.configs = {PEER: configs[PEER]}
        self.http = {PEER: http_base(configs[PEER])}
        for n in range(2):
            cfg, base = process_config(configs[PG], root / f"p{n}.toml")
            self.configs[f"p{n}"], self.http[f"p{n}"] = cfg, base
        self.procs: dict[str, Popen[Any]] = {}
        self.retired: list[Popen[Any]] = []
        self.meter = StallMeter()
        self.restarts_s: list[float] = []

    async def start(self, name: str, release: OldRelease | None) -> None:
        self.procs[name] = spawn(self.root, name, self.configs[name], release)
        await demo.wait_ready(self.client, self.http[name], time.monotonic() + 60)
        self.meter.up(name, time.monotonic())

    async def replace(self, name: str, release: OldRelease | None, load: Load) -> None:
        """Stop process ``name`` (out of the load first), start ``release`` in its place.

        The previous release is started while no registry change is made (publishes go
        on): a 0.1.0 process reads the registry before the version vector, so a change
        another process commits between the two reads is missing from its memory until
        its key is written again (README "Upgrading", the roll-back note). This code
        reads them the other way round and starts under the whole load."""
        began = time.monotonic()
        load.up.discard(name)
        self.meter.down(name)
        proc = self.procs[name]
        proc.terminate()
        assert proc.wait(timeout=30) in (0, -15)
        self.retired.append(proc)
        if release is None:
            await self.start(name, release)
        else:
            async with load.registry_gate:
                await self.start(name, release)
        self.restarts_s.append(time.monotonic() - began)
        load.up.add(name)


async def set_up(region: Region, receiver: RecordingReceiver) -> None:
    await endpoint_everywhere(region.client, region.http, "p0", TENANT, "pg", receiver)


async def recorded(pg_url: str) -> tuple[int, list[tuple[Any, ...]]]:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        version = await (await conn.execute("SELECT max(version) FROM schema_version")).fetchone()
        cur = await conn.execute("SELECT holder, level FROM processes ORDER BY started_at")
        return version[0], await cur.fetchall()


@pytest.mark.asyncio
async def test_a_postgres_region_upgrades_one_process_at_a_time(
    pg_url: str, old_release: OldRelease
) -> None:
    root = Path(tempfile.mkdtemp(prefix="regionsync-pg-upgrade-"))
    receiver = RecordingReceiver()
    async with receiver.running(), httpx.AsyncClient(timeout=10.0) as client:
        region = Region(root, pg_url, client)
        try:
            for name in (PEER, "p0", "p1"):
                await region.start(name, old_release)
            await set_up(region, receiver)
            load = Load(client, region.http, TENANT, up={"p0", "p1"})
            tasks = [asyncio.create_task(load.run(0.01)),
                     asyncio.create_task(region.meter.run(client, region.http, 0.1))]  # fmt: skip
            try:
                await asyncio.sleep(2)
                await region.replace("p1", None, load)  # applies the expand steps
                await asyncio.sleep(2)  # old p0 beside the expanded schema, new p1
                await region.replace("p0", None, load)
                await asyncio.sleep(2)
                await region.replace("p1", old_release, load)  # roll back one process
                await asyncio.sleep(2)
            finally:
                for t in tasks:
                    t.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await t
            print(f"{len(load.acked)} events, {len(load.tenants)} tenants acknowledged; "
                  f"{load.refused} requests to a stopping process; restarts "
                  f"{[round(s, 1) for s in region.restarts_s]} s; worst stall "
                  f"{region.meter.worst_s:.1f} s {region.meter.worst_pair}, "
                  f"{region.meter.seen_waiting} records seen in flight")  # fmt: skip
            assert not load.server_errors, load.server_errors
            # it measured every pair throughout, and saw records on their way
            assert region.meter.samples > 100 and region.meter.seen_waiting > 0
            bound = max(region.restarts_s) + MARGIN_S
            assert region.meter.worst_s <= bound, (region.meter.worst_s, region.meter.worst_pair)
            assert len(load.acked) > 50, len(load.acked)  # the load ran throughout
            await all_delivered(load.acked, receiver, "pg")
            assert receiver.failed == 0
            both = {r: region.http[r] for r in ("p0", "p1", PEER)}
            await eventually(lambda: converged(client, both), timeout_s=60, interval=0.2)
            version, processes = await recorded(pg_url)
            assert version == len(MIGRATIONS)  # what the previous release compares
            # the two processes of the current code recorded themselves; old ones cannot
            assert [level for _, level in processes] == [LEVEL, LEVEL], processes
        finally:
            stop_processes([*region.procs.values(), *region.retired], root)
