"""Fixtures shared by every test directory: a throwaway PostgreSQL server (tests/pgserver.py),
started on first use in a session and stopped at its end; a fresh database per test;
invariant checks that raise (core/invariants.py); and a watchdog that fails a test still
running after ``HANG_S`` with a dump of where it waits (tests/hangwatch.py)."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import pytest
from brokerserver import NatsServer, RabbitServer, RedisServer
from hangwatch import Watchdog
from pgserver import PgServer

from regionsync.core import invariants

_db_numbers = itertools.count(1)

# a test still running this long after its setup began is failed with a dump of its
# asyncio tasks and threads (far above the slowest test's time on a loaded machine); one
# that its cancellation does not end, this much later, ends the run
HANG_S = 600.0
HANG_EXIT_S = 120.0

# invariant checks raise in the tests, also in the node processes some tests start
os.environ["REGIONSYNC_INVARIANTS"] = "raise"
invariants.set_mode("raise")


@pytest.fixture(autouse=True)
def _invariants_hold() -> Iterator[None]:
    """Fails a test during which an invariant check failed, also when a broad ``except
    Exception`` swallowed the raise (core/invariants.py)."""
    invariants.broken.clear()
    yield
    assert not invariants.broken, f"invariants broken: {dict(invariants.broken)}"


@pytest.fixture(autouse=True)
def _hang_watchdog(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that hangs is dumped (past the output capture) and failed, or the run ended
    ``HANG_EXIT_S`` later, instead of holding the whole run (tests/hangwatch.py)."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    quiet = capture.global_and_fixture_disabled if capture is not None else nullcontext
    name = getattr(request.node, "originalname", request.node.name)
    dog = Watchdog(HANG_S, request.node.nodeid, name, quiet=quiet, exit_after_s=HANG_EXIT_S)
    dog.start()
    yield
    dog.stop()
    if dog.fired.is_set():  # also when the test caught the cancellation and passed
        pytest.fail(f"still running after {HANG_S:g} s: the hang watchdog's dump is above")


@pytest.fixture
def violations() -> Iterator[Counter[str]]:
    """For a test that breaks an invariant on purpose: the checks that failed (message ->
    count), forgotten when it ends."""
    yield invariants.broken
    invariants.broken.clear()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The session's PostgreSQL server (raises, never skips, when it cannot start)."""
    server = PgServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """The URL of a new, empty database of the session's server."""
    return pg_server.create_database(f"t{next(_db_numbers)}")


def _broker(server: RabbitServer | NatsServer | RedisServer) -> Iterator[Any]:
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[RabbitServer]:
    """The session's RabbitMQ node (tests/brokerserver.py; it takes seconds to start)."""
    yield from _broker(RabbitServer())


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    """The session's NATS server with JetStream."""
    yield from _broker(NatsServer())


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """The session's Redis server (append-only file on)."""
    yield from _broker(RedisServer())


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the worker threads of aiosqlite connections a failed test left open. Their
    ``__del__`` stops the thread after warning, but with warnings as errors the warning
    raises first, and the thread (not a daemon) kept the finished run from exiting."""
    import threading

    from aiosqlite import core

    for thread in threading.enumerate():
        if getattr(thread, "_target", None) is core._connection_worker_thread:
            tx = thread._args[0]  # type: ignore[attr-defined]
            tx.put_nowait((None, lambda: core._STOP_RUNNING_SENTINEL))
