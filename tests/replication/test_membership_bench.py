"""A small run of bench/membership.py (issue 40): two regions added and removed and ten
restarts leave the Hello's version vector as it started (the full run is not part of
``make test``; its figure is in bench/README.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "membership.py"


async def test_regions_added_and_removed_leave_the_hello_as_it_started(capsys) -> None:  # noqa: ANN001
    spec = importlib.util.spec_from_file_location("bench_membership", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert await bench.run(regions=2, restarts=10, max_bytes=160)
    out = capsys.readouterr().out
    assert (
        "start: 2 entries" in out and "end: 2 entries, 155 bytes" in out
    )  # 129 before the counter-retired-entries feature
    assert "r2: peak 3 entries" in out
