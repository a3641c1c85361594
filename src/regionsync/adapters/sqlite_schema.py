"""The SQLite store's schema: its tables, the row counts its commits keep, and what
``upgrade`` does to a file written by an earlier release when the store opens it (columns
added, the log rebuilt as a rowid table). The ``commit_in`` view a commit writes through
is not stored: adapters/sqlite_commit.py creates it on every open (TEMP).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["LOG_COLUMNS", "SCHEMA", "immediate", "upgrade"]

# A rowid table, not WITHOUT ROWID: a record carries its event's payload (2-3 KB for a
# GitHub webhook), and a WITHOUT ROWID table keeps whole rows in its b-tree, which SQLite
# advises only for rows under about 1/20 of a page ("The WITHOUT ROWID Optimization",
# section 4). With a 2,099-byte GitHub payload: 24.7 us of CPU per inserted row against
# 8.7 us as a rowid table (bench/log_rows.py, issue 17).
#
# An event record's body is kept without its event's payload (adapters.log_cut):
# ``event_id`` names the events row, ``event_at`` the byte offset it was cut from (both NULL
# for a body kept whole), and ``records_after`` puts it back. Whether the commit inserts
# the events row is known inside the statement only: the commit's trigger
# (adapters/sqlite_commit.py) puts a body cut for an id already stored back together.
LOG_COLUMNS = """
  origin TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL,
  hlc_wall INTEGER NOT NULL, hlc_logical INTEGER NOT NULL, event_id TEXT, event_at INTEGER,
  PRIMARY KEY(origin, seq)
"""

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS registry(key TEXT PRIMARY KEY, state BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS log({LOG_COLUMNS});
CREATE TABLE IF NOT EXISTS version_vector(origin TEXT PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS log_floor(origin TEXT PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS events(
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, event_type TEXT NOT NULL, payload BLOB NOT NULL,
  region TEXT NOT NULL, received_at_ms INTEGER NOT NULL, owner_gen TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS deliveries(
  id TEXT PRIMARY KEY, event_id TEXT NOT NULL, endpoint_id TEXT NOT NULL,
  tenant TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL,
  next_attempt_at_ms INTEGER, region TEXT NOT NULL, created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL, generation INTEGER NOT NULL DEFAULT 0,
  owner_gen TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries(region, status, next_attempt_at_ms);
CREATE INDEX IF NOT EXISTS deliveries_due_endpoint
  ON deliveries(region, status, endpoint_id, next_attempt_at_ms, id);
CREATE INDEX IF NOT EXISTS deliveries_endpoint ON deliveries(endpoint_id, id);
CREATE INDEX IF NOT EXISTS deliveries_event ON deliveries(event_id);
CREATE INDEX IF NOT EXISTS deliveries_tenant ON deliveries(tenant, created_at_ms, id);
CREATE INDEX IF NOT EXISTS events_tenant ON events(tenant, received_at_ms, id);
CREATE INDEX IF NOT EXISTS events_age ON events(received_at_ms);
CREATE TABLE IF NOT EXISTS attempts(
  delivery_id TEXT NOT NULL, n INTEGER NOT NULL, at_ms INTEGER NOT NULL, region TEXT NOT NULL,
  status_code INTEGER, latency_ms REAL NOT NULL, error TEXT, response_excerpt TEXT NOT NULL,
  endpoint_id TEXT NOT NULL DEFAULT '', generation INTEGER NOT NULL DEFAULT 0,
  response_headers TEXT NOT NULL DEFAULT '', owner_gen TEXT NOT NULL DEFAULT '',
  request_headers TEXT NOT NULL DEFAULT '', PRIMARY KEY(delivery_id, region, generation, n)
);
CREATE INDEX IF NOT EXISTS attempts_endpoint ON attempts(endpoint_id, at_ms);
CREATE INDEX IF NOT EXISTS attempts_age ON attempts(at_ms);
CREATE TABLE IF NOT EXISTS audit(
  origin TEXT NOT NULL, seq INTEGER NOT NULL, hlc_wall INTEGER NOT NULL,
  hlc_logical INTEGER NOT NULL, who TEXT NOT NULL, op TEXT NOT NULL, object TEXT NOT NULL,
  tenant TEXT NOT NULL, detail TEXT NOT NULL, PRIMARY KEY(origin, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS audit_time ON audit(hlc_wall, hlc_logical, origin, seq);
CREATE INDEX IF NOT EXISTS audit_tenant ON audit(tenant, hlc_wall, hlc_logical, origin, seq);
CREATE TABLE IF NOT EXISTS idempotency(
  tenant TEXT NOT NULL, key TEXT NOT NULL, event_id TEXT NOT NULL, body_sha256 TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL, region TEXT NOT NULL, PRIMARY KEY(tenant, key)
);
CREATE INDEX IF NOT EXISTS idempotency_event ON idempotency(event_id);
CREATE INDEX IF NOT EXISTS idempotency_age ON idempotency(created_at_ms);
-- usage counter moves committed and not yet in a registry record (runtime/writepath.py)
CREATE TABLE IF NOT EXISTS usage_carry(
  tenant TEXT NOT NULL, counter TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY(tenant, counter)
) WITHOUT ROWID;
"""

