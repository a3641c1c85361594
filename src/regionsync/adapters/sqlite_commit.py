"""How the SQLite store writes a WriteBatch: one INSERT into the ``commit_in`` view, whose
trigger fans the batch out to the tables.

Why one statement: sqlite3 releases the GIL for every step of every statement (every row
of an executemany) and the writer thread must win it back from the busy event loop each
time, up to the 5 ms switch interval: 7.5 ms per row against a busy thread, 10 us alone
(measured, bench/README.md "delivery_rate.py"). A single statement outside BEGIN is its
own transaction (autocommit), fsync'd at its end like any commit.

The INSERT carries one JSON array of rows per table (a ``Part``), its BLOB values cut from
one BLOB (``Blobs``). One array per table, not one document: SQLite parses a JSON argument
anew for every ``json_each`` over it, and one document parsed once per table cost a third
of a replicated event's commit (22 -> 17 us of CPU, bench/README.md).

Each part's fields are declared once (``Part``): the trigger reads a field by its name
and the part builds its rows from the same list, so the two cannot drift apart, and a
row of the wrong width is refused before anything is written (``Part.json``). The view
and the trigger are TEMP (made on every open, not stored in the file).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from ..core.model import Event, Record, WriteBatch
from .log_cut import CUT_MIN_BYTES, find_cuts
from .secretbox import AtRest
from .sql_queries import ATTEMPT_COLS, AUDIT_COLS, DELIVERY_COLS, EVENT_COLS, IDEMPOTENCY_COLS
from .sqlite_schema import immediate

__all__ = ["COMMIT_IN", "COMMIT_TRIGGER", "commit_args"]


class Blobs:
    """BLOB values of one commit, concatenated; ``cut`` gives a value's [start, length]
    (1-based, as ``substr`` counts)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.at = 1

    def cut(self, b: bytes) -> tuple[int, int]:
        start = self.at
        if b:
            self.parts.append(b)
            self.at += len(b)
        return start, len(b)


class Part:
    """One table's rows in a commit: the ``commit_in`` column ``name``, a JSON array of
    rows, each an array of the values of ``fields`` in order. A field is (name, source):
    source is a Python expression over ``args``, the parameters of ``row``, which builds
    one row (a function made from the sources, as fast as a hand-written tuple); a source
    starting with ``*`` is a BLOB's place in ``Blobs`` (start, length), two numbers.
    ``rows`` builds the rows of an iterable of ``args`` (one row per item)."""

    def __init__(self, name: str, args: str, fields: Sequence[tuple[str, str]]) -> None:
        self.name = name
        self.columns = ", ".join(f for f, _ in fields)
        self._at: dict[str, int] = {}
        self._blobs: set[str] = set()
        at = 0
        for field, source in fields:
            self._at[field] = at
            if source.startswith("*"):
                self._blobs.add(field)
            at += 2 if source.startswith("*") else 1
        self.width = at  # values in a row
        row = f"({', '.join(s for _, s in fields)},)"
        self.row = eval(f"lambda {args}: {row}", {})
        self.rows = eval(f"lambda items: [{row} for {args} in items]", {})

    def value(self, field: str) -> str:
        """The SQL expression of ``field`` in a ``json_each`` row over this part. An empty
        BLOB is spelled out: ``substr`` of an empty BLOB is NULL (SQLite 3.40), and NULL
        in a NOT NULL column makes an INSERT OR IGNORE drop the row."""
        at = self._at[field]
        if field not in self._blobs:
            return f"value->>{at}"
        return (f"CASE WHEN value->>{at + 1} = 0 THEN x'' "
                f"ELSE substr(NEW.blobs, value->>{at}, value->>{at + 1}) END")  # fmt: skip

    def start(self, blob: str) -> str:
        return f"value->>{self._at[blob]}"

    def length(self, blob: str) -> str:
        return f"value->>{self._at[blob] + 1}"

    def select(self) -> str:
        """Its rows, every field in ``columns`` order."""
        values = ", ".join(self.value(f) for f in self._at)
        return f"SELECT {values} FROM json_each(NEW.{self.name}) WHERE true"

    def json(self, rows: Sequence[Sequence[Any]]) -> str:
        """Compact JSON text (UTF-8 kept as is) of ``rows``. Text, not bytes: SQLite
        (3.45+) reads a BLOB argument to its JSON functions as JSONB. Raises ValueError
        for a row not ``width`` long (the trigger would read the wrong values), and
        orjson.JSONEncodeError (a TypeError) for an int beyond 64 bits or a lone surrogate
        in a str (which sqlite3 refuses to bind as well)."""
        widths = set(map(len, rows))
        if widths != {self.width}:
            raise ValueError(f"commit_in.{self.name}: rows of {sorted(widths)} values, "
                             f"not {self.width}")  # fmt: skip
        return orjson.dumps(rows).decode()


