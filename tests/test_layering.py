"""The layers of docs/design.md#layers hold: import-linter contracts, and crdt stands alone."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe is not None, "import-linter is a dev dependency"
    out = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_crdt_imports_only_stdlib_and_msgpack() -> None:
    allowed = set(sys.stdlib_module_names) | {"msgpack", "crdt"}
    for path in (ROOT / "crdt").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


def test_no_function_over_80_lines_and_no_module_over_600() -> None:
    """docs/style.md, "Size": outside generated code (src/regionsync/v1) and tests."""
    too_long: list[str] = []
    for top in ("src", "crdt", "sim"):
        for path in (ROOT / top).rglob("*.py"):
            if "v1" in path.relative_to(ROOT).parts:
                continue
            text = path.read_text()
            name = path.relative_to(ROOT)
            if text.count("\n") > 600:
                too_long.append(f"{name}: {text.count(chr(10))} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                    if lines > 80:
                        too_long.append(f"{name}:{node.lineno} {node.name}: {lines} lines")
    assert not too_long, too_long