# row counts kept by commits (counts() reads a few rows, never scans events or
# deliveries; issue 17): kind 'event' by origin region (status ''), added by the commit's
# trigger once per region and batch (a trigger per row doubled the cost of an event insert), kind
# 'delivery' by owner region and status, kept by triggers (a delivery write is an upsert:
# a new row fires the INSERT trigger, a changed one the UPDATE trigger). Created and
# filled once per store.
ROW_COUNTS = """
CREATE TABLE row_counts(
  kind TEXT NOT NULL, region TEXT NOT NULL, status TEXT NOT NULL, n INTEGER NOT NULL,
  PRIMARY KEY(kind, region, status)
) WITHOUT ROWID;
CREATE TRIGGER row_counts_event_out AFTER DELETE ON events BEGIN
  UPDATE row_counts SET n = n - 1
    WHERE kind = 'event' AND region = OLD.region AND status = '';
END;
CREATE TRIGGER row_counts_delivery_in AFTER INSERT ON deliveries BEGIN
  INSERT INTO row_counts VALUES ('delivery', NEW.region, NEW.status, 1)
    ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER row_counts_delivery_moved AFTER UPDATE OF region, status ON deliveries
  WHEN OLD.region IS NOT NEW.region OR OLD.status IS NOT NEW.status BEGIN
  UPDATE row_counts SET n = n - 1
    WHERE kind = 'delivery' AND region = OLD.region AND status = OLD.status;
  INSERT INTO row_counts VALUES ('delivery', NEW.region, NEW.status, 1)
    ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER row_counts_delivery_out AFTER DELETE ON deliveries BEGIN
  UPDATE row_counts SET n = n - 1
    WHERE kind = 'delivery' AND region = OLD.region AND status = OLD.status;
END;
INSERT INTO row_counts SELECT 'event', region, '', count(*) FROM events GROUP BY region;
INSERT INTO row_counts
  SELECT 'delivery', region, status, count(*) FROM deliveries GROUP BY region, status;
"""

# columns added after the first schema: a store created before them gets them on open
ADDED_COLUMNS = [
    *((t, "owner_gen TEXT NOT NULL DEFAULT ''") for t in ("events", "deliveries", "attempts")),
    ("attempts", "request_headers TEXT NOT NULL DEFAULT ''"),  # issue 15
    ("log", "event_id TEXT"),  # issue 17: payloads cut from event records (LOG_COLUMNS)
    ("log", "event_at INTEGER"),
]


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction on ``db`` (autocommit mode): BEGIN IMMEDIATE, COMMIT when the
    block ends, ROLLBACK if it raises (the exception goes on)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def log_as_rowid_table(db: sqlite3.Connection) -> None:
    """Rebuild the log of a file written before it became a rowid table (``LOG_COLUMNS``)
    as one: its records copied, in one transaction (about 8 s per 100,000 records of
    2 KB, once). No-op once it is one."""
    (sql,) = db.execute("SELECT sql FROM sqlite_schema WHERE name = 'log'").fetchone()
    if "WITHOUT ROWID" not in sql.upper():
        return
    with immediate(db):
        db.execute(f"CREATE TABLE log_rowid({LOG_COLUMNS})")
        db.execute(
            "INSERT INTO log_rowid(origin, seq, kind, body, hlc_wall, hlc_logical) "
            "SELECT origin, seq, kind, body, hlc_wall, hlc_logical FROM log ORDER BY origin, seq"
        )
        db.execute("DROP TABLE log")
        db.execute("ALTER TABLE log_rowid RENAME TO log")


def upgrade(db: sqlite3.Connection) -> None:
    """Create the schema in a new file, or bring one an earlier release wrote up to it."""
    db.executescript(SCHEMA)
    log_as_rowid_table(db)
    for table, column in ADDED_COLUMNS:
        have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        if column.split()[0] not in have:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
    if db.execute("SELECT 1 FROM sqlite_schema WHERE name = 'row_counts'").fetchone() is None:
        db.executescript(f"BEGIN IMMEDIATE;{ROW_COUNTS}COMMIT;")  # one pass, then kept
    # counted REPLACEs before deliveries were upserted; with an upsert it counts twice
    db.execute("DROP TRIGGER IF EXISTS row_counts_delivery_replaced")
    db.execute("DROP TRIGGER IF EXISTS row_counts_event_in")  # counted by commit_in now
