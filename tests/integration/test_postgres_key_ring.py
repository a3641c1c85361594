"""``regionsync serve`` of a second process of a PostgreSQL region whose key ring is not
the region's (each process generated its own ``<data_dir>/<region>.key``; issue 38, kind
8): it exits 2 with one line naming ``[secrets] keys`` and never serves, while the first
process goes on serving."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx
from cluster_support import http_base, process_config, stop_processes

from regionsync import demo

PG = "pg-east"


async def test_a_process_with_another_ring_exits_with_one_line(pg_url: str) -> None:
    root = Path(tempfile.mkdtemp(prefix="regionsync-pg-ring-"))
    (config,) = demo.write_configs(root, (PG,)).values()
    config.write_text(f'store = "{pg_url}"\n' + config.read_text())
    other, other_base = process_config(config, root / "other.toml")
    # another host: its own data directory, so its own generated key
    other.write_text(other.read_text().replace(f'data_dir = "{root / PG}"',
                                               f'data_dir = "{root / "other"}"'))  # fmt: skip
    procs = [demo.spawn(root, PG, config)]
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            base = http_base(config)
            await demo.wait_ready(client, base, time.monotonic() + 30)
            refused = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "regionsync.cli", "serve", "--config", str(other),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                async with asyncio.timeout(30):  # it exits at once; 30 s: wide margin
                    _, stderr = await refused.communicate()
            finally:
                if refused.returncode is None:  # it runs: the refusal is missing
                    refused.kill()
                    await refused.wait()
            err = stderr.decode().strip().splitlines()
            assert refused.returncode == 2, (refused.returncode, err)
            assert len(err) == 1 and err[0].startswith("Error: secrets:"), err
            assert "[secrets] keys" in err[0]
            assert (await client.get(f"{base}/readyz")).status_code == 200
            try:
                await client.get(f"{other_base}/readyz")
                raise AssertionError("the refused process serves")
            except httpx.ConnectError:
                pass
    finally:
        stop_processes(procs, root)
