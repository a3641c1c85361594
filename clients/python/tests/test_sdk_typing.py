"""The derived methods are typed for a type checker (client.pyi): mypy --strict accepts
the package and a correct use, and finds a wrong response member type and a query value
outside the document's enum."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
USE = """\
from regionsync_client import AsyncClient, Client


def sync() -> str:
    c = Client(["http://a"], "t")
    page = c.list_events("acme", event_type="x.*", limit=10, status="dead")
    ev = c.publish("acme", "x", {"a": 1})
    n: int = c.get_tenant("acme")["name"]  # line 8: str
    c.list_events("acme", status="nope")  # line 9: not in the enum
    return ev["id"] + str(page["next"]) + str(n)


async def aio() -> str:
    async with AsyncClient("http://a") as c:
        ep = await c.create_endpoint("acme", url="https://x")
        return ep["id"]
"""


def test_mypy_reads_the_signatures(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    use = tmp_path / "use.py"
    use.write_text(USE)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
         str(tmp_path / "cache"), "regionsync_client", str(use)],
        cwd=HERE, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert [e.split(":")[1] for e in errors] == ["8", "9"], done.stdout
    assert all(e.startswith(str(use)) for e in errors), done.stdout
