"""constraints/*.txt pin what `make` installs, inside the ranges pyproject.toml declares.

A release upstream must not change CI between two runs of the same commit (grpcio-tools
1.85.4 once rewrote the version stamp of the committed generated code), and the runtime
floors must admit only runtimes the generated code accepts.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _pins(name: str) -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints" / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            package, _, version = line.partition("==")
            assert version, f"constraints/{name}: {line!r} is not a pin (name==version)"
            pins[canonicalize_name(package)] = Version(version)
    return pins


def _requirements(pyproject: Path, extras: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads(pyproject.read_text())["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def _floor(requirement: Requirement) -> Version:
    floors = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    assert floors, f"{requirement} has no floor"
    return max(floors)


def test_every_requirement_make_installs_is_pinned_inside_its_range() -> None:
    pins = _pins("dev.txt")
    requirements = _requirements(ROOT / "pyproject.toml", ("dev",)) + _requirements(
        ROOT / "clients/python/pyproject.toml", ()
    )
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not pinned: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints/dev.txt pins {name}=={pins[name]} outside {requirement}"
        )


def test_checkov_is_pinned_inside_the_makefile_range() -> None:
    ranges = re.search(r"^CHECKOV_REQ := '(.+)'$", (ROOT / "Makefile").read_text(), re.M)
    assert ranges, "Makefile: CHECKOV_REQ not found"
    requirement = Requirement(ranges.group(1))
    pins = _pins("checkov.txt")
    assert requirement.specifier.contains(pins["checkov"])


def test_runtime_floors_admit_only_runtimes_the_generated_code_accepts() -> None:
    generated = ROOT / "src/regionsync/v1"
    grpc_stamp = re.search(
        r"^GRPC_GENERATED_VERSION = '([\d.]+)'$",
        (generated / "replication_pb2_grpc.py").read_text(),
        re.M,
    )
    protobuf_stamp = re.search(
        r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,"
        r"\s*(\d+),\s*(\d+),\s*(\d+),",
        (generated / "replication_pb2.py").read_text(),
    )
    assert grpc_stamp and protobuf_stamp
    runtime = {canonicalize_name(r.name): r for r in _requirements(ROOT / "pyproject.toml", ())}
    assert _floor(runtime["grpcio"]) >= Version(grpc_stamp.group(1))
    assert _floor(runtime["protobuf"]) >= Version(".".join(protobuf_stamp.groups()))
    # the pinned generator writes the stamp the committed code carries (tests/test_proto.py
    # compares the rest)
    assert _pins("dev.txt")["grpcio-tools"] == Version(grpc_stamp.group(1))
