"""The previous release (previous_release.txt) built in a virtualenv of its own, offline,
and node processes of either release (issue 40, rolling upgrades).

``build`` exports the commit with ``git archive`` into a directory and makes a virtualenv
(``python -m venv --without-pip``) whose site-packages holds one ``.pth``: the old tree's
``src/`` and root (regionsync, crdt, sim of that commit) and then the running
interpreter's site-packages (the dependencies; no network, no pip). The editable install
of the current checkout is a ``.pth`` inside that site-packages, which a path line does
not process, so the old interpreter never sees the new code. A shallow clone lacks the
commit: ``missing_history`` says why, and the tests skip with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from regionsync import demo

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = Path(__file__).with_name("previous_release.txt")

__all__ = ["OldRelease", "build", "missing_history", "previous_commit", "spawn"]


def previous_commit() -> str:
    """The commit named by previous_release.txt."""
    for line in PREVIOUS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            return line.split()[0]
    raise ValueError(f"{PREVIOUS} names no commit")


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)


def missing_history(commit: str) -> str | None:
    """Why ``commit`` cannot be built here (no git, not a clone, a shallow clone), or None."""
    try:
        found = _git("cat-file", "-e", f"{commit}^{{commit}}")
    except FileNotFoundError:
        return "git is not installed"
    if found.returncode == 0:
        return None
    shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip() == b"true"
    why = "a shallow clone" if shallow else "not in this repository's history"
    return (
        f"previous release {commit[:12]} unavailable ({why}): the upgrade tests need a full clone"
    )


@dataclass(frozen=True)
class OldRelease:
    """The previous release: its commit, source tree and interpreter."""

    commit: str
    tree: Path
    python: Path


def build(dest: Path, commit: str) -> OldRelease:
    """``commit``'s tree under ``dest/src-tree`` and a virtualenv at ``dest/venv`` that
    imports it (module docstring). Raises RuntimeError if the result imports anything
    else."""
    tree, venv = dest / "src-tree", dest / "venv"
    tree.mkdir(parents=True)
    with tempfile.TemporaryFile() as tar:
        subprocess.run(["git", "-C", str(ROOT), "archive", commit], stdout=tar, check=True)
        tar.seek(0)
        with tarfile.open(fileobj=tar) as archive:
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
                archive.extractall(tree, filter="data")
            else:  # our own commit's archive
                archive.extractall(tree)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, env=_env(),
    ).stdout.strip()  # fmt: skip
    ours = sysconfig.get_paths()
    lines = [str(tree / "src"), str(tree), ours["purelib"], ours["platlib"]]
    (Path(site) / "regionsync-previous-release.pth").write_text("\n".join(lines) + "\n")
    release = OldRelease(commit, tree, python)
    probe = "import regionsync, crdt; print(regionsync.__file__, crdt.__file__)"
    where = subprocess.run(
        [str(python), "-P", "-c", probe],
        capture_output=True, text=True, check=True, env=_env(), cwd=tree,
    ).stdout.split()  # fmt: skip
    if not all(Path(p).is_relative_to(tree) for p in where):
        raise RuntimeError(f"the previous release imports {where}, not {tree}")
    return release


def _env() -> dict[str, str]:
    """This environment without PYTHONPATH (it may name the current checkout)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "PYTHONUNBUFFERED": "1"}


def spawn(
    root: Path, name: str, config: Path, release: OldRelease | None
) -> subprocess.Popen[bytes]:
    """``regionsync serve --config`` as a real process logging to ``root/<name>.log``: the
    current code (``release`` None, as demo.spawn) or ``release``'s."""
    if release is None:
        return demo.spawn(root, name, config)
    with open(root / f"{name}.log", "ab") as logf:
        logf.write(f"--- previous release {release.commit[:12]}\n".encode())
        logf.flush()
        return subprocess.Popen(
            [str(release.python), "-P", "-m", "regionsync.cli", "serve", "--config", str(config)],
            stdout=logf, stderr=subprocess.STDOUT, env=_env(), cwd=release.tree,
        )  # fmt: skip