def _attrs(obj: str, cols: str, **renamed: str) -> list[tuple[str, str]]:
    """Fields ``cols`` read from attributes of ``obj`` of the same names (``renamed``:
    column -> attribute)."""
    return [(c, f"{obj}.{renamed.get(c, c)}") for c in cols.split(", ")]


def _same(cols: str) -> list[tuple[str, str]]:
    return [(c, c) for c in cols.split(", ")]


_RECORD = [("origin", "r.origin"), ("seq", "r.seq"), ("kind", "r.kind"), ("body", "*body"),
           ("hlc_wall", "r.hlc[0]"), ("hlc_logical", "r.hlc[1]")]  # fmt: skip
REGISTRY = Part("r", "key, state", [("key", "key"), ("state", "*state")])
VERSIONS = Part("v", "origin, seq", _same("origin, seq"))
EVENTS = Part("e", "e, payload", [(c, s if c != "payload" else "*payload")
                                  for c, s in _attrs("e", EVENT_COLS)])  # fmt: skip
# log records kept whole, and event records without their payload (``log_rows``): the
# body less the payload, the events row's id, the byte offset the payload was cut from,
# and the place of the batch's copy of it
LOG = Part("l", "r, body", _RECORD)
LOG_CUT = Part("c", "r, body, event_id, event_at, payload",
               [*_RECORD, *_same("event_id, event_at"), ("payload", "*payload")])  # fmt: skip
DELIVERIES = Part("d", "d", _attrs("d", DELIVERY_COLS))
ATTEMPTS = Part("a", "a", _attrs("a", ATTEMPT_COLS))
AUDIT = Part("u", "a", _attrs("a", AUDIT_COLS, hlc_wall="hlc_wall_ms"))
IDEMPOTENCY = Part("i", IDEMPOTENCY_COLS, _same(IDEMPOTENCY_COLS))
# usage counter moves added to the carry (WriteBatch.usage), unless the commit records it
CARRY = Part("g", "key, n", [("tenant", "key[0]"), ("counter", "key[1]"), ("n", "n")])
PARTS = (REGISTRY, LOG, LOG_CUT, VERSIONS, EVENTS, DELIVERIES, ATTEMPTS, AUDIT, IDEMPOTENCY,
         CARRY)  # fmt: skip
# the parts, then whether the commit records the whole carry (it is emptied), then blobs
COMMIT_IN = f"INSERT INTO commit_in VALUES ({', '.join('?' * (len(PARTS) + 2))})"

# A delivery's later state over its stored row, in place. Only the columns a state change
# moves are set (SQLite rewrites every index holding a SET column, equal value or not; a
# REPLACE rewrote all six): these are fixed at fan-out (runtime/ingest.py) and every later
# state carries them unchanged.
_DELIVERY_FIXED = {"id", "event_id", "endpoint_id", "tenant", "created_at_ms"}
_DELIVERY_UPSERT = "ON CONFLICT(id) DO UPDATE SET " + ", ".join(
    f"{c} = excluded.{c}" for c in DELIVERY_COLS.split(", ") if c not in _DELIVERY_FIXED
)
_E, _C = EVENTS.value, LOG_CUT.value
# a cut body put back together: the body before the cut, the payload, the rest
_WHOLE_AGAIN = (
    f"CAST(coalesce(substr(NEW.blobs, {LOG_CUT.start('body')}, {_C('event_at')}), x'') "
    f"|| {_C('payload')} || coalesce(substr(NEW.blobs, {LOG_CUT.start('body')} + "
    f"{_C('event_at')}, {LOG_CUT.length('body')} - {_C('event_at')}), x'') AS BLOB)"
)

