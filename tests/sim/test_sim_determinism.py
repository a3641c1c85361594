"""The same seed gives the same trace, in any process: a fixture of trace hashes and a
cross-process comparison.

``trace_hashes.json`` holds seeds 1..30 of every scenario. A change that alters behaviour
on purpose regenerates it (``make sim-hashes-write``) and says so in its commit; a
refactor must leave it alone and proves it with ``make sim-hashes`` (all 30 seeds of
every scenario, 15-25 minutes on two cores; sweeps of more seeds are ``sim explore``).
``make test`` checks seeds 1..3 of every scenario against the same fixture (about 2
minutes on two quiet cores; seeds 1..5 took 3 minutes, seeds 1..20 a third of the
suite's time).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).with_name("trace_hashes.json")


def _sim(*args: str, hash_seed: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run(
        [sys.executable, "-m", "sim", "hashes", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip


def test_trace_hashes_match_fixture() -> None:
    # the cross-process comparison: two worker processes (--jobs 2), each with its own
    # random string hashing (so set order and object ids differ), against hashes written
    # by another process earlier
    res = _sim("--seeds", "1..3", "--jobs", "2", "--check", str(FIXTURE), hash_seed="random")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert ", 0 changed" in res.stdout
