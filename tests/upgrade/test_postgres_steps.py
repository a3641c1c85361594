"""Expand/contract migrations of the PostgreSQL store (adapters/postgres_schema.py,
issue 40): expand steps leave ``schema_version`` where the previous release compares it
(so it still starts on the database), a newer release's expand steps do not stop an
older one, a contract step waits while a session of an older process is alive and
then makes the releases that do not know it refuse, and every process records itself."""

from __future__ import annotations

import asyncio
import re

import psycopg
import pytest

from regionsync.adapters.postgres_schema import (
    APP_PREFIX,
    LEVEL,
    MIGRATIONS,
    STEPS,
    Step,
    migrate,
    older_sessions,
)

CONTRACT = Step("drop_later", "contract", "DROP TABLE added_by_expand", min_level=LEVEL + 2)
EXPAND = Step("added_by_expand", "expand", "CREATE TABLE added_by_expand(x INTEGER)")


async def connect(url: str, app: str = "") -> psycopg.AsyncConnection:
    return await psycopg.AsyncConnection.connect(url, autocommit=True, application_name=app)


async def gone(conn: psycopg.AsyncConnection, closed: psycopg.AsyncConnection, left: int) -> None:
    """Close ``closed`` and wait until its server backend has left pg_stat_activity (it
    exits just after the client closes): ``left`` older sessions remain."""
    await closed.close()
    for _ in range(200):
        if len(await older_sessions(conn, CONTRACT.min_level)) == left:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(await older_sessions(conn, CONTRACT.min_level))


async def rows(conn: psycopg.AsyncConnection, sql: str) -> list[tuple]:
    return await (await conn.execute(sql)).fetchall()


def test_expand_steps_are_additive() -> None:
    """What the previous release runs beside: no drop, rename, type or column change."""
    removing = re.compile(r"\b(DROP|RENAME|TRUNCATE|DELETE|UPDATE|ALTER\s+COLUMN|TYPE)\b", re.I)
    for step in STEPS:
        assert step.kind in ("expand", "contract"), step.name
        if step.kind == "expand":
            assert not removing.search(step.sql), step.name
    assert len({s.name for s in STEPS}) == len(STEPS)
    assert LEVEL == len(MIGRATIONS) + len(STEPS)


async def test_expand_keeps_the_version_older_releases_compare(pg_url: str) -> None:
    async with await connect(pg_url) as conn:
        assert await migrate(conn, holder="host/1/r") == len(MIGRATIONS)
        # what release e5ef9b5 checks before it starts: max(version) <= its 9 migrations
        assert await rows(conn, "SELECT max(version) FROM schema_version") == [(len(MIGRATIONS),)]
        steps = await rows(conn, "SELECT name, kind FROM schema_steps ORDER BY name")
        assert steps == [(s.name, s.kind) for s in sorted(STEPS, key=lambda s: s.name)]
        got = await rows(conn, "SELECT holder, level FROM processes")
        assert got == [("host/1/r", LEVEL)]
        # a newer release's expand step: this code still starts (and re-registers)
        await migrate(conn, MIGRATIONS, [*STEPS, EXPAND], holder="host/2/r")
        assert await migrate(conn, holder="host/1/r") == len(MIGRATIONS)
        assert len(await rows(conn, "SELECT * FROM processes")) == 2


async def test_a_contract_step_waits_for_older_processes(pg_url: str) -> None:
    steps = [*STEPS, EXPAND, CONTRACT]
    async with await connect(pg_url) as conn:
        await migrate(conn, MIGRATIONS, [*STEPS, EXPAND])
        older = await connect(pg_url)  # a pool session of the previous release: no level
        same = await connect(pg_url, f"{APP_PREFIX}{LEVEL}")  # this release: too old too
        newer = await connect(pg_url, f"{APP_PREFIX}{LEVEL + 2}")  # knows the contract
        role = await connect(pg_url, "regionsync host/9/r")  # a role session: its pool answers
        try:
            blockers = await older_sessions(conn, CONTRACT.min_level)
            assert [b.split(":", 1)[1] for b in blockers] == ["", f"{APP_PREFIX}{LEVEL}"]
            assert await migrate(conn, MIGRATIONS, steps) == len(MIGRATIONS)  # held back
            assert await rows(conn, "SELECT count(*) FROM added_by_expand") == [(0,)]
            await gone(conn, older, 1)
            assert await migrate(conn, MIGRATIONS, steps) == len(MIGRATIONS)  # still `same`
            await gone(conn, same, 0)
            assert await migrate(conn, MIGRATIONS, steps) == len(MIGRATIONS) + 1
        finally:
            for c in (older, same, newer, role):
                await c.close()
        with pytest.raises(psycopg.errors.UndefinedTable):
            await conn.execute("SELECT 1 FROM added_by_expand")
        # a release that does not know the contract step refuses the database
        with pytest.raises(RuntimeError, match="newer"):
            await migrate(conn)
        assert await migrate(conn, MIGRATIONS, steps) == len(MIGRATIONS) + 1  # applied once
