"""How the PostgreSQL store writes a WriteBatch: ``write_batch``, inside the one
transaction of a ``commit`` (adapters/postgres_store.py).

Rows are written in key order, so concurrent transactions of several processes lock them
in one order (no deadlock between upserts). Registry rows and deliveries are merged with
what another process on the same database may have written meanwhile (``merge_registry``,
the deliveries' join key), and the batch is changed to say what is stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg

from crdt import CRDT
from crdt import DecodeError as CrdtDecodeError
from crdt import decode as crdt_decode

from ..core.model import _RANK, Event, WriteBatch
from ..errors import Unavailable
from .log_cut import CUT_MIN_BYTES, find_cuts
from .postgres_cluster import COMMIT_CHANNEL
from .secretbox import AtRest
from .sql_queries import (
    ATTEMPT_COLS,
    AUDIT_COLS,
    DELIVERY_COLS,
    EVENT_COLS,
    IDEMPOTENCY_COLS,
    delivery_of,
)  # fmt: skip

__all__ = ["merge_registry", "write_batch"]

Cursor = psycopg.AsyncCursor[Any]

_LOG_COLS = "origin, seq, kind, body, hlc_wall, hlc_logical, event_id, event_at"
_CHANGED = (
    "(excluded.status, excluded.attempts, excluded.next_attempt_at_ms, excluded.generation) "
    "IS DISTINCT FROM (deliveries.status, deliveries.attempts, deliveries.next_attempt_at_ms, "
    "deliveries.generation)"
)


def _join_key(table: str) -> str:
    """core.model._join_key of a row of ``table`` as an SQL row value."""
    rank = " ".join(f"WHEN '{st.value}' THEN {r}" for st, r in _RANK.items())
    t = table
    return (
        f"({t}.generation, CASE {t}.status {rank} END, {t}.status, {t}.attempts, "
        f"{t}.updated_at_ms, coalesce({t}.next_attempt_at_ms, -1), {t}.region, "
        f"{t}.created_at_ms, {t}.event_id, {t}.endpoint_id, {t}.tenant, {t}.id)"
    )


def _insert(table: str, cols: str) -> str:
    """An INSERT of one row of ``cols`` (``%s`` for each) into ``table``."""
    return f"INSERT INTO {table}({cols}) VALUES ({', '.join(['%s'] * len(cols.split(', ')))})"


Join = Callable[[CRDT, CRDT], CRDT]
Fresh = Callable[[float], None]


def _merge(old: CRDT, new: CRDT) -> CRDT:
    return old.merge(new)


class Fence:
    """Refuses the registry writes of a process whose memory may be older than a
    compaction (issue 40): a process of a PostgreSQL region that has not followed its
    region for ``bound_s`` (the database's clock, so a stalled process's own clock does
    not count) could still hold a counter entry another process has since compacted into
    the sink, and its commit would count that total twice. ``followed(at)`` records the
    database time a successful follow round began (``PostgresCoordinator``); until the
    first, and with ``bound_s`` None, nothing is refused. The failed commit makes the
    node reload its state from the store (``Node._reload``)."""

    def __init__(self) -> None:
        self.bound_s: float | None = None
        self.followed_at: float | None = None

    def followed(self, at: float) -> None:
        self.followed_at = max(self.followed_at or at, at)

    def __call__(self, db_now: float) -> None:
        if self.bound_s is None or self.followed_at is None:
            return
        behind = db_now - self.followed_at
        if behind > self.bound_s:
            raise Unavailable(
                f"this process has not read its region's records for {behind:.1f} s "
                f"(more than {self.bound_s:g} s): its state is reloaded from the store; "
                "retry", retry_after_s=1, code="not_following",
            )  # fmt: skip


async def merge_registry(
    cur: Cursor,
    states: dict[str, bytes],
    at_rest: AtRest,
    join: Join | None = None,
    fresh: Fresh | None = None,
) -> None:
    """Write registry ``states`` (key -> encoded CRDT, plaintext; sealed by ``at_rest`` as
    written) as the join with the stored rows:
    several processes write one database, and one's in-memory state may not yet hold
    another's last change to a key, so a plain overwrite could lose that change. Rows are
    inserted if absent, then locked in key order (no deadlock between processes) and
    replaced by the merge where it differs; ``states`` is set to what is stored. ``join``
    (stored row, new state) is the node's merge with retired actors pruned from what the
    row holds (runtime/pruning.py; None: the plain merge). ``fresh`` is given the
    database's clock (epoch s) once the rows are locked and raises to refuse the commit
    (PostgresStore's fence: a process whose memory may predate a compaction). Bytes
    that do not decode as CRDTs (tests' placeholders) are written as given, as before."""
    items = sorted(states.items())
    await cur.executemany(
        "INSERT INTO registry(key, state) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
        [(k, at_rest.seal_state(k, v)) for k, v in items],
    )
    await cur.execute(
        "SELECT key, state, extract(epoch FROM clock_timestamp())::float8 FROM registry "
        "WHERE key = ANY(%s) ORDER BY key FOR UPDATE",
        ([k for k, _ in items],),
    )
    rows = await cur.fetchall()
    if fresh is not None and rows:
        # the clock may be read before a lock wait: a compaction that held the lock came
        # retired_compact_s after the retirement, twice the bound, so it is still caught
        fresh(rows[-1][2])
    stored = {k: at_rest.open_state(k, bytes(v)) for k, v, _ in rows}
    updates: list[tuple[bytes, str]] = []
    for key, new in items:
        old = stored.get(key)
        if old is None or old == new:
            continue
        try:
            merged = (join or _merge)(crdt_decode(old), crdt_decode(new)).to_bytes()
        except (CrdtDecodeError, TypeError, ValueError, AttributeError):
            merged = new
        if merged != old:
            updates.append((at_rest.seal_state(key, merged), key))
        if merged != new:
            states[key] = merged  # the batch says what is stored (its commit observers)
    if updates:
        await cur.executemany("UPDATE registry SET state = %s WHERE key = %s", updates)


async def _write_events(cur: Cursor, b: WriteBatch) -> set[str]:
    """Insert ``b``'s events not stored yet; the ids of the rows inserted."""
    await cur.executemany(
        f"{_insert('events', EVENT_COLS)} ON CONFLICT DO NOTHING RETURNING id",
        [
            (e.id, e.tenant, e.event_type, e.payload, e.region, e.received_at_ms, e.owner_gen)
            for e in sorted(b.events, key=lambda e: e.id)  # stable: the first of an id kept
        ],
        returning=True,
    )
    inserted: set[str] = set()
    while True:
        inserted.update(r[0] for r in await cur.fetchall())
        if not cur.nextset():
            return inserted


def log_rows(b: WriteBatch, inserted: set[str], at_rest: AtRest) -> list[tuple[Any, ...]]:
    """``b``'s log rows: an event record cut for an events row of ``inserted`` (the
    first event of each id in ``b``, ``CUT_MIN_BYTES`` or longer) goes without its
    payload, with that event's id and the byte offset (adapters.log_cut); any other
    goes whole, sealed if it may hold a secret."""
    events: list[Event] = []
    for e in b.events:
        if e.id in inserted:
            inserted.discard(e.id)  # later events of the id were not inserted
            if len(e.payload) >= CUT_MIN_BYTES:
                events.append(e)
    rows: list[tuple[Any, ...]] = []
    cuts = find_cuts(b.records, [e.payload for e in events])
    for r, found in zip(b.records, cuts, strict=True):
        if found is None:
            body = at_rest.seal_body(r.origin, r.seq, r.body)
            rows.append((r.origin, r.seq, r.kind, body, *r.hlc, None, None))
        else:
            i, cut, rest = found
            rows.append((r.origin, r.seq, r.kind, rest, *r.hlc, events[i].id, cut))
    return rows


_UPSERT_DELIVERY = (
    f"{_insert('deliveries', DELIVERY_COLS)} ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in DELIVERY_COLS.split(", ") if c != "id")
    # a write that changes the delivery (an attempt's outcome) ends any claim on it; one
    # that changes nothing (a record applied again, echoed back by a peer) leaves the
    # claim of an attempt in flight
    + f", claimed_by = CASE WHEN {_CHANGED} THEN '' ELSE deliveries.claimed_by END, "
    f"lease_until_ms = CASE WHEN {_CHANGED} THEN 0 ELSE deliveries.lease_until_ms END "
    # several processes write one row: a state read before another process recorded an
    # outcome must not undo it (core.model delivery_join's order; every local write moves
    # up in it)
    f"WHERE {_join_key('excluded')} >= {_join_key('deliveries')}"
)


async def _write_deliveries(cur: Cursor, b: WriteBatch) -> None:
    last = {d.id: d for d in b.deliveries}  # a later one of an id wins, as in SQLite
    await cur.executemany(
        _UPSERT_DELIVERY,
        [
            (d.id, d.event_id, d.endpoint_id, d.tenant, d.status.value, d.attempts,
             d.next_attempt_at_ms, d.region, d.created_at_ms, d.updated_at_ms, d.generation,
             d.owner_gen)
            for _, d in sorted(last.items())
        ],
    )  # fmt: skip
    # where another process's later state won, the batch says what is stored: its commit
    # observers (the anti-entropy tree) must see the store's rows
    await cur.execute(f"SELECT {DELIVERY_COLS} FROM deliveries WHERE id = ANY(%s)", (list(last),))
    stored = {r[0]: delivery_of(r) for r in await cur.fetchall()}
    if any(stored.get(d.id, d) != d for d in b.deliveries):
        b.deliveries[:] = [stored.get(d.id, d) for d in b.deliveries]


async def write_batch(
    cur: Cursor, b: WriteBatch, at_rest: AtRest, join: Join | None = None,
    fresh: Fresh | None = None,
) -> None:  # fmt: skip
    """Write ``b`` through ``cur`` (in a transaction); values sealed at rest by
    ``at_rest``; registry rows joined by ``join`` and fenced by ``fresh``
    (``merge_registry``)."""
    if b.registry:
        await merge_registry(cur, b.registry, at_rest, join, fresh)
    inserted = await _write_events(cur, b) if b.events else set()
    if b.records:
        await cur.executemany(
            f"{_insert('log', _LOG_COLS)} ON CONFLICT DO NOTHING", log_rows(b, inserted, at_rest)
        )
    if b.version_vector:
        await cur.executemany(
            "INSERT INTO version_vector(origin, seq) VALUES (%s, %s) ON CONFLICT "
            "(origin) DO UPDATE SET seq = greatest(version_vector.seq, excluded.seq)",
            sorted(b.version_vector.items()),
        )
    if b.deliveries:
        await _write_deliveries(cur, b)
    if b.attempts:
        await cur.executemany(
            f"{_insert('attempts', ATTEMPT_COLS)} ON CONFLICT DO NOTHING",
            [
                (a.delivery_id, a.n, a.at_ms, a.region, a.status_code, a.latency_ms, a.error,
                 a.response_excerpt, a.endpoint_id, a.generation, a.response_headers,
                 a.owner_gen, a.request_headers)
                for a in b.attempts
            ],
        )  # fmt: skip
    if b.audit:
        await cur.executemany(
            f"{_insert('audit', AUDIT_COLS)} ON CONFLICT DO NOTHING",
            [
                (a.origin, a.seq, a.hlc_wall_ms, a.hlc_logical, a.who, a.op, a.object,
                 a.tenant, a.detail)
                for a in b.audit
            ],
        )  # fmt: skip
    if b.idempotency:
        # the earliest acceptance of a key wins, in every region alike
        await cur.executemany(
            f"{_insert('idempotency', IDEMPOTENCY_COLS)} "
            "ON CONFLICT (tenant, key) DO UPDATE SET event_id = excluded.event_id, "
            "body_sha256 = excluded.body_sha256, "
            "created_at_ms = excluded.created_at_ms, region = excluded.region "
            "WHERE (excluded.created_at_ms, excluded.event_id) "
            "< (idempotency.created_at_ms, idempotency.event_id)",
            sorted(b.idempotency),
        )
    if b.registry or b.records:
        # the other processes on this database follow the log (delivered at commit;
        # postgres_cluster.CommitListener): their poll is only a safety net
        payload = json.dumps(b.version_vector, separators=(",", ":"))
        await cur.execute(
            "SELECT pg_notify(%s, %s)", (COMMIT_CHANNEL, payload if len(payload) < 7900 else "{}")
        )
