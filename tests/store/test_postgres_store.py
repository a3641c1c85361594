"""PostgreSQL store beyond the shared contract: atomic commits, reopen by another store
object (another process), versioned migrations, concurrent first opens, durability
setting. Runs on the throwaway server of tests/pgserver.py (never skipped)."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from pgserver import PgServer

from crdt import RETIRED, ORSet, PNCounter, decode
from regionsync.adapters.postgres_coordinator import PostgresCoordinator
from regionsync.adapters.postgres_schema import MIGRATIONS, migrate
from regionsync.adapters.postgres_store import PostgresStore
from regionsync.core.model import (
    Attempt,
    Delivery,
    DeliveryStatus,
    Event,
    EventQuery,
    Record,
    WriteBatch,
)
from regionsync.errors import Unavailable

REGION = "eu-central-1"


async def test_commit_is_atomic(pg_url: str) -> None:
    s = PostgresStore(pg_url)
    await s.open(REGION, 1)
    broken = Delivery("dlv_1", "evt_1", "ep_1", "acme", DeliveryStatus.PENDING, 0, 1, REGION, 1, 1)
    object.__setattr__(broken, "status", None)  # fails after the first inserts ran
    bad = WriteBatch(
        registry={"tenants": b"x"},
        events=[Event("evt_1", "acme", "a", b"{}", REGION, 1)],
        deliveries=[broken],
    )
    try:
        with pytest.raises(AttributeError):
            await s.commit(bad)
        assert await s.load_registry() == {}
        assert await s.get_event("evt_1") is None
        await s.commit(WriteBatch(registry={"tenants": b"y"}))  # usable afterwards
        assert await s.load_registry() == {"tenants": b"y"}
    finally:
        await s.close()


def statements_of(s: PostgresStore) -> list[str]:
    """The statements ``s`` sends from now on."""
    calls: list[str] = []
    real = s._fetch

    async def counted(sql, args=()):
        calls.append(sql)
        return await real(sql, args)

    s._fetch = counted  # type: ignore[method-assign]
    return calls


async def test_records_of_reads_every_origin_in_one_round_trip(pg_url: str) -> None:
    # a link's read asks for the records of every origin: one query, whatever the number
    # of origins (issue 44), with the contract's order (origins sorted, seq order in
    # each) and limit over all of them
    s = PostgresStore(pg_url)
    await s.open(REGION, 1)
    origins = ["B:2", "a:1", "a:10", "z:3"]  # upper case and digits: Python's order
    recs = [Record(o, n, "registry", o.encode(), (n, 0)) for o in origins for n in (1, 2, 3)]
    await s.commit(WriteBatch(records=recs))
    calls = statements_of(s)
    try:
        got = await s.records_of({"z:3": 1, "a:10": 0, "B:2": 2, "a:1": 3}, 100)
        assert [(r.origin, r.seq) for r in got] == [
            ("B:2", 3), ("a:10", 1), ("a:10", 2), ("a:10", 3), ("z:3", 2), ("z:3", 3)
        ]  # fmt: skip
        assert all(r.body == r.origin.encode() for r in got)
        assert len(calls) == 1
        got = await s.records_of({"z:3": 0, "a:10": 1, "B:2": 0}, 4)
        assert [(r.origin, r.seq) for r in got] == [("B:2", 1), ("B:2", 2), ("B:2", 3), ("a:10", 2)]
        assert await s.records_of({}, 10) == [] and len(calls) == 2
    finally:
        await s.close()


async def test_a_follow_round_reads_the_version_vector_and_records_in_one_statement(
    pg_url: str,
) -> None:
    """``PostgresCoordinator.follow_read``: the stored version vector, the database's
    clock (kept for the fence) and the records of every origin but the reader's own past
    what it holds (an origin it never heard of from seq 1), in one statement (issue 44:
    one round trip a round, not two), in the order and limit of ``records_of``."""
    s = PostgresStore(pg_url)
    await s.open(REGION, 1)
    coordinator = PostgresCoordinator(s, REGION, "p9")
    origins = ["B:2", "a:1", "a:10", "z:3", "p:9"]  # p:9 reads
    recs = [Record(o, n, "registry", o.encode(), (n, 0)) for o in origins for n in (1, 2, 3)]
    await s.commit(WriteBatch(records=recs, version_vector=dict.fromkeys(origins, 3)))
    calls = statements_of(s)
    try:
        before = time.time()
        have = {"z:3": 1, "a:10": 0, "B:2": 2, "a:1": 3}
        vv, got = await coordinator.follow_read(have, "p:9", 100)
        assert vv == dict.fromkeys(origins, 3)
        assert coordinator._read_at is not None and abs(coordinator._read_at - before) < 5
        assert [(r.origin, r.seq) for r in got] == [
            ("B:2", 3), ("a:10", 1), ("a:10", 2), ("a:10", 3), ("z:3", 2), ("z:3", 3)
        ]  # fmt: skip
        assert all(r.body == r.origin.encode() and r.hlc == (r.seq, 0) for r in got)
        assert len(calls) == 1
        _, got = await coordinator.follow_read({"a:10": 1}, "p:9", 4)  # the rest from 1
        assert [(r.origin, r.seq) for r in got] == [("B:2", 1), ("B:2", 2), ("B:2", 3), ("a:1", 1)]
        _, got = await coordinator.follow_read(dict.fromkeys(origins, 3), "p:9", 10)
        assert got == [] and len(calls) == 3
        # an event record stored without its payload (adapters/log_cut.py) reads whole;
        # one whose events row is gone is an error, not a record without its payload
        payload = b'{"p":"' + b"x" * 400 + b'"}'
        body = b"<" + payload + b">"
        event = Event("evt_1", "acme", "a", payload, REGION, 1)
        cut = Record("B:2", 4, "event", body, (4, 0))
        await s.commit(WriteBatch(records=[cut], events=[event], version_vector={"B:2": 4}))
        _, got = await coordinator.follow_read(dict.fromkeys(origins, 3), "p:9", 10)
        assert [(r.seq, r.body) for r in got] == [(4, body)]
        await s._write("DELETE FROM events WHERE id = %s", ("evt_1",))
        with pytest.raises(psycopg.DataError):
            await coordinator.follow_read(dict.fromkeys(origins, 3), "p:9", 10)
    finally:
        await coordinator.close()
        await s.close()


async def test_processes_on_one_database_get_actors_of_their_own(pg_url: str) -> None:
    # several processes may open one database (issue 16); each allocates an incarnation
    # never used before on it, above the single-process one in meta
    stores = [PostgresStore(pg_url) for _ in range(3)]
    infos = [await s.open(REGION, 1000) for s in stores]
    try:
        assert {i.incarnation for i in infos} == {1000}
        got = await asyncio.gather(
            *(s.allocate_actor(500, f"p{n}") for n, s in enumerate(stores * 2))
        )
        assert len(set(got)) == 6 and min(got) > 1000
        later = await stores[0].allocate_actor(500, "p9")
        assert later > max(got)
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            cur = await conn.execute("SELECT count(*) FROM actors")
            assert (await cur.fetchone()) == (7,)
    finally:
        for s in stores:
            await s.close()


async def test_registry_rows_are_merged_not_overwritten(pg_url: str) -> None:
    # two processes each write the state they hold of one key; neither has the other's
    # change yet: the stored row is the join, so no change is lost
    a, b = PostgresStore(pg_url), PostgresStore(pg_url)
    await a.open(REGION, 1)
    await b.open(REGION, 1)
    try:
        from_a = ORSet.empty().add("acme", actor="r:1")
        from_b = ORSet.empty().add("globex", actor="r:2")
        await a.commit(WriteBatch(registry={"tenants": from_a.to_bytes()}))
        batch = WriteBatch(registry={"tenants": from_b.to_bytes()})
        await b.commit(batch)
        stored = decode((await a.load_registry())["tenants"])
        assert stored == from_a.merge(from_b)
        assert decode(batch.registry["tenants"]) == stored  # what is stored (observers)
        assert stored.value() == frozenset({"acme", "globex"})
        # concurrent commits of many keys in opposite orders: merged, no deadlock left
        keys = [f"t/t{i}/endpoints" for i in range(20)]
        await asyncio.gather(
            a.commit(WriteBatch(registry={k: from_a.to_bytes() for k in keys})),
            b.commit(WriteBatch(registry={k: from_b.to_bytes() for k in reversed(keys)})),
        )
        rows = await b.load_registry()
        assert all(decode(rows[k]) == from_a.merge(from_b) for k in keys)
    finally:
        await a.close()
        await b.close()


async def test_a_process_blind_to_a_retirement_joins_a_pruned_counter_row_once(
    pg_url: str,
) -> None:
    """Issue 40's race on a real database: process ``a`` pruned the retired actor ``r:9``
    from a usage counter row (its totals under ``~retired:r:9``); process ``b`` has not
    read the retirement (its join is the plain kernel merge) and commits its stale copy
    plus one increment of its own. The row counts r:9's total once: 3 + 1, not 7 (as a
    row collapsed into ``~retired:0`` counted it on 917426d)."""
    a, b = PostgresStore(pg_url), PostgresStore(pg_url)
    await a.open(REGION, 1)
    await b.open(REGION, 1)
    try:
        key = "t/acme/usage/events_published"
        stale = PNCounter({"r:9": 3})
        pruned = PNCounter({RETIRED + "r:9": 3})  # stale.retire("r:9")
        await a.commit(WriteBatch(registry={key: pruned.to_bytes()}))
        mine = stale.merge(stale.increment("r:2"))
        await b.commit(WriteBatch(registry={key: mine.to_bytes()}))
        stored = decode((await a.load_registry())[key])
        assert stored.value() == 4 and stored.p == {"r:2": 1, RETIRED + "r:9": 3}
    finally:
        await a.close()
        await b.close()


async def test_rows_of_previous_release_processes_go_once_their_actor_is_pruned(
    pg_url: str,
) -> None:
    """Issue 40: a process of the previous release records no incarnation in
    ``processes``; once an actor its holder ran is pruned and no session of that holder
    is alive, its row goes too. A holder with a live role session keeps its row, and so
    does one that ran no pruned actor."""
    s = PostgresStore(pg_url)
    await s.open(REGION, 1)
    live = await psycopg.AsyncConnection.connect(
        pg_url, autocommit=True, application_name="regionsync old-live"
    )  # the role session of a previous-release process still running
    try:
        old = {"old-gone": None, "old-live": None, "old-other": None}
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            for holder in old:
                await conn.execute(
                    "INSERT INTO processes(holder, release, level, backend_pid) "
                    "VALUES (%s, 'previous', 11, 1)",
                    (holder,),
                )
            for inc, holder in ((7, "old-gone"), (8, "old-live"), (9, "old-other")):
                await conn.execute(
                    "INSERT INTO actors(incarnation, holder, started_at_ms) VALUES (%s, %s, 1)",
                    (inc, holder),
                )
            await s.forget_origins([f"{REGION}:7", f"{REGION}:8"])
            cur = await conn.execute("SELECT holder FROM processes ORDER BY holder")
            left = [h for (h,) in await cur.fetchall()]
        assert "old-gone" not in left
        assert {"old-live", "old-other"} <= set(left)
    finally:
        await live.close()
        await s.close()


async def test_a_process_that_stopped_following_writes_no_registry_state(pg_url: str) -> None:
    """Issue 40: a process that has not followed its region for longer than the fence's
    bound (half of retired_compact_s in production) may hold a counter entry that
    another process compacted into the sink meanwhile; its registry writes are refused
    (503 not_following) until a follow round succeeds. The bound is judged by the
    database's clock, here a follow round backdated by 100 s against a bound of 50 s."""
    s = PostgresStore(pg_url)
    await s.open(REGION, 1)
    coordinator = PostgresCoordinator(s, REGION, "p1", fence_s=50.0)
    try:
        await coordinator.follow_read({}, "", 10)
        coordinator.followed()  # a follow round that read every record
        assert s.fence.followed_at is not None
        await s.commit(WriteBatch(registry={"k": b"fresh"}))
        s.fence.followed_at -= 100.0  # then the process stalled
        with pytest.raises(Unavailable) as refused:
            await s.commit(WriteBatch(registry={"k": b"stale"}, events=[
                Event("evt_1", "acme", "a", b"{}", REGION, 1)]))  # fmt: skip
        assert refused.value.code == "not_following" and refused.value.status == 503
        assert (await s.load_registry())["k"] == b"fresh"  # nothing of the batch written
        assert await s.get_event("evt_1") is None
        await s.commit(WriteBatch(events=[Event("evt_2", "acme", "a", b"{}", REGION, 1)]))
        await coordinator.follow_read({}, "", 10)  # the next round
        coordinator.followed()
        await s.commit(WriteBatch(registry={"k": b"later"}))
        assert (await s.load_registry())["k"] == b"later"
    finally:
        await coordinator.close()
        await s.close()


