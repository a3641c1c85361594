"""Fixtures shared by every test directory: a throwaway PostgreSQL server (tests/pgserver.py),
started on first use in a session and stopped at its end; a fresh database per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from pgserver import PgServer

_db_numbers = itertools.count(1)


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
