"""Configuration (node.toml, environment overrides, validation) and the command line."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest
from click.testing import CliRunner

from regionsync.cli import main
from regionsync.config import describe_errors, load_settings


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
    assert result.exit_code == 1 and "invalid configuration: bad.toml: " in result.output
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
    bad = subprocess.run(
        [sys.executable, "-m", "regionsync.cli", "sim", "run", "--bogus"],
        capture_output=True, text=True, cwd=root, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "Try 'regionsync sim run --help'" in bad.stderr  # QA 12-02


def test_certs_command_writes_a_ca_and_region_certificates(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["certs", "--out", str(tmp_path), "--region", "us-east-1", "--region", "eu-1"]
    )
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ca.key", "ca.pem", "eu-1.key", "eu-1.pem", "us-east-1.key", "us-east-1.pem"]
    assert (tmp_path / "eu-1.key").stat().st_mode & 0o077 == 0


def _certs(*args: str) -> object:
    return CliRunner().invoke(main, ["certs", *args])


def test_certs_reuses_an_existing_ca_when_a_region_is_added(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    first = _certs("--out", str(tmp_path), "--region", "us-east-1", "--name", "peer.example.com")
    assert first.exit_code == 0, first.output
    ca_key, ca_pem = (tmp_path / "ca.key").read_bytes(), (tmp_path / "ca.pem").read_bytes()
    added = _certs("--out", str(tmp_path), "--region", "ap-southeast-1")
    assert added.exit_code == 0, added.output
    assert "existing CA" in added.output and "ca.key" not in added.output.split("\n", 1)[1]
    assert (tmp_path / "ca.key").read_bytes() == ca_key
    assert (tmp_path / "ca.pem").read_bytes() == ca_pem
    ca = x509.load_pem_x509_certificate(ca_pem)
    for region in ("us-east-1", "ap-southeast-1"):  # both chain to the one CA
        cert = x509.load_pem_x509_certificate((tmp_path / f"{region}.pem").read_bytes())
        cert.verify_directly_issued_by(ca)
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)
    forced = _certs("--out", str(tmp_path), "--region", "eu-1", "--force")
    assert forced.exit_code == 0 and (tmp_path / "ca.key").read_bytes() != ca_key


def test_certs_refuses_a_half_or_foreign_ca(tmp_path: Path) -> None:
    assert _certs("--out", str(tmp_path / "a"), "--region", "r1").exit_code == 0
    assert _certs("--out", str(tmp_path / "b"), "--region", "r1").exit_code == 0
    (tmp_path / "a" / "ca.key").write_bytes((tmp_path / "b" / "ca.key").read_bytes())
    res = _certs("--out", str(tmp_path / "a"), "--region", "r2")
    assert res.exit_code == 2 and "ca.key is not the key of ca.pem" in res.output, res.output
    (tmp_path / "b" / "ca.key").unlink()
    res = _certs("--out", str(tmp_path / "b"), "--region", "r2")
    assert res.exit_code == 2 and "only one of ca.pem and ca.key" in res.output, res.output
    (tmp_path / "a" / "ca.key").write_text("junk")
    res = _certs("--out", str(tmp_path / "a"), "--region", "r2")
    assert res.exit_code == 2 and "cannot be read" in res.output, res.output
    assert not (tmp_path / "a" / "r2.pem").exists() and not (tmp_path / "b" / "r2.pem").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--region", "../escaped"), "--region '../escaped'"),
        (("--region", "BAD REGION"), "--region 'BAD REGION'"),
        (("--region", "a/b"), "--region 'a/b'"),
        (("--region", "ok", "--name", "bad name!!"), "--name 'bad name!!'"),
        (("--region", "ok", "--name", "-x.example"), "--name '-x.example'"),
        (("--region", "ok", "--name", "a" * 64 + ".example"), "not a DNS name"),
    ],
)
def test_certs_refuses_bad_regions_and_names(tmp_path: Path, args: tuple, needle: str) -> None:
    res = _certs("--out", str(tmp_path / "ct" / "out"), *args)
    assert res.exit_code == 2 and needle in res.output, res.output
    assert "Traceback" not in res.output and not (tmp_path / "ct").exists()
    assert list(tmp_path.rglob("*.pem")) == []


def test_certs_accepts_ip_and_wildcard_names(tmp_path: Path) -> None:
    res = _certs("--out", str(tmp_path), "--region", "r1", "--name", "10.0.0.1", "--name",
                 "*.internal.example", "--name", "::1")  # fmt: skip
    assert res.exit_code == 0, res.output


def test_certs_unwritable_out_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for out in ("/proc/x", str(tmp_path / "file" / "sub")):
        res = _certs("--out", out, "--region", "a")
        assert res.exit_code == 1, res.output
        assert res.output.startswith("Error: --out:") and len(res.output.splitlines()) == 1


@pytest.mark.parametrize(
    ("manifest", "needle"),
    [
        (None, "MANIFEST.json: No such file"),
        ("{bad", "MANIFEST.json: not JSON"),
        ('{"files": 5}', "'files' must be a non-empty list"),
        ('{"files": []}', "'files' must be a non-empty list"),
        ("[1]", "'files' must be a non-empty list"),
        ('{"files": [5]}', "files[0] must be"),
        ('{"files": [{"file": "../x.json", "event": "push"}]}', "files[0] must be"),
        ('{"files": [{"file": "gone.json", "event": "push"}]}', "gone.json: No such file"),
        ('{"files": [{"file": "p.json", "event": "push"}]}', "p.json: not JSON"),
    ],
)
def test_demo_bad_payloads_dir_is_one_line(
    tmp_path: Path, manifest: str | None, needle: str
) -> None:
    if manifest is not None:
        (tmp_path / "MANIFEST.json").write_text(manifest)
    (tmp_path / "p.json").write_text("{nope")
    res = CliRunner().invoke(main, ["demo", "--payloads", str(tmp_path)])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
    assert res.output.startswith("Error: --payloads: ") and needle in res.output, res.output
    assert len(res.output.splitlines()) == 1


def test_demo_refuses_a_timeout_that_is_not_positive() -> None:
    for value in ("-1", "0", "nan"):
        res = CliRunner().invoke(main, ["demo", "--events", "3", "--timeout", value])
        assert res.exit_code == 2 and "--timeout" in res.output, res.output


def test_demo_table_names_no_library_when_nothing_was_verified(capsys) -> None:  # noqa: ANN001
    from regionsync.demo import _print_table

    _print_table({
        "regions": {}, "events_accepted": 0, "events_published": 3, "deliveries_received": 0,
        "deliveries_expected": 3, "duplicates": 0, "verifier": "", "signatures_verified": 0,
        "signatures_failed": 0, "converged": True, "delivered_all": False, "wall_s": 1,
        "publish_per_s": None, "events_per_s": None, "ok": False,
    })  # fmt: skip
    out = capsys.readouterr().out
    assert "verified by no library (nothing delivered): 0 ok" in out and "by :" not in out


def test_serve_with_tracing_but_no_otel_extra_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
    except ImportError:
        pass
    else:  # pragma: no cover - the dev extra does not install the exporter
        pytest.skip("the otel extra is installed here")
    cfg = tmp_path / "node.toml"
    cfg.write_text(
        f'data_dir = "{tmp_path}"\n[tracing]\notlp_endpoint = "http://127.0.0.1:4318/v1/traces"\n'
        'service_name = "regionsync"\nsample_ratio = 1.0\n'
    )
    res = CliRunner().invoke(main, ["serve", "--config", str(cfg)])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
    assert res.output.startswith("Error: [tracing] needs the otel extra: pip install")
    assert len(res.output.splitlines()) == 1


_TOK = 'token = "admin-token-0123456789"\n'


@pytest.mark.parametrize(
    ("toml", "line"),
    [
        (
            f'[[tokens]]\n{_TOK}scope = "admin"\n[[tokens]]\n{_TOK}scope = "tenant:a:read"\n',
            "node.toml: tokens[1].token: the same token as tokens[0]",
        ),
        (
            'region = "x1"\n[[peers]]\nregion = "x1"\naddress = "127.0.0.1:7071"\n',
            "node.toml: peers[0].region: 'x1' is this node's own region",
        ),
        (
            'region = "x1"\n[[peers]]\nregion = "x2"\naddress = "127.0.0.1:7071"\n'
            '[[peers]]\nregion = "x2"\naddress = "127.0.0.1:7072"\n',
            "node.toml: peers[1].region: 'x2' is already peers[0]",
        ),
        ("[delivery]\nretry_schedule_s = [-5, 0]\n",
         "node.toml: delivery.retry_schedule_s[0]: Input should be greater than 0"),
        ("[delivery]\nretry_schedule_s = [1, 0]\n",
         "node.toml: delivery.retry_schedule_s[1]: Input should be greater than 0"),
        ("[delivery]\nretry_schedule_s = [1, inf]\n", "node.toml: delivery.retry_schedule_s[1]:"),
        ("[delivery]\nretry_schedule_s = []\n",
         "node.toml: delivery.retry_schedule_s: List should have at least 1 item"),
        ('[[tokens]]\ntoken = "admin-tok-123"\nscope = "admin"\n',
         "node.toml: tokens[0].token: String should have at least 16 characters"),
        ('metrics_token = "short"\n',
         "node.toml: metrics_token: String should have at least 16 characters"),
        ('http_listen = "nope"\n', "node.toml: http_listen: must be host:port"),
        ('store = "postgresql://db/r"\n[delivery]\ntimeout_s = 15\nclaim_lease_s = 10\n',
         "node.toml: delivery.claim_lease_s: 10.0 must exceed delivery.timeout_s 15.0"),
        # the store's fence would refuse every registry write of every process
        ('store = "postgresql://db/r"\n[replication]\nretired_compact_s = 0\n',
         "node.toml: replication.retired_compact_s: 0.0 must be at least 1.0 on PostgreSQL"),
    ],
)  # fmt: skip
def test_config_contradictions_refused_in_plain_words(tmp_path: Path, toml: str, line: str) -> None:
    cfg = tmp_path / "node.toml"
    cfg.write_text(f'data_dir = "{tmp_path}"\n' + toml)
    res = CliRunner().invoke(main, ["serve", "--config", str(cfg)])
    assert res.exit_code == 1, res.output
    assert line in res.output, res.output
    for internal in ("_Loaded", "[type=", "input_value", "errors.pydantic.dev", "validation error"):
        assert internal not in res.output, res.output
    assert "admin-tok-123" not in res.output  # a refused token is never echoed


def test_config_accepts_distinct_tokens_and_peers(tmp_path: Path) -> None:
    cfg = tmp_path / "node.toml"
    cfg.write_text(
        f'region = "x1"\n[[tokens]]\n{_TOK}scope = "admin"\n[[tokens]]\n'
        'token = "reader-token-0123456789"\nscope = "tenant:a:read"\n'
        '[[peers]]\nregion = "x2"\naddress = "127.0.0.1:7071"\n'
        '[[peers]]\nregion = "x3"\naddress = "127.0.0.1:7072"\n'
        "[delivery]\nretry_schedule_s = [0.5]\n"
    )
    s = load_settings(cfg)
    assert [p.region for p in s.peers] == ["x2", "x3"] and s.delivery.retry_schedule_s == [0.5]
    # one process, no fence: compacting at once is allowed on SQLite
    assert (
        load_settings(None, replication={"retired_compact_s": 0}).replication.retired_compact_s == 0
    )


def test_every_config_error_is_reported_in_one_pass(tmp_path: Path) -> None:
    """Issue 43 ("config errors come in two passes"): the settings' own errors in several
    sections and the contradictions between valid settings, all in one run."""
    cfg = tmp_path / "node.toml"
    cfg.write_text(
        f'data_dir = "{tmp_path}"\nregion = "x1"\nstore = "postgresql://db/r"\n'
        'metrics_token = "short"\nhttp_listen = "nope"\n'
        "[delivery]\ntimeout_s = 15\nclaim_lease_s = 10\n"
        "[replication]\nheartbeat_s = 40\nfailover_after_s = 60\n"
        '[[peers]]\nregion = "x1"\naddress = "127.0.0.1:7071"\n'
        '[[peers]]\nregion = "x2"\naddress = "127.0.0.1:7072"\n'
        '[[peers]]\nregion = "x2"\naddress = "127.0.0.1:7073"\n'
        f'[[tokens]]\n{_TOK}scope = "admin"\n[[tokens]]\n{_TOK}scope = "tenant:a:read"\n'
    )
    res = CliRunner().invoke(main, ["serve", "--config", str(cfg)])
    assert res.exit_code == 1, res.output
    for line in (
        "node.toml: metrics_token: String should have at least 16 characters",
        "node.toml: http_listen: must be host:port",
        "node.toml: delivery.claim_lease_s: 10.0 must exceed delivery.timeout_s 15.0",
        "node.toml: replication.heartbeat_s: 40.0 must be under half",
        "node.toml: peers[0].region: 'x1' is this node's own region",
        "node.toml: peers[2].region: 'x2' is already peers[1]",
        "node.toml: tokens[1].token: the same token as tokens[0]",
    ):
        assert line in res.output, res.output
    assert "admin-token-0123456789" not in res.output


def test_a_contradiction_over_an_invalid_setting_is_not_reported() -> None:
    """A check reading a setting that is invalid itself is skipped (its value would be the
    default, not the file's): one line for the bad timeout, none about the lease."""
    with pytest.raises(pydantic.ValidationError) as info:
        load_settings(None, store="postgresql://db/r", delivery={"timeout_s": -1,
                                                                 "claim_lease_s": 1})  # fmt: skip
    lines = describe_errors(info.value, "x")
    assert len(lines) == 1 and lines[0].startswith("x: delivery.timeout_s:"), lines


def test_event_retention_below_the_key_lifetime_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "node.toml"
    cfg.write_text(
        f'data_dir = "{tmp_path}"\n[ingest]\nidempotency_ttl_s = 3600\n'
        "[delivery]\nevent_retention_s = 60\n"
        "[delivery.event_retention_by_tenant_s]\nacme = 120\nkeep = 0\nlong = 7200\n"
    )
    res = CliRunner().invoke(main, ["serve", "--config", str(cfg)])
    assert res.exit_code == 1, res.output
    assert "node.toml: delivery.event_retention_s: 60.0 must be 0 (forever)" in res.output
    assert "node.toml: delivery.event_retention_by_tenant_s.acme: 120.0 must be 0" in res.output
    assert "keep" not in res.output and "long" not in res.output
