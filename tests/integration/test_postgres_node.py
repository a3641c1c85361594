"""A real ``regionsync serve`` process on the PostgreSQL store (issue 16), SIGKILLed while
publishes are in flight and restarted on the same database: every event it acknowledged
(202) is readable afterwards and reaches the receiver (duplicates allowed, losses not)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import httpx
import psycopg
from cluster_support import RecordingReceiver, eventually, expect

from regionsync import demo
from regionsync.adapters.secretbox import MAGIC

REGION = "pg-solo"
N = 300
KILL_AFTER = 100  # acknowledged publishes before the SIGKILL


async def test_sigkill_mid_publish_loses_no_acknowledged_event(pg_url: str) -> None:
    root = Path(tempfile.mkdtemp(prefix="regionsync-pg-node-"))
    config = demo.write_configs(
        root, (REGION,), retry_schedule_s=[0.2, 0.5, 1], timeout_s=2, claim_lease_s=3
    )[REGION]
    config.write_text(f'store = "{pg_url}"\n' + config.read_text())
    listen = next(x.split('"')[1] for x in config.read_text().splitlines() if "http_listen" in x)
    base = f"http://{listen}"
    receiver = RecordingReceiver()
    proc = demo.spawn(root, REGION, config)
    try:
        async with receiver.running(), httpx.AsyncClient(timeout=10.0) as client:
            await demo.wait_ready(client, base, time.monotonic() + 30)
            await expect(client, "POST", f"{base}/v1/tenants", 201, json={"id": "t", "name": "T"})
            ep = await expect(client, "POST", f"{base}/v1/tenants/t/endpoints", 201,
                              json={"url": receiver.url("pg")})  # fmt: skip
            receiver.secrets["pg"] = ep["secret"]

            acked: list[str] = []
            killed = asyncio.Event()

            async def publisher(k: int) -> None:
                for i in range(k, N, 16):
                    if killed.is_set():
                        return
                    try:
                        resp = await client.post(
                            f"{base}/v1/tenants/t/events",
                            json={"event_type": "pg.test", "payload": {"i": i}},
                        )
                    except httpx.TransportError:
                        return  # the process is gone: this one was never acknowledged
                    if resp.status_code == 202:
                        acked.append(resp.json()["id"])
                    if len(acked) >= KILL_AFTER and not killed.is_set():
                        killed.set()
                        proc.kill()

            await asyncio.gather(*(publisher(k) for k in range(16)))
            assert proc.wait(timeout=10) == -9
            assert len(acked) >= KILL_AFTER

            proc = demo.spawn(root, REGION, config)  # same database
            await demo.wait_ready(client, base, time.monotonic() + 30)
            for eid in acked:
                await expect(client, "GET", f"{base}/v1/tenants/t/events/{eid}", 200)

            async def all_delivered() -> bool:
                return set(acked) <= receiver.ids("pg")

            await eventually(all_delivered, timeout_s=60)
            assert receiver.failed == 0  # signed with the secret read back after the restart
            # the secret is sealed in the database (issue 14): no row holds its text
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM registry WHERE key LIKE '%%/secret' "
                    "AND position(%s::bytea IN state) = 0 AND substr(state, 1, 4) = %s",
                    (ep["secret"].encode(), MAGIC),
                )
                assert (await cur.fetchone()) == (1,)
                cur = await conn.execute(
                    "SELECT count(*) FROM log WHERE position(%s::bytea IN body) > 0",
                    (ep["secret"].encode(),),
                )
                assert (await cur.fetchone()) == (0,)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=15)
        shutil.rmtree(root, ignore_errors=True)