async def test_another_store_object_sees_commits_and_identity(pg_url: str) -> None:
    a, b = PostgresStore(pg_url), PostgresStore(pg_url)
    info_a = await a.open(REGION, 5)
    info_b = await b.open(REGION, 6)
    assert info_a.fresh and not info_b.fresh and info_b.incarnation == 5
    try:
        await a.commit(WriteBatch(events=[Event("evt_1", "acme", "a", b'{"x":1.10}', REGION, 1)]))
        got = await b.get_event("evt_1")
        assert got is not None and got.payload == b'{"x":1.10}'
        with pytest.raises(ValueError, match="belongs to region"):
            await PostgresStore(pg_url).open("us-east-1", 1)
    finally:
        await a.close()
        await b.close()


async def test_concurrent_first_opens_agree_on_one_incarnation(pg_url: str) -> None:
    stores = [PostgresStore(pg_url) for _ in range(4)]
    infos = await asyncio.gather(*(s.open(REGION, 10 + i) for i, s in enumerate(stores)))
    try:
        assert sum(i.fresh for i in infos) == 1
        assert len({i.incarnation for i in infos}) == 1
    finally:
        for s in stores:
            await s.close()


async def test_migrations_are_versioned_and_applied_once(pg_url: str) -> None:
    s = PostgresStore(pg_url)
    await s.open(REGION, 1)
    await s.close()
    await s.open(REGION, 2)  # a second open applies nothing again
    await s.close()
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT version FROM schema_version ORDER BY version")
        assert [r[0] for r in await cur.fetchall()] == list(range(1, len(MIGRATIONS) + 1))
        # a later release adds one migration: only that one runs
        later = [*MIGRATIONS, "CREATE TABLE added_later(x INTEGER)"]
        assert await migrate(conn, later) == len(later)
        assert await migrate(conn, later) == len(later)
        cur = await conn.execute("SELECT count(*) FROM schema_version")
        assert (await cur.fetchone()) == (len(later),)
        # code older than the database refuses to run on it
        with pytest.raises(RuntimeError, match="newer"):
            await migrate(conn)


