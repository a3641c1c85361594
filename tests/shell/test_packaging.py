"""Issue 18 item 2: the image, the compose file, the license and ``--version``.

hadolint is not available here: the Dockerfile is checked for its few promises only."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import yaml
from click.testing import CliRunner

from regionsync.cli import main
from regionsync.config import load_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def test_version_comes_from_package_metadata() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"regionsync, version {version('regionsync')}"


def test_license_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX" in text


def test_changelog_names_the_current_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{version('regionsync')}]" in text


def test_dockerfile_slim_non_root_with_healthcheck() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.\d+-slim", text, re.M)
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r"^HEALTHCHECK .*", text, re.M) and "/healthz" in text
    # the image installs the versions the tests ran with
    assert re.search(r"^RUN pip install -c constraints/dev\.txt ", text, re.M)
    # every path the image copies exists
    for line in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for path in line.split():
            assert (ROOT / path).exists(), path


def test_compose_brings_up_three_regions_and_a_receiver() -> None:
    doc = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = doc["services"]
    assert "receiver" in services
    regions = {}
    for name, svc in services.items():
        mounts = [v.split(":") for v in svc.get("volumes", [])]
        configs = [src for src, dst, *_ in mounts if dst == "/etc/regionsync/node.toml"]
        if configs:
            settings = load_settings(DEPLOY / configs[0])
            assert settings.region == name  # peers dial the service name
            regions[name] = settings
    assert len(regions) == 3
    for name, s in regions.items():
        assert {p.region for p in s.peers} == set(regions) - {name}
        assert all(p.address == f"{p.region}:7070" for p in s.peers)
        assert s.http_listen == "0.0.0.0:8080" and s.grpc_listen.endswith(":7070")
        assert s.tokens, "an API reachable from outside the container needs tokens"
        # the receiver's fixed address is allowed by the destination guard
        subnet = doc["networks"]["regions"]["ipam"]["config"][0]["subnet"]
        assert subnet in s.delivery.allow_private_networks
    receiver_ip = services["receiver"]["networks"]["regions"]["ipv4_address"]
    assert receiver_ip.startswith(subnet.rsplit(".", 1)[0] + ".")
