"""The repository stands alone: code, tests and docs cite only files inside it, the files
docs/design.md's newcomer's path names exist, cited doc anchors resolve, and the real
payloads of tests/data match their manifest (docs/style.md, "Comments and references")."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs/design.md"
PAYLOADS = ROOT / "tests/data/github-webhooks"

# directories that are not the project's text: virtualenvs, caches, build output, the
# third-party payloads of tests/data (checked against their manifest below)
_SKIP_DIRS = {
    ".git", ".venv", ".venv-checkov", "__pycache__", ".pytest_cache", ".hypothesis",
    ".ruff_cache", ".mypy_cache", "build", "dist", "node_modules", "sim-out",
    "test-artifacts", "regionsync-data", ".terraform",
}  # fmt: skip
_SKIP_PATHS = {ROOT / "tests/data"}
# files outside the repository that code once cited: the team's notes and a shared
# datasets folder beside the checkout (written in pieces so this file does not match)
_OUTSIDE = re.compile(
    "|".join(
        [
            r"\bDESIGN" + r"\.md",
            r"\bSTYLE" + r"\.md",
            r"FIELD" + r"-NOTES",
            r"shared" + r"/API\.md",
            r"\.\./shared" + r"\b",
            r"shared" + r"/datasets",
            r"/work" + r"/",
        ]
    )
)


def _text_files() -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames if d not in _SKIP_DIRS and here / d not in _SKIP_PATHS
        )
        out.extend(here / f for f in sorted(filenames) if f not in _SKIP_DIRS)  # .git: a file too
    return out


def test_nothing_cites_a_file_outside_the_repository() -> None:
    found = []
    for path in _text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary (images, databases): not prose
        for n, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "cite docs/design.md, docs/style.md, docs/api.md or README.md:\n" + (
        "\n".join(found)
    )


def _section(text: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m is not None, f"docs/design.md has no section {title!r}"
    return m.group(1)


def _defines(source: str, name: str) -> bool:
    """Does ``source`` define ``name`` (a function, class or module-level name)?"""
    pattern = rf"^\s*(async def|def|class) {re.escape(name)}\b|^{re.escape(name)}\b[^=\n]*="
    return re.search(pattern, source, re.M) is not None


def test_newcomers_path_names_files_that_exist() -> None:
    """Every file of the newcomer's path exists, and each name given with a file (in
    parentheses after it) is defined in that file."""
    path_section = _section(DESIGN.read_text(encoding="utf-8"), "Newcomer's path")
    cited = re.findall(r"`([\w./-]+/[\w./-]*)`(?: \(([^)]*)\))?", path_section)
    files = [(p, names) for p, names in cited if not p.startswith("/")]
    assert len(files) >= 20, files
    missing, undefined = [], []
    for rel, names in files:
        target = ROOT / rel
        if not target.exists():
            missing.append(rel)
            continue
        for name in re.findall(r"`([A-Za-z_][\w.]*)`", names):
            if not _defines(target.read_text(encoding="utf-8"), name.rsplit(".", 1)[-1]):
                undefined.append(f"{rel}: {name}")
    assert not missing, f"docs/design.md names files that do not exist: {missing}"
    assert not undefined, f"docs/design.md names what these files do not define: {undefined}"


def _anchors(doc: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    titles = re.findall(r"^#+ (.+)$", doc.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", t.strip().lower()).replace(" ", "-") for t in titles}


def test_cited_doc_sections_exist() -> None:
    cite = re.compile(r"(?:docs/)?(design|style)\.md#([\w-]+)")
    anchors = {name: _anchors(ROOT / f"docs/{name}.md") for name in ("design", "style")}
    bad = []
    for path in _text_files():
        if path.suffix not in {".py", ".md", ".tf", ".toml"} and path.name != "Makefile":
            continue
        for doc, anchor in cite.findall(path.read_text(encoding="utf-8")):
            if anchor not in anchors[doc]:
                bad.append(f"{path.relative_to(ROOT)}: {doc}.md#{anchor}")
    assert not bad, f"no such section: {bad}"


def _manifest() -> dict:
    return json.loads((PAYLOADS / "MANIFEST.json").read_text(encoding="utf-8"))


def test_payloads_match_their_manifest() -> None:
    manifest = _manifest()
    rows = manifest["files"]
    assert manifest["file_count"] == len(rows)
    assert manifest["total_bytes"] == sum(r["bytes"] for r in rows)
    present = {p.name for p in PAYLOADS.iterdir()} - {"MANIFEST.json", "README.md", "LICENSE"}
    assert present == {r["file"] for r in rows}, "a payload without a manifest row, or the reverse"
    for row in rows:
        body = (PAYLOADS / row["file"]).read_bytes()
        assert len(body) == row["bytes"], row["file"]
        assert hashlib.sha256(body).hexdigest() == row["sha256"], row["file"]


@pytest.mark.parametrize("name", ["LICENSE", "README.md"])
def test_payloads_carry_their_licence(name: str) -> None:
    text = (PAYLOADS / name).read_text(encoding="utf-8")
    assert "@octokit/webhooks-examples" in text and "MIT" in text
