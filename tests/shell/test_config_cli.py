"""Configuration (node.toml, environment overrides, validation) and the command line."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest
from click.testing import CliRunner

from regionsync.cli import main
from regionsync.config import load_settings


def test_defaults_work_for_one_node_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("REGIONSYNC_REGION", "REGIONSYNC_HTTP_LISTEN"):
        monkeypatch.delenv(var, raising=False)
    s = load_settings()
    assert s.http_listen.startswith("127.0.0.1:") and s.grpc_listen.startswith("127.0.0.1:")
    assert s.peers == [] and s.tls is None and s.ingest.max_payload_bytes == 256 * 1024


def test_toml_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        'region = "eu-central-1"\n[[peers]]\nregion = "us-east-1"\naddress = "h:7070"\n'
        '[delivery]\nallow_private_networks = ["127.0.0.0/8"]\n'
    )
    monkeypatch.setenv("REGIONSYNC_DELIVERY__TIMEOUT_S", "3")
    s = load_settings(path)
    assert s.region == "eu-central-1" and s.peers[0].address == "h:7070"
    assert s.delivery.timeout_s == 3 and s.delivery.allow_private_networks == ["127.0.0.0/8"]
    monkeypatch.setenv("REGIONSYNC_REGION", "ap-southeast-1")
    assert load_settings(path).region == "ap-southeast-1"


@pytest.mark.parametrize(
    "text",
    [
        'region = "Bad Region"\n',
        "[delivery]\ntimeout_s = 600\n",
        '[delivery]\nallow_private_networks = ["not-a-cidr"]\n',
        "unknown_setting = 1\n",
        '[[tokens]]\ntoken = "short"\nscope = "admin"\n',
        'store = "mysql://db/x"\n',
        "store_pool_max = 0\n",
    ],
)
def test_bad_settings_name_the_setting(tmp_path: Path, text: str) -> None:
    path = tmp_path / "node.toml"
    path.write_text(text)
    with pytest.raises(pydantic.ValidationError):
        load_settings(path)


def test_store_setting_chooses_the_store(tmp_path: Path) -> None:
    from regionsync.adapters.postgres_store import PostgresStore
    from regionsync.adapters.sqlite_store import SqliteStore
    from regionsync.adapters.wiring import build_store

    lite = build_store(load_settings(None, region="r1", data_dir=tmp_path))
    assert isinstance(lite, SqliteStore) and lite.path == tmp_path / "r1.db"
    path = tmp_path / "node.toml"
    path.write_text('store = "postgresql://u@db.internal:5432/r1"\nstore_pool_max = 4\n')
    pg = build_store(load_settings(path))
    assert isinstance(pg, PostgresStore) and pg.url == "postgresql://u@db.internal:5432/r1"
    assert pg._pool_max == 4


def test_cli_help_lists_commands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "serve" in result.output and "demo" in result.output


def test_serve_with_missing_or_bad_config_exits_cleanly(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["serve", "--config", str(tmp_path / "nope.toml")])
    assert result.exit_code == 1 and "not found" in result.output
    bad = tmp_path / "bad.toml"
    bad.write_text("region = [\n")
    result = CliRunner().invoke(main, ["serve", "--config", str(bad)])
    assert result.exit_code == 1 and "invalid configuration" in result.output
    bad.write_text("[delivery]\ntimeout_s = -1\n")
    result = CliRunner().invoke(main, ["serve", "--config", str(bad)])
    assert result.exit_code == 1 and "timeout_s" in result.output


def test_sim_command_runs_the_harness_in_a_child_process(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "regionsync.cli", "sim", "run",
         str(root / "sim/scenarios/partition-heal.toml"), "--seed", "1", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=root, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "seed" in out.stdout + out.stderr
    assert list(tmp_path.glob("*.html"))


def test_certs_command_writes_a_ca_and_region_certificates(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["certs", "--out", str(tmp_path), "--region", "us-east-1", "--region", "eu-1"]
    )
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ca.key", "ca.pem", "eu-1.key", "eu-1.pem", "us-east-1.key", "us-east-1.pem"]
    assert (tmp_path / "eu-1.key").stat().st_mode & 0o077 == 0
