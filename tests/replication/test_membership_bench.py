"""A small run of bench/membership.py (issue 40): two regions added and removed and ten
restarts leave the Hello's version vector as it started (the full run is not part of
``make test``; its figure is in bench/README.md)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "membership.py"


async def test_regions_added_and_removed_leave_the_hello_as_it_started(capsys) -> None:  # noqa: ANN001
    spec = importlib.util.spec_from_file_location("bench_membership", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # the Hello's size beyond its entries is the features it announces (about 20 bytes a
    # feature name: 193 bytes with the release's 2026-12-04 set)
    assert await bench.run(regions=2, restarts=10, max_bytes=220)
    out = capsys.readouterr().out
    start = re.search(r"start: 2 entries, (\d+) bytes", out)
    assert start is not None and f"end: 2 entries, {start[1]} bytes" in out, out
    assert "r2: peak 3 entries" in out
