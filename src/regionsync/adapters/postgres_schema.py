"""Versioned schema migrations of the PostgreSQL store (adapters/postgres_store.py).

``MIGRATIONS[i]`` brings a database from version ``i`` to ``i + 1``; the version reached
is recorded in ``schema_version`` (one row per applied migration, with its time). They
run at ``PostgresStore.open`` in one transaction under an advisory lock, so several
processes starting at once on one database apply each migration exactly once. A
migration is never edited once released: a change is a new entry at the end.

Text keys compare with ``COLLATE "C"`` (bytewise, as SQLite and the memory store
compare), so id order, cursors and the event-type prefix range agree on every store.
"""

from __future__ import annotations

import psycopg

__all__ = ["MIGRATIONS", "SCHEMA_LOCK", "migrate"]

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


async def migrate(conn: psycopg.AsyncConnection, migrations: list[str] = MIGRATIONS) -> int:
    """Apply the migrations ``conn``'s database lacks, in one transaction; returns the
    schema version reached (``len(migrations)``).

    Raises RuntimeError if the database has a newer schema than this code knows (a
    downgrade is not supported), and psycopg errors if a migration fails (nothing of the
    transaction is kept)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version("
            "version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        cur = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_version")
        row = await cur.fetchone()
        have = int(row[0]) if row else 0
        if have > len(migrations):
            raise RuntimeError(
                f"database schema version {have} is newer than this code's "
                f"{len(migrations)}: run a newer regionsync"
            )
        for version in range(have + 1, len(migrations) + 1):
            await conn.execute(migrations[version - 1])  # type: ignore[arg-type]
            await conn.execute("INSERT INTO schema_version(version) VALUES (%s)", (version,))
    return len(migrations)
