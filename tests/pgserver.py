"""A throwaway PostgreSQL server for tests: ``initdb`` into a temporary directory, then
``postgres`` on a free loopback port (and a unix socket in that directory).

The binaries come from Debian's ``postgresql`` package (``make test`` installs it when
they are missing; they live in ``/usr/lib/postgresql/<major>/bin``, not on PATH). As root
(CI runs as root), initdb and postgres refuse to run, so both run as the ``postgres``
system user the package creates (``Popen(user=...)``, so the process we signal is the
postmaster itself). Nothing here skips: missing
binaries raise, so a test that needs PostgreSQL fails loudly in CI.

For tests the server trades durability for speed (``fsync=off``: it is thrown away after
the run); ``PgServer(durable=True)`` keeps PostgreSQL's defaults (bench/postgres.py).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from regionsync.demo import free_port

__all__ = ["PgServer", "find_bindir"]


def find_bindir() -> Path:
    """The directory holding ``initdb`` and ``postgres`` (highest major version first).

    Raises RuntimeError naming the fix when they are not installed."""
    found = shutil.which("initdb")
    if found and Path(found).resolve().with_name("postgres").exists():
        return Path(found).resolve().parent
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_major, reverse=True):
        if Path(d, "initdb").exists() and Path(d, "postgres").exists():
            return Path(d)
    raise RuntimeError(
        "PostgreSQL server binaries not found (initdb, postgres): run `make system-deps` "
        "(apt-get install postgresql) before the tests"
    )


def _major(d: str) -> int:
    part = Path(d).parent.name
    return int(part) if part.isdigit() else 0


class PgServer:
    """One running server; ``url(dbname)`` is a libpq URL for superuser ``postgres``."""

    def __init__(self, durable: bool = False, settings: dict[str, str] | None = None) -> None:
        self.durable = durable
        self.settings = dict(settings or {})  # more server settings (``-c name=value``)
        self.bindir = find_bindir()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="regionsync-pg-"))
        self._proc: subprocess.Popen[bytes] | None = None
        self._as: dict[str, Any] = {"cwd": self.dir}
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError as e:
                raise RuntimeError("running as root needs the `postgres` system user") from e
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._as.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def start(self, timeout_s: float = 30.0) -> None:
        """initdb and start; raises RuntimeError (with the server log) if it does not
        accept connections within ``timeout_s``."""
        data = self.dir / "data"
        init = subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(data), "-U", "postgres",
             "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
            capture_output=True, **self._as,
        )  # fmt: skip
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.decode(errors='replace')}")
        self._run(timeout_s)

    def restart(self, timeout_s: float = 30.0) -> None:
        """Fast shutdown (every session is terminated), then start on the same data and
        port: what clients see of a server restart or failover."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)
            self._proc.wait(timeout=30)
        self._run(timeout_s)

    def _run(self, timeout_s: float) -> None:
        data = self.dir / "data"
        logf = open(self.dir / "server.log", "ab")  # noqa: SIM115 (kept for the server)
        fast = [] if self.durable else ["-c", "fsync=off", "-c", "full_page_writes=off"]
        self._proc = subprocess.Popen(
            [str(self.bindir / "postgres"), "-D", str(data),
             "-h", "127.0.0.1", "-p", str(self.port), "-k", str(self.dir),
             "-c", "max_connections=200", *fast,
             *(a for k, v in self.settings.items() for a in ("-c", f"{k}={v}"))],
            stdout=logf, stderr=subprocess.STDOUT, **self._as,
        )  # fmt: skip
        logf.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
                if self._ready():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        log = (self.dir / "server.log").read_text(errors="replace")
        self.stop()
        raise RuntimeError(f"PostgreSQL did not start on port {self.port}:\n{log}")

    def _ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url(), connect_timeout=2) as c:
                c.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def create_database(self, name: str) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then remove the directory."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
