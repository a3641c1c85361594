"""The TypeScript SDK (clients/typescript) for the tests that run it under Node: built
once per test session with ``npm ci`` (the committed package-lock.json) and ``tsc``.
Node >= 20.3 and npm must be installed (``make test`` runs these tests; the CI machine has
both at /usr/bin); a missing one fails the test with what to install."""

from __future__ import annotations

import asyncio
import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["PACKAGE", "build", "node", "node_test", "run_node"]

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: the TypeScript SDK's tests need Node >= 20.3 and npm")
    return path


def node() -> str:
    """The path of the ``node`` executable (fails the test without one)."""
    return _tool("node")


@functools.cache
def build() -> Path:
    """``npm ci`` and ``npm run build`` in clients/typescript; returns the package dir."""
    node, npm = _tool("node"), _tool("npm")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    found = re.match(r"v(\d+)\.(\d+)", version.stdout)
    if found is None or (int(found[1]), int(found[2])) < (20, 3):
        pytest.fail(f"Node {version.stdout.strip()}: the TypeScript SDK needs Node >= 20.3")
    for cmd in ([npm, "ci", "--no-audit", "--no-fund"], [npm, "run", "--silent", "build"]):
        done = subprocess.run(cmd, cwd=PACKAGE, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    return PACKAGE


async def run_node(args: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str]:
    """``node args`` in the package dir with ``env`` added; (exit code, stdout+stderr)."""
    proc = await asyncio.create_subprocess_exec(
        node(), *args, cwd=build(), env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"node {' '.join(args)}: no exit within {timeout_s}s") from None
    return proc.returncode or 0, out.decode(errors="replace")


async def node_test(directory: str, env: dict[str, str], timeout_s: float = 300) -> dict[str, int]:
    """``node --test`` over the compiled ``dist/<directory>/*.test.js``; fails unless it
    exits 0 with no test failed, cancelled or skipped. Returns the runner's counts."""
    files = sorted(
        str(p.relative_to(build())) for p in (build() / "dist" / directory).glob("*.test.js")
    )
    assert files, f"no compiled tests in dist/{directory}"
    code, out = await run_node(["--test", "--test-reporter=tap", *files], env, timeout_s)
    counts = {k: int(v) for k, v in re.findall(r"^# (\w+) (\d+)$", out, re.M)}
    print(out[-4000:])
    assert code == 0, f"node --test exited {code}:\n{out[-8000:]}"
    assert counts.get("pass", 0) > 0 and counts.get("tests") == counts.get("pass"), counts
    return counts
