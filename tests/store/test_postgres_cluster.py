"""Several processes on one PostgreSQL database (issue 16): one holder of the replication
role (advisory lock, taken over when the holder dies, also by SIGKILL of a real process)
and notifications of registry commits."""

from __future__ import annotations

import asyncio
import signal
import sys
import time

import psycopg
import pytest

from regionsync.adapters.postgres_cluster import (
    COMMIT_CHANNEL,
    AdvisoryLeader,
    CommitListener,
    lock_key,
)
from regionsync.adapters.postgres_store import PostgresStore
from regionsync.core.model import Delivery, DeliveryStatus, Event, Record, WriteBatch

REGION = "eu-central-1"
ROLE = f"{REGION}/replication"


async def _until(check, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.02)
    pytest.fail("condition not reached before the deadline")


def test_lock_keys_are_stable_signed_64_bit() -> None:
    assert lock_key(ROLE) == lock_key(ROLE) != lock_key("us-east-1/replication")
    assert -(2**63) <= lock_key(ROLE) < 2**63


async def test_one_holder_and_takeover_when_it_stops(pg_url: str) -> None:
    a, b = AdvisoryLeader(pg_url, ROLE), AdvisoryLeader(pg_url, ROLE)
    other_region = AdvisoryLeader(pg_url, "us-east-1/replication")
    try:
        assert await a.poll() and await a.poll()
        assert not await b.poll()
        assert await other_region.poll()  # one holder per region, not per database
        await a.close()  # unlocks before it ends the session: free at once
        assert await b.poll()
        assert not await a.poll()
    finally:
        for x in (a, b, other_region):
            await x.close()


async def test_a_holder_that_lost_its_session_says_so_and_another_takes_over(
    pg_url: str,
) -> None:
    a, b = AdvisoryLeader(pg_url, ROLE), AdvisoryLeader(pg_url, ROLE)
    try:
        assert await a.poll()
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                "AND granted AND database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        assert not await a.poll()  # confirmed nothing: stops acting as holder at once
        await _until(b.poll)
    finally:
        await a.close()
        await b.close()


HOLDER = """
import asyncio, sys
from regionsync.adapters.postgres_cluster import AdvisoryLeader
async def main():
    leader = AdvisoryLeader(sys.argv[1], sys.argv[2])
    assert await leader.poll()
    print("held", flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


async def test_sigkill_of_the_holder_process_frees_the_role(pg_url: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, pg_url, ROLE, stdout=asyncio.subprocess.PIPE
    )
    b = AdvisoryLeader(pg_url, ROLE)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line == b"held\n"
        assert not await b.poll()
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        await _until(b.poll)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await b.close()


async def test_registry_commits_are_notified_to_other_processes(pg_url: str) -> None:
    a, b = PostgresStore(pg_url), PostgresStore(pg_url)
    await a.open(REGION, 1)
    await b.open(REGION, 1)
    listener = CommitListener(pg_url)
    await listener.start()
    it = aiter(listener)
    try:
        await a.commit(WriteBatch(events=[Event("evt_1", "acme", "t", b"{}", REGION, 1)],
                                  version_vector={"eu-central-1:1": 1}))  # fmt: skip
        broken = Delivery("d", "e", "ep", "acme", DeliveryStatus.PENDING, 0, 1, REGION, 1, 1)
        object.__setattr__(broken, "status", None)
        with pytest.raises(AttributeError):  # rolled back: never notified
            await a.commit(WriteBatch(registry={"tenants": b"x"}, deliveries=[broken],
                                      version_vector={"eu-central-1:1": 2}))  # fmt: skip
        await b.commit(WriteBatch(registry={"tenants": b"y"}, version_vector={"b:1": 3}))
        assert await asyncio.wait_for(anext(it), 10) == {"b:1": 3}
        await a.commit(WriteBatch(registry={"tenants": b"z"}, version_vector={"eu-central-1:1": 4}))
        assert await asyncio.wait_for(anext(it), 10) == {"eu-central-1:1": 4}
        # a log record without a registry change too (a peer's event the replication
        # holder applied): the followers' poll is only a safety net (runtime/cohort.py)
        rec = Record("eu-central-1:1", 5, "event", b"\x80", (5, 0))
        await a.commit(WriteBatch(records=[rec], version_vector={"eu-central-1:1": 5}))
        assert await asyncio.wait_for(anext(it), 10) == {"eu-central-1:1": 5}
        # anything else on the channel is "unknown: read" ({}), and the listener goes on
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            for junk in ('{"a":"x"}', '{"a":null}', "[1]", "not json"):
                await conn.execute("SELECT pg_notify(%s, %s)", (COMMIT_CHANNEL, junk))
        for _ in range(4):
            assert await asyncio.wait_for(anext(it), 10) == {}
        await b.commit(WriteBatch(registry={"tenants": b"w"}, version_vector={"b:1": 6}))
        assert await asyncio.wait_for(anext(it), 10) == {"b:1": 6}
    finally:
        await listener.close()
        await a.close()
        await b.close()