async def test_attempts_of_a_version_3_database_read_back_after_migration_4(
    pg_url: str,
) -> None:
    """Migration 4 (issue 15) adds attempts.request_headers to a database that has
    attempts already: they read back with ``""``, new ones with their headers."""
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await migrate(conn, MIGRATIONS[:3]) == 3
        await conn.execute(
            "INSERT INTO attempts(delivery_id, n, at_ms, region, status_code, latency_ms, "
            "error, response_excerpt, endpoint_id) "
            "VALUES ('dlv_1', 1, 5, %s, 500, 1.5, 'http_500', 'oops', 'ep_1')",
            (REGION,),
        )
    s = PostgresStore(pg_url)
    await s.open(REGION, 1)
    try:
        old = Attempt("dlv_1", 1, 5, REGION, 500, 1.5, "http_500", "oops", "ep_1")
        assert await s.attempts_of("dlv_1") == [old]
        new = Attempt("dlv_1", 2, 6, REGION, 204, 1.0, None, "", "ep_1",
                      request_headers="webhook-id: evt_1\nwebhook-timestamp: 6")  # fmt: skip
        await s.commit(WriteBatch(attempts=[new]))
        assert await s.attempts_of("dlv_1") == [old, new]
    finally:
        await s.close()


async def test_commits_are_synchronous_whatever_the_server_default(pg_url: str) -> None:
    dbname = pg_url.rsplit("/", 1)[1]
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute(f'ALTER DATABASE "{dbname}" SET synchronous_commit = off')
    s = PostgresStore(pg_url)
    await s.open(REGION, 1)
    try:
        assert await s._fetch("SHOW synchronous_commit") == [("on",)]
    finally:
        await s.close()


async def test_a_server_restart_costs_no_failed_operation() -> None:
    server = PgServer()  # its own server: the session's is shared
    server.start()
    s = PostgresStore(server.create_database("r"), pool_min=3, pool_max=3)
    try:
        await s.open(REGION, 1)
        # three pooled connections in use at once, then idle: all go stale together
        await asyncio.gather(*(s._fetch("SELECT pg_sleep(0.05)") for _ in range(3)))
        server.restart()
        for i in range(5):
            await s.commit(WriteBatch(events=[Event(f"evt_{i}", "acme", "a", b"{}", REGION, i)]))
            assert [e.id for e in await s.list_events(EventQuery("acme"), None, 1)] == [f"evt_{i}"]
        await asyncio.gather(*(s.get_event("evt_1") for _ in range(3)))
    finally:
        await s.close()
        server.stop()


async def test_an_unreachable_database_fails_open_cleanly(pg_server: PgServer) -> None:
    s = PostgresStore(pg_server.url("no_such_database"))
    s._open_timeout_s = 1.0
    with pytest.raises(psycopg.OperationalError):  # psycopg_pool.PoolTimeout is one
        await s.open(REGION, 1)
    with pytest.raises(RuntimeError, match="not open"):
        await s.load_registry()
