"""Regression tests for bugs found in the integration harness."""

from __future__ import annotations

import gc
import warnings
from pathlib import Path

from regionsync import demo


def test_spawn_does_not_leak_the_log_file_handle(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # a missing config makes the child exit at once; only the parent's side matters
        proc = demo.spawn(tmp_path, "us-east-1", tmp_path / "missing.toml")
        try:
            assert proc.wait(timeout=60) != 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []
