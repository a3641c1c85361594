"""Throwaway message brokers for tests (issue 46): RabbitMQ, NATS (JetStream) and Redis,
each from Debian's package (``rabbitmq-server``, ``nats-server``, ``redis-server``; ``make
system-deps`` installs them), on a free loopback port with its data in a temporary
directory. ``stop()`` and ``start()`` again keep the data (the outage tests stop a broker
for a while); ``close()`` stops it and removes the directory.

A missing binary skips the test with the reason, except in CI (``CI`` set), where it
fails: CI installs them. RabbitMQ refuses nothing as root, but its files belong to the
``rabbitmq`` system user the package creates (its Erlang cookie is in that user's home),
so as root it runs as that user, like tests/pgserver.py does for PostgreSQL.
"""

from __future__ import annotations

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

import pytest

from regionsync.demo import free_port

__all__ = ["NatsServer", "RabbitServer", "RedisServer", "need"]

RABBIT_BIN = "/usr/lib/rabbitmq/bin/rabbitmq-server"  # the package's, not the wrapper


def need(binary: str) -> str:
    """The path of ``binary``; skips the test without it unless in CI (then raises)."""
    found = binary if os.path.exists(binary) else shutil.which(binary)
    found = found or shutil.which(binary, path="/usr/sbin:/usr/bin")  # sbin off a user's PATH
    if found:
        return found
    why = f"{binary} not installed: run `make system-deps`"
    if os.environ.get("CI"):
        raise RuntimeError(why)
    pytest.skip(why)


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"broker not listening on {port} after {timeout_s} s:\n"
                       f"{log.read_text()[-3000:]}")  # fmt: skip


class _Broker:
    """One broker process: ``start``, ``stop`` (SIGTERM, then SIGKILL), ``close``."""

    name = ""
    start_timeout_s = 20.0

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"regionsync-{self.name}-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.popen: dict[str, Any] = {"cwd": self.dir}

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        log = self.dir / "server.log"
        with log.open("ab") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, **self.popen,
            )  # fmt: skip
        _wait_port(self.port, self.proc, log, self.start_timeout_s)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisServer(_Broker):
    name = "redis"

    def command(self) -> list[str]:
        return [need("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.dir), "--save", "", "--appendonly", "yes",
                "--appendfsync", "always"]  # fmt: skip

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


class NatsServer(_Broker):
    name = "nats"

    def command(self) -> list[str]:
        return [need("nats-server"), "-js", "-sd", str(self.dir / "js"), "-p",
                str(self.port), "-a", "127.0.0.1"]  # fmt: skip

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


class RabbitServer(_Broker):
    """A RabbitMQ node named after its port; its Erlang distribution port is free too."""

    name = "rabbitmq"
    start_timeout_s = 90.0

    def __init__(self) -> None:
        super().__init__()
        dist, self.epmd_port = free_port(), free_port()
        d = str(self.dir)
        (self.dir / "enabled_plugins").write_text("[].")
        self.popen["env"] = {
            "PATH": "/usr/sbin:/usr/bin:/bin",
            "HOME": "/var/lib/rabbitmq" if os.geteuid() == 0 else os.environ.get("HOME", d),
            "RABBITMQ_NODENAME": f"regionsync-test-{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(dist),
            # an Erlang port mapper of its own, stopped by ``close`` (not a shared daemon)
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_MNESIA_BASE": f"{d}/mnesia",
            "RABBITMQ_LOG_BASE": f"{d}/log",
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_PID_FILE": f"{d}/pid",
            "RABBITMQ_ENABLED_PLUGINS_FILE": f"{d}/enabled_plugins",
            "RABBITMQ_CONFIG_FILE": f"{d}/rabbitmq",  # absent: the defaults
        }
        if os.geteuid() == 0:
            pw = pwd.getpwnam("rabbitmq")
            for p in (self.dir, self.dir / "enabled_plugins"):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            self.popen.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])

    def command(self) -> list[str]:
        return [need(RABBIT_BIN)]

    def close(self) -> None:
        super().close()
        epmd = shutil.which("epmd")
        if epmd:
            subprocess.run([epmd, "-port", str(self.epmd_port), "-kill"], capture_output=True,
                           check=False, timeout=10)  # fmt: skip

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"
