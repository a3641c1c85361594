"""A mixed cluster (issue 16): one region on PostgreSQL with two processes, two regions
on SQLite, real processes replicating over gRPC on loopback. The three-region
integration tests' essentials hold: registry changes made in any region (and through
either PostgreSQL process) converge everywhere, events published in every region and
through both processes are delivered once each, every region (and both processes)
agree on the registry hash and the version vector, and attempts are readable in every
region."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from cluster_support import (
    RecordingReceiver,
    converged,
    eventually,
    expect,
    http_base,
    process_config,
    stop_processes,
)

from regionsync import demo

PG, SQ1, SQ2 = "pg-central", "sq-east", "sq-west"


async def test_mixed_cluster_converges_and_delivers(pg_url: str) -> None:
    root = Path(tempfile.mkdtemp(prefix="regionsync-mixed-"))
    configs = demo.write_configs(
        root, (PG, SQ1, SQ2), replication={"leader_poll_s": 0.2},
        retry_schedule_s=[0.2, 0.5, 1], timeout_s=2, claim_lease_s=3,
    )  # fmt: skip
    configs[PG].write_text(f'store = "{pg_url}"\n' + configs[PG].read_text())
    second, pg2 = process_config(configs[PG], root / f"{PG}-2.toml")
    http = {PG: http_base(configs[PG]), f"{PG}-2": pg2, SQ1: http_base(configs[SQ1]),
            SQ2: http_base(configs[SQ2])}  # fmt: skip
    receiver = RecordingReceiver()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        async with receiver.running(), httpx.AsyncClient(timeout=15.0) as client:
            for name, cfg in ((PG, configs[PG]), (f"{PG}-2", second), (SQ1, configs[SQ1]),
                              (SQ2, configs[SQ2])):  # fmt: skip
                procs.append(demo.spawn(root, name, cfg))
            for base in http.values():
                await demo.wait_ready(client, base, time.monotonic() + 30)

            # registry changes from a SQLite region and from the second PG process
            await expect(client, "POST", f"{http[SQ1]}/v1/tenants", 201,
                         json={"id": "mix", "name": "Mixed"})  # fmt: skip

            async def tenant_everywhere() -> bool:
                codes = [
                    (await client.get(f"{b}/v1/tenants/mix")).status_code for b in http.values()
                ]
                return codes == [200] * len(http)

            await eventually(tenant_everywhere)
            ep = await expect(client, "POST", f"{http[PG + '-2']}/v1/tenants/mix/endpoints", 201,
                              json={"url": receiver.url("mix")})  # fmt: skip
            receiver.secrets["mix"] = ep["secret"]

            async def endpoint_everywhere() -> bool:
                url = f"/v1/tenants/mix/endpoints/{ep['id']}"
                return all([(await client.get(b + url)).status_code == 200 for b in http.values()])

            await eventually(endpoint_everywhere)

            # events published in every region and through both PG processes
            published: dict[str, str] = {}
            for name, base in http.items():
                for i in range(20):
                    body = {"event_type": "mix.test", "payload": {"i": i}}
                    got = await expect(
                        client, "POST", f"{base}/v1/tenants/mix/events", 202, json=body
                    )
                    published[got["id"]] = name
                    assert got["region"] == name.removesuffix("-2")

            async def all_delivered() -> bool:
                return set(published) <= receiver.ids("mix")

            await eventually(all_delivered, timeout_s=60)
            assert receiver.failed == 0
            twice = {wid: published.get(wid) for (_, wid), n in receiver.seen.items() if n > 1}
            for wid in twice:  # a retry after a timed-out attempt is not a double claim
                event = await expect(client, "GET", f"{http[SQ1]}/v1/tenants/mix/events/{wid}", 200)
                (d,) = event["deliveries"]
                assert receiver.seen[("mix", wid)] <= d["attempts"], (twice, event)

            # convergence: one registry hash and one version vector in every region and
            # process (both PG processes hold every origin, the other's actor included)
            views = await eventually(lambda: converged(client, http), timeout_s=30)
            vv = views[PG]["version_vector"]
            assert sum(o.startswith(f"{PG}:") for o in vv) == 2  # one actor per process

            # every event and its attempts are readable in every region and process
            for eid in list(published)[::10]:
                for base in http.values():
                    event = await expect(client, "GET", f"{base}/v1/tenants/mix/events/{eid}", 200)
                    (d,) = event["deliveries"]

                    async def attempted(base: str = base, d: dict = d) -> bool:
                        page = await client.get(
                            f"{base}/v1/tenants/mix/deliveries/{d['id']}/attempts"
                        )
                        items = page.json()["items"] if page.status_code == 200 else []
                        return bool(items) and items[0]["status_code"] == 204  # newest first

                    await eventually(attempted, timeout_s=30)
    finally:
        stop_processes(procs, root)