# Events are counted per origin region in row_counts (adapters/sqlite_schema.py) before
# they are inserted (the ids not stored yet). An event record's body is cut only for an
# events row the commit inserts: where the row was stored before, the trigger puts the body
# back together and keeps it whole (log records are written before the events rows). Cut
# records go first: of two records of one (origin, seq) in a batch the first is kept,
# and only the first of them can be cut (log_cut.find_cuts).
COMMIT_TRIGGER = f"""
CREATE TEMP VIEW commit_in({", ".join(p.name for p in PARTS)}, recorded, blobs)
  AS SELECT {"NULL, " * len(PARTS)}NULL, NULL;
CREATE TEMP TRIGGER commit_in INSTEAD OF INSERT ON commit_in BEGIN
  INSERT INTO registry({REGISTRY.columns}) {REGISTRY.select()}
    ON CONFLICT(key) DO UPDATE SET state = excluded.state;
  INSERT INTO version_vector({VERSIONS.columns}) {VERSIONS.select()}
    ON CONFLICT(origin) DO UPDATE SET seq = max(seq, excluded.seq);
  INSERT INTO row_counts SELECT 'event', {_E("region")}, '', count(DISTINCT {_E("id")})
    FROM json_each(NEW.e) WHERE NOT EXISTS (SELECT 1 FROM events WHERE id = {_E("id")})
    GROUP BY {_E("region")} ON CONFLICT DO UPDATE SET n = n + excluded.n;
  INSERT OR IGNORE INTO log(origin, seq, kind, body, hlc_wall, hlc_logical, event_id, event_at)
    SELECT {_C("origin")}, {_C("seq")}, {_C("kind")},
      CASE WHEN e.rowid IS NULL THEN {_C("body")} ELSE {_WHOLE_AGAIN} END,
      {_C("hlc_wall")}, {_C("hlc_logical")}, CASE WHEN e.rowid IS NULL THEN {_C("event_id")} END,
      CASE WHEN e.rowid IS NULL THEN {_C("event_at")} END
    FROM json_each(NEW.c) LEFT JOIN events e ON e.id = {_C("event_id")};
  INSERT OR IGNORE INTO log({LOG.columns}) {LOG.select()};
  INSERT OR IGNORE INTO events({EVENTS.columns}) {EVENTS.select()};
  INSERT INTO deliveries({DELIVERIES.columns}) {DELIVERIES.select()} {_DELIVERY_UPSERT};
  INSERT OR IGNORE INTO attempts({ATTEMPTS.columns}) {ATTEMPTS.select()};
  INSERT OR IGNORE INTO audit({AUDIT.columns}) {AUDIT.select()};
  INSERT INTO idempotency({IDEMPOTENCY.columns}) {IDEMPOTENCY.select()}
    ON CONFLICT(tenant, key) DO UPDATE SET event_id = excluded.event_id,
    body_sha256 = excluded.body_sha256, created_at_ms = excluded.created_at_ms,
    region = excluded.region WHERE (excluded.created_at_ms, excluded.event_id)
    < (created_at_ms, event_id);
  DELETE FROM usage_carry WHERE NEW.recorded;
  INSERT INTO usage_carry({CARRY.columns}) {CARRY.select()}
    ON CONFLICT(tenant, counter) DO UPDATE SET n = n + excluded.n;
END;
"""


