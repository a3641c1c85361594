"""Versioned schema migrations of the PostgreSQL store (adapters/postgres_store.py),
in expand/contract steps so that a region is upgraded one process at a time (issue 40).

``MIGRATIONS[i]`` brings a database from version ``i`` to ``i + 1``; the version reached
is recorded in ``schema_version`` (one row per applied migration, with its time). These
nine are the base every release since 0.1.0 needs. After them come ``STEPS``:

- an *expand* step is additive (a table, a nullable or defaulted column, an index): code
  of the previous release runs beside it. The first process of a new release applies it
  at start while older processes keep serving; it is recorded in ``schema_steps`` only,
  so ``schema_version`` (which older releases compare with their own) does not move and
  a process of the previous release can still start on the database (roll back).
- a *contract* step removes or repurposes (drops a column the previous release wrote,
  tightens a constraint). It runs only when no process of an older release is alive:
  every other session on the database must be a process announcing (its connections'
  ``application_name``, ``APP_PREFIX`` + its ``LEVEL``) a level of ``min_level`` or more.
  Otherwise it is left for a later start (``migrate`` logs the sessions in the way). A
  contract step adds a ``schema_version`` row: from then on releases that do not know it
  refuse to start, as they must.

A process records itself in ``processes`` (holder, release, level) at start. Everything
runs at ``PostgresStore.open`` in one transaction under an advisory lock, so several
processes starting at once on one database apply each step exactly once. A migration or
step is never edited once released: a change is a new entry at the end.

Text keys compare with ``COLLATE "C"`` (bytewise, as SQLite and the memory store
compare), so id order, cursors and the event-type prefix range agree on every store.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import psycopg

from ..core.capabilities import RELEASE

__all__ = ["APP_PREFIX", "LEVEL", "MIGRATIONS", "SCHEMA_LOCK", "STEPS", "Step", "migrate"]

log = logging.getLogger(__name__)

# pg_advisory_xact_lock key of the migration step (any constant; "rsyncmig" in ASCII)
SCHEMA_LOCK = 0x7273796E636D6967

_T = 'TEXT COLLATE "C" NOT NULL'

MIGRATIONS: list[str] = [
    # 1: the tables of SqliteStore, in PostgreSQL types
    f"""
    CREATE TABLE meta(key {_T} PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE registry(key {_T} PRIMARY KEY, state BYTEA NOT NULL);
    CREATE TABLE log(
      origin {_T}, seq BIGINT NOT NULL, kind TEXT NOT NULL, body BYTEA NOT NULL,
      hlc_wall BIGINT NOT NULL, hlc_logical BIGINT NOT NULL, PRIMARY KEY(origin, seq)
    );
    CREATE TABLE version_vector(origin {_T} PRIMARY KEY, seq BIGINT NOT NULL);
    CREATE TABLE log_floor(origin {_T} PRIMARY KEY, seq BIGINT NOT NULL);
    CREATE TABLE events(
      id {_T} PRIMARY KEY, tenant {_T}, event_type {_T}, payload BYTEA NOT NULL,
      region {_T}, received_at_ms BIGINT NOT NULL, owner_gen TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE deliveries(
      id {_T} PRIMARY KEY, event_id {_T}, endpoint_id {_T}, tenant {_T},
      status {_T}, attempts INTEGER NOT NULL, next_attempt_at_ms BIGINT, region {_T},
      created_at_ms BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL,
      generation INTEGER NOT NULL DEFAULT 0, owner_gen TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX deliveries_due ON deliveries(region, status, next_attempt_at_ms);
    CREATE INDEX deliveries_endpoint ON deliveries(endpoint_id, id);
    CREATE INDEX deliveries_event ON deliveries(event_id);
    CREATE INDEX deliveries_tenant ON deliveries(tenant, created_at_ms, id);
    CREATE INDEX events_tenant ON events(tenant, received_at_ms, id);
    CREATE TABLE attempts(
      delivery_id {_T}, n INTEGER NOT NULL, at_ms BIGINT NOT NULL, region {_T},
      status_code INTEGER, latency_ms DOUBLE PRECISION NOT NULL, error TEXT,
      response_excerpt TEXT NOT NULL, endpoint_id {_T} DEFAULT '',
      generation INTEGER NOT NULL DEFAULT 0, response_headers TEXT NOT NULL DEFAULT '',
      owner_gen TEXT NOT NULL DEFAULT '', PRIMARY KEY(delivery_id, region, generation, n)
    );
    CREATE INDEX attempts_endpoint ON attempts(endpoint_id, at_ms);
    CREATE INDEX attempts_age ON attempts(at_ms);
    CREATE TABLE idempotency(
      tenant {_T}, key {_T}, event_id {_T}, body_sha256 TEXT NOT NULL,
      created_at_ms BIGINT NOT NULL, region {_T}, PRIMARY KEY(tenant, key)
    );
    """,
    # 2: delivery claims of several processes on one database (PostgresStore.claim_due):
    # who holds a due delivery and until when (ms, the claimer's wall clock); 0 = free
    """
    ALTER TABLE deliveries ADD COLUMN claimed_by TEXT NOT NULL DEFAULT '';
    ALTER TABLE deliveries ADD COLUMN lease_until_ms BIGINT NOT NULL DEFAULT 0;
    CREATE INDEX deliveries_pending ON deliveries(region, next_attempt_at_ms, id)
      WHERE status = 'pending';
    """,
    # 3: the audit log of registry changes (core.model.AuditEntry), as in SqliteStore
    f"""
    CREATE TABLE audit(
      origin {_T}, seq BIGINT NOT NULL, hlc_wall BIGINT NOT NULL,
      hlc_logical BIGINT NOT NULL, who TEXT NOT NULL, op TEXT NOT NULL, object TEXT NOT NULL,
      tenant {_T}, detail TEXT NOT NULL, PRIMARY KEY(origin, seq)
    );
    CREATE INDEX audit_time ON audit(hlc_wall, hlc_logical, origin, seq);
    CREATE INDEX audit_tenant ON audit(tenant, hlc_wall, hlc_logical, origin, seq);
    """,
    # 4: the request headers each attempt sent (core.envelope.recorded_headers, issue 15)
    """
    ALTER TABLE attempts ADD COLUMN request_headers TEXT NOT NULL DEFAULT '';
    """,
    # 5: per-endpoint due heads (PostgresStore.due_deliveries): a claim reads the due rows
    # of the endpoints it may start, never the backlog of a blocked one
    """
    CREATE INDEX deliveries_due_endpoint ON deliveries(region, endpoint_id, next_attempt_at_ms, id)
      WHERE status = 'pending';
    """,
    # 6: one CRDT actor per node process (issue 16): every process start allocates an
    # incarnation of its own here (PostgresStore.allocate_actor); never reused
    """
    CREATE TABLE actors(
      incarnation BIGINT PRIMARY KEY, holder TEXT NOT NULL, started_at_ms BIGINT NOT NULL
    );
    """,
    # 7: Idempotency-Keys are looked up in the store, not held in memory (issue 17): by
    # event for anti-entropy items, by age for the purge in bounded batches
    """
    CREATE INDEX idempotency_event ON idempotency(event_id);
    CREATE INDEX idempotency_age ON idempotency(created_at_ms);
    """,
    # 8: row counts kept by triggers (PostgresStore.counts reads a few rows, never scans;
    # issue 17): kind 'event' by origin region (status ''), 'delivery' by owner region and
    # status. Each backend moves rows of its own ``slot`` (its pid), so processes never
    # wait on one counter row; counts() folds unlocked rows into slot 0. Triggers first
    # (their lock waits out writers in flight), then the one counting pass.
    f"""
    CREATE TABLE row_counts(
      kind {_T}, region {_T}, status {_T}, slot INTEGER NOT NULL, n BIGINT NOT NULL,
      PRIMARY KEY(kind, region, status, slot)
    );
    CREATE FUNCTION row_counts_event() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF TG_OP = 'DELETE' THEN
          INSERT INTO row_counts VALUES ('event', OLD.region, '', pg_backend_pid(), -1)
            ON CONFLICT (kind, region, status, slot) DO UPDATE SET n = row_counts.n - 1;
        ELSE
          INSERT INTO row_counts VALUES ('event', NEW.region, '', pg_backend_pid(), 1)
            ON CONFLICT (kind, region, status, slot) DO UPDATE SET n = row_counts.n + 1;
        END IF;
        RETURN NULL;
      END $$;
    CREATE FUNCTION row_counts_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF TG_OP <> 'INSERT' THEN
          INSERT INTO row_counts
            VALUES ('delivery', OLD.region, OLD.status, pg_backend_pid(), -1)
            ON CONFLICT (kind, region, status, slot) DO UPDATE SET n = row_counts.n - 1;
        END IF;
        IF TG_OP <> 'DELETE' THEN
          INSERT INTO row_counts
            VALUES ('delivery', NEW.region, NEW.status, pg_backend_pid(), 1)
            ON CONFLICT (kind, region, status, slot) DO UPDATE SET n = row_counts.n + 1;
        END IF;
        RETURN NULL;
      END $$;
    CREATE TRIGGER row_counts_event AFTER INSERT OR DELETE ON events
      FOR EACH ROW EXECUTE FUNCTION row_counts_event();
    CREATE TRIGGER row_counts_delivery AFTER INSERT OR DELETE ON deliveries
      FOR EACH ROW EXECUTE FUNCTION row_counts_delivery();
    CREATE TRIGGER row_counts_delivery_moved AFTER UPDATE OF region, status ON deliveries
      FOR EACH ROW WHEN (OLD.region IS DISTINCT FROM NEW.region
        OR OLD.status IS DISTINCT FROM NEW.status)
      EXECUTE FUNCTION row_counts_delivery();
    INSERT INTO row_counts SELECT 'event', region, '', 0, count(*) FROM events GROUP BY region;
    INSERT INTO row_counts
      SELECT 'delivery', region, status, 0, count(*) FROM deliveries GROUP BY region, status;
    """,
    # 9: an event record's body kept without its event's payload (adapters.log_cut; issue
    # 17): the events row it was cut for and the byte offset, both NULL for a whole body
    """
    ALTER TABLE log ADD COLUMN event_id TEXT COLLATE "C", ADD COLUMN event_at INTEGER;
    """,
]


@dataclass(frozen=True)
class Step:
    """One migration after the base: ``expand`` (additive, the previous release runs
    beside it) or ``contract`` (only once every live process announces ``min_level``)."""

    name: str
    kind: Literal["expand", "contract"]
    sql: str
    min_level: int = 0


STEPS: list[Step] = [
    # which release and schema level each process runs (issue 40); liveness is its
    # sessions in pg_stat_activity (a stopped process leaves a row, never a session)
    Step(
        "processes",
        "expand",
        f"""
        CREATE TABLE processes(
          holder {_T} PRIMARY KEY, release TEXT NOT NULL, level INTEGER NOT NULL,
          backend_pid INTEGER NOT NULL, started_at TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        """,
    ),
    # event retention (adapters/retention_sql.py) finds the oldest events by this index
    Step("events_age", "expand", "CREATE INDEX events_age ON events(received_at_ms);"),
    # the process's CRDT actor (its ``actors`` incarnation), so its row is deleted once
    # that actor is retired and pruned (PostgresStore.forget_origins); NULL for a process
    # of the previous release, which never sets it (its row goes by its holder's actors)
    Step("processes_incarnation", "expand", "ALTER TABLE processes ADD COLUMN incarnation BIGINT;"),
]

# the schema level this code announces: base migrations and steps it knows
LEVEL = len(MIGRATIONS) + len(STEPS)
# application_name of a process's pool sessions (PostgresStore): this, then LEVEL
APP_PREFIX = "regionsync/schema-"
# application_name of a process's replication-role session (PostgresCoordinator): this,
# then its holder, cut to 63 characters (NAMEDATALEN - 1)
ROLE_APP = "regionsync "


async def migrate(
    conn: psycopg.AsyncConnection,
    migrations: list[str] = MIGRATIONS,
    steps: Sequence[Step] | None = None,
    *,
    holder: str = "",
) -> int:
    """Apply the base migrations and steps ``conn``'s database lacks, in one transaction;
    record ``holder`` in ``processes``; returns the ``schema_version`` reached. ``steps``
    default to ``STEPS`` after the full base (none after an older base a test asks for).

    Raises RuntimeError if the database's ``schema_version`` is newer than this code knows
    (a release that contracted what this one needs: run a newer regionsync), and psycopg
    errors if a migration fails (nothing of the transaction is kept). Expand steps of a
    newer release are no reason to refuse: they are additive."""
    if steps is None:
        steps = STEPS if migrations is MIGRATIONS else []
    known = len(migrations) + sum(1 for s in steps if s.kind == "contract")
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version("
            "version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        cur = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_version")
        row = await cur.fetchone()
        have = int(row[0]) if row else 0
        if have > known:
            raise RuntimeError(
                f"database schema version {have} is newer than this code's "
                f"{known}: run a newer regionsync"
            )
        for version in range(have + 1, len(migrations) + 1):
            await conn.execute(migrations[version - 1])  # type: ignore[arg-type]
            await conn.execute("INSERT INTO schema_version(version) VALUES (%s)", (version,))
        if steps:
            have = await _apply_steps(conn, steps, max(have, len(migrations)))
        if holder and any(s.name == "processes" for s in steps):
            await conn.execute(
                "INSERT INTO processes(holder, release, level, backend_pid) "
                "VALUES (%s, %s, %s, pg_backend_pid()) ON CONFLICT (holder) DO UPDATE SET "
                "release = excluded.release, level = excluded.level, "
                "backend_pid = excluded.backend_pid, started_at = now()",
                (holder, RELEASE, LEVEL),
            )
    return max(have, len(migrations))


async def _apply_steps(conn: psycopg.AsyncConnection, steps: Sequence[Step], version: int) -> int:
    """Every expand step not yet applied; contract steps in order while no older process
    is alive (the first one held back holds back the contract steps after it). Returns
    the ``schema_version`` reached."""
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_steps(name TEXT PRIMARY KEY, kind TEXT NOT NULL, "
        "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
    )
    cur = await conn.execute("SELECT name FROM schema_steps")
    done = {r[0] for r in await cur.fetchall()}
    held_back = False
    for step in steps:
        if step.name in done or (held_back and step.kind == "contract"):
            continue
        if step.kind == "contract":
            blockers = await older_sessions(conn, step.min_level)
            if blockers:
                log.warning(
                    "contract step %r waits: sessions of older processes on the database: %s",
                    step.name, blockers,
                )  # fmt: skip
                held_back = True
                continue
        await conn.execute(step.sql)  # type: ignore[arg-type]
        await conn.execute(
            "INSERT INTO schema_steps(name, kind) VALUES (%s, %s)", (step.name, step.kind)
        )
        if step.kind == "contract":
            version += 1
            await conn.execute("INSERT INTO schema_version(version) VALUES (%s)", (version,))
    return version


async def older_sessions(conn: psycopg.AsyncConnection, min_level: int) -> list[str]:
    """The other sessions on this database that do not announce a schema level of
    ``min_level`` or more (``pid:application_name``): processes of an older release (its
    pool sessions announce nothing), or any other client. A process's replication role
    session (``regionsync <holder>``, postgres_coordinator) is accompanied by its pool
    sessions, which answer for it."""
    cur = await conn.execute(
        "SELECT pid, application_name FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY pid"
    )
    older = []
    for pid, app in await cur.fetchall():
        if app.startswith("regionsync "):
            continue
        level = app.removeprefix(APP_PREFIX) if app.startswith(APP_PREFIX) else ""
        if not (level.isdigit() and int(level) >= min_level):
            older.append(f"{pid}:{app}")
    return older
