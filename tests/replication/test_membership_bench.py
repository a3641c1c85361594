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


async def test_postgres_process_starts_leave_the_hello_and_contexts_bounded(capsys) -> None:  # noqa: ANN001
    """Six process starts on one PostgreSQL database, every second leaving the tenant it
    created: the Hello ends with the live actors only, and the OR-Set contexts name one
    retired actor per tenant left (an element's dot is its identity), not one per start."""
    spec = importlib.util.spec_from_file_location("bench_membership", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert await bench.run_pg(restarts=6, max_bytes=220, settle_s=60, keep_every=2)
    out = capsys.readouterr().out
    assert "PASS: OR-Set contexts name 3 retired actors" in out, out