def log_rows(
    records: Sequence[Record],
    payloads: list[tuple[Event, tuple[int, int]]],
    seal: AtRest,
    blobs: Blobs,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The commit's ``LOG`` and ``LOG_CUT`` rows: an ``event`` record whose body holds the
    payload of one of ``payloads`` (the batch's events it may be cut for, in order, with
    their payload's place in ``blobs``) goes without it, with that event's id and the byte
    offset it was cut from (``log_cut.find_cuts``); any other body goes whole, sealed at
    rest with a key ring if it may hold a secret (the store's ``_seal_plaintext_rows``
    looks at whole bodies only)."""
    whole: list[tuple[Any, ...]] = []
    cut_rows: list[tuple[Any, ...]] = []
    cuts = find_cuts(records, [e.payload for e, _ in payloads])
    for r, found in zip(records, cuts, strict=True):
        if found is None:
            whole.append(LOG.row(r, blobs.cut(seal.seal_body(r.origin, r.seq, r.body))))
            continue
        i, at, rest = found
        e, place = payloads[i]
        cut_rows.append(LOG_CUT.row(r, blobs.cut(rest), e.id, at, place))
    return whole, cut_rows


def commit_args(batch: WriteBatch, seal: AtRest) -> tuple[list[Any], int] | None:
    """The arguments of ``COMMIT_IN`` that write ``batch`` (None if it writes nothing),
    and the bytes they hand to SQLite (blobs and JSON); values sealed at rest by
    ``seal``."""
    blobs = Blobs()
    rows: dict[Part, Sequence[Sequence[Any]]] = {}
    if batch.registry:
        rows[REGISTRY] = [REGISTRY.row(k, blobs.cut(seal.seal_state(k, v)))
                          for k, v in batch.registry.items()]  # fmt: skip
    if batch.version_vector:
        rows[VERSIONS] = list(batch.version_vector.items())
    payloads: list[tuple[Event, tuple[int, int]]] = []  # events a record may be cut for
    if batch.events:
        places = []
        ids: set[str] = set()
        for e in batch.events:
            places.append(place := blobs.cut(e.payload))
            # the first row of an id is the one inserted
            if e.id not in ids and len(e.payload) >= CUT_MIN_BYTES:
                payloads.append((e, place))
            ids.add(e.id)
        rows[EVENTS] = EVENTS.rows(zip(batch.events, places, strict=True))
    if batch.records:
        rows[LOG], rows[LOG_CUT] = log_rows(batch.records, payloads, seal, blobs)
    if batch.deliveries:
        rows[DELIVERIES] = DELIVERIES.rows(batch.deliveries)
    if batch.attempts:
        rows[ATTEMPTS] = ATTEMPTS.rows(batch.attempts)
    if batch.audit:
        rows[AUDIT] = AUDIT.rows(batch.audit)
    if batch.idempotency:
        rows[IDEMPOTENCY] = batch.idempotency  # the earliest acceptance of a key wins
    recorded = batch.usage_recorded
    if batch.usage and not recorded:
        rows[CARRY] = CARRY.rows(batch.usage.items())
    if not rows and not recorded:
        return None
    parts = [p.json(r) if (r := rows.get(p)) else None for p in PARTS]
    size = blobs.at + sum(len(p) for p in parts if p)
    return [*parts, int(recorded), b"".join(blobs.parts)], size


async def forget_origins(store: Any, origins: Iterable[str]) -> None:
    """``SqliteStore.forget_origins``: delete the version vector rows, log records and log
    floors of ``origins`` (retired actors pruned: runtime/pruning.py), in one transaction
    under the store's write lock."""
    rows = sorted(origins)
    async with store._write:
        await store._run(_forget, store.db, [(o,) for o in rows])
    store._origins.difference_update(rows)


def _forget(db: Any, rows: list[tuple[str]]) -> None:
    with immediate(db):
        for table in ("version_vector", "log", "log_floor"):
            db.executemany(f"DELETE FROM {table} WHERE origin = ?", rows)  # noqa: S608
