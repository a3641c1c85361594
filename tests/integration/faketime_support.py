"""Real node processes with a skewed wall clock (libfaketime, Debian's ``faketime``).

A node runs under ``LD_PRELOAD=libfaketimeMT.so.1`` (the thread-safe variant: gRPC and
the SQLite committer read the clock from their own threads) with ``FAKETIME="+10m"`` or
``"-10m"``: a relative offset, so its wall clock (``time.time()``, ``datetime.now()``, the
HTTP ``Date`` header) runs at real speed but shifted. ``FAKETIME_DONT_FAKE_MONOTONIC=1``
keeps ``time.monotonic()`` real: asyncio's timers, heartbeats and gRPC's deadlines are
untouched, as on a machine whose NTP is wrong. ``clock_probe`` checks both in a child
process with the same environment. Peer links go through link_cut.Relay, so a test can
cut a region off (``SkewedCluster.isolate``) to make its writes concurrent with others'.

Without libfaketime the tests skip, naming the package, except in CI (``CI`` set), where
a missing test dependency fails (``make system-deps`` installs it)."""

from __future__ import annotations

import contextlib
import email.utils
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from link_cut import Relay

from regionsync import demo
from regionsync.demo import REGIONS, Cluster

__all__ = [
    "SkewedCluster",
    "clock_probe",
    "faketime_env",
    "http_clock_offset_s",
    "restart",
    "skewed_cluster",
    "spawn",
]

_LIBS = ("/usr/lib/*/faketime/libfaketimeMT.so.1", "/usr/lib/*/faketime/libfaketime.so.1")


def faketime_library() -> str:
    """The path of libfaketime; skips the test when it is missing (fails in CI)."""
    for pattern in _LIBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    reason = "libfaketime missing: apt-get install faketime (or make system-deps)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def faketime_env(offset: str | None) -> dict[str, str]:
    """Environment entries for a process whose wall clock is off by ``offset`` (``"+10m"``,
    ``"-10m"``; libfaketime's relative syntax); None: the real clock (no entries)."""
    if offset is None:
        return {}
    return {
        "LD_PRELOAD": faketime_library(),
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def clock_probe(env: Mapping[str, str]) -> tuple[float, float]:
    """(wall offset, monotonic offset) in seconds of a Python child run with ``env`` on top
    of this process's, against this process's clocks read around it (the child's start-up
    time is within the error, well under a second)."""
    code = "import json,time;print(json.dumps([time.time(),time.monotonic()]))"
    wall0, mono0 = time.time(), time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env},
        capture_output=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    wall1, mono1 = time.time(), time.monotonic()
    wall, mono = json.loads(out)
    return wall - (wall0 + wall1) / 2, mono - (mono0 + mono1) / 2


async def http_clock_offset_s(client: httpx.AsyncClient, base: str) -> float:
    """A node's wall clock minus ours, from its HTTP ``Date`` header (1 s resolution)."""
    before = time.time()
    resp = await client.get(f"{base}/healthz")
    after = time.time()
    their = email.utils.parsedate_to_datetime(resp.headers["date"]).timestamp()
    return their - (before + after) / 2


def spawn(root: Path, region: str, config: Path, offset: str | None) -> subprocess.Popen[bytes]:
    """``demo.spawn`` with the wall clock off by ``offset`` (see ``faketime_env``)."""
    with open(root / f"{region}.log", "ab") as logf:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, "-m", "regionsync.cli", "serve", "--config", str(config)],
            stdout=logf, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **faketime_env(offset)},
        )  # fmt: skip


@dataclass
class SkewedCluster(Cluster):
    """A Cluster whose peer links (``(from, to)``) each go through a link_cut.Relay."""

    links: dict[tuple[str, str], Relay] = field(default_factory=dict)

    def isolate(self, region: str, cut: bool = True) -> None:
        """Cut (``cut``) or heal every link from and to ``region``."""
        for (a, b), relay in self.links.items():
            if region in (a, b):
                relay.set_cut(cut)


def restart(cluster: Cluster, region: str, offset: str | None) -> None:
    """Stop ``region`` (SIGTERM, SIGKILL after 15 s) and start it again on the same config
    and data directory with the wall clock off by ``offset``."""
    proc = cluster.procs[region]
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    cluster.procs[region] = spawn(cluster.root, region, cluster.root / f"{region}.toml", offset)


@contextlib.asynccontextmanager
async def skewed_cluster(
    skew: Mapping[str, str],
    replication: dict[str, Any] | None = None,
    sections: dict[str, dict[str, Any]] | None = None,
    **delivery: Any,
) -> AsyncIterator[SkewedCluster]:
    """``demo.start_cluster`` of the three regions, ``skew`` (region -> offset) started
    under libfaketime, every peer link through a Relay (``SkewedCluster.isolate``);
    stopped after, the tail of each log printed (pytest shows it on failure)."""
    for offset in skew.values():
        faketime_env(offset)  # skip (or fail in CI) before starting anything
    root = Path(tempfile.mkdtemp(prefix="regionsync-skew-"))
    configs = demo.write_configs(root, REGIONS, replication, sections, **delivery)
    http = {r: f"http://{_listen(configs[r])}" for r in REGIONS}
    links = await _relay_links(configs)
    procs = {r: spawn(root, r, configs[r], skew.get(r)) for r in REGIONS}
    cluster = SkewedCluster(root, http, procs, links)
    try:
        async with httpx.AsyncClient(timeout=5.0) as client:
            deadline = time.monotonic() + 60
            for r in REGIONS:
                await demo.wait_ready(client, http[r], deadline)
        yield cluster
    finally:
        _stop(cluster)
        for relay in links.values():
            await relay.close()


async def _relay_links(configs: Mapping[str, Path]) -> dict[tuple[str, str], Relay]:
    """A started Relay per peer link; each config's peer address rewritten to it."""
    grpc = {r: re.search(r'grpc_listen = "127\.0\.0\.1:(\d+)"', p.read_text())[1]
            for r, p in configs.items()}  # fmt: skip
    links: dict[tuple[str, str], Relay] = {}
    for r, path in configs.items():
        text = path.read_text()
        for p in configs:
            if p != r:
                relay = links[(r, p)] = Relay(("127.0.0.1", int(grpc[p])))
                port = await relay.start()
                text = text.replace(f'address = "127.0.0.1:{grpc[p]}"',
                                    f'address = "127.0.0.1:{port}"')  # fmt: skip
        path.write_text(text)
    return links


def _stop(cluster: Cluster) -> None:
    """Stop the nodes, print the tail of each log (pytest shows it on failure), clean up."""
    demo.stop_nodes(cluster)
    for log in sorted(cluster.root.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        print(f"--- {log.name} (last 30 of {len(lines)} lines)", *lines[-30:], sep="\n")
    shutil.rmtree(cluster.root, ignore_errors=True)


def _listen(config: Path) -> str:
    line = next(x for x in config.read_text().splitlines() if x.startswith("http_listen"))
    return line.split('"')[1]
