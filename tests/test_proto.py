"""The committed generated gRPC code matches proto/ (regenerated into a temp dir)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ("replication_pb2.py", "replication_pb2.pyi", "replication_pb2_grpc.py")


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    subprocess.run(
        [
            sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'proto'}",
            f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}",
            f"--pyi_out={tmp_path}", str(ROOT / "proto/regionsync/v1/replication.proto"),
        ],
        check=True,
    )  # fmt: skip
    for name in GENERATED:
        fresh = (tmp_path / "regionsync/v1" / name).read_text()
        committed = (ROOT / "src/regionsync/v1" / name).read_text()
        assert fresh == committed, f"{name} is stale: run `make proto` and commit"
