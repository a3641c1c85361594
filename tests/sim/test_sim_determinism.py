"""The same seed gives the same trace, in any process: a fixture of trace hashes and a
cross-process comparison.

``trace_hashes.json`` holds seeds 1..30 of every scenario. A change that alters behaviour
on purpose regenerates it (``make sim-hashes-write``) and says so in its commit; a
refactor must leave it alone and proves it with ``make sim-hashes`` (all 30 seeds of
every scenario, 15-25 minutes on two cores; sweeps of more seeds are ``sim explore``).
``make test`` checks seeds 1..5 of every scenario against the same fixture (about 4
minutes on two quiet cores: seeds 1..20 took a third of the suite's time).
"""

from __future__ import annotations

import json
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


def test_every_scenario_twice_in_separate_processes() -> None:
    # two processes at once with different string hashing: set order, ids of objects and
    # the machine's load differ between them, the traces may not
    env = dict(os.environ)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "sim", "hashes", "--seeds", "1..3"],
            cwd=ROOT,
            env={**env, "PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for seed in ("1", "4242")
    ]
    outs = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1]
    assert len(outs[0]) >= 8 and all(len(v) == 3 for v in outs[0].values())


def test_trace_hashes_match_fixture() -> None:
    res = _sim("--seeds", "1..5", "--jobs", "2", "--check", str(FIXTURE), hash_seed="random")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert ", 0 changed" in res.stdout
