"""Issues 17 and 44: a publish moves its tenant's usage counters through a registry
record that sums the moves of many commits (runtime.writepath ``_before_commit``), not a
CRDT delta per event; in between, the moves wait in the store's carry, written in their
events' transactions. The counters stay exact (shown at once by the node that moved them),
durable through a crash, and replicated as records."""

from __future__ import annotations

import asyncio
from pathlib import Path

from api_support import running_node

from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.core.model import WriteBatch
from regionsync.core.records import decode_body


async def _recorded(api, tenant: str = "acme", counter: str = "events_published") -> list[int]:
    """The values of the tenant's counter in the node's registry records, in log order."""
    records = await api.node.store.records_after({}, 10_000)
    key = f"t/{tenant}/usage/{counter}"
    moves = [decode_body(r.kind, r.body).registry.get(key) for r in records if r.kind == "registry"]
    return [m.value() for m in moves if m is not None]


async def test_concurrent_publishes_share_counter_records_and_stay_exact(
    tmp_path: Path,
) -> None:
    n = 60
    async with running_node(tmp_path) as api:
        c = api.client
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
        resps = await asyncio.gather(
            *(c.post("/v1/tenants/acme/events", json={"event_type": "t", "payload": i})
              for i in range(n))
        )  # fmt: skip
        assert [r.status_code for r in resps] == [202] * n
        # every 202 came after its group commit, which carried the counter move
        usage = (await c.get("/v1/tenants/acme")).json()["usage"]
        assert usage["events_published"] == n and usage["backlog"] == 0
        records = await api.node.store.records_after({}, 10_000)
        events = [r for r in records if r.kind == "event"]
        assert len(events) == n
        assert all(not decode_body(r.kind, r.body).registry for r in events)
        # fewer counter records than events (they were coalesced); the moves not yet
        # recorded wait in the store's carry, in the transactions of their events
        recorded = await _recorded(api)
        assert len(recorded) < n
        carry = await api.node.store.load_usage_carry()
        assert (recorded or [0])[-1] + carry.get(("acme", "events_published"), 0) == n
        # seqs of the actor are gapless and in commit order
        own = [r.seq for r in records if r.origin == api.node.writer.actor]
        assert own == list(range(1, len(own) + 1))
        # at most every ingest.usage_record_ms (1 s), a record sums them
        for _ in range(100):
            if (await _recorded(api))[-1:] == [n]:
                break
            await asyncio.sleep(0.1)
        assert (await _recorded(api))[-1] == n
        assert await api.node.store.load_usage_carry() == {}
    async with running_node(tmp_path) as api:  # restarted over the same file
        usage = (await api.client.get("/v1/tenants/acme")).json()["usage"]
        assert usage["events_published"] == n


async def test_carried_moves_survive_a_crash_and_are_recorded_after_the_restart(
    tmp_path: Path,
) -> None:
    """A node that stops without recording its carry (a crash: no ``Node.stop``) finds
    the moves in its store at the next start and records them."""
    n = 7
    async with running_node(tmp_path, ingest={"usage_record_ms": 60_000}) as api:
        c = api.client
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
        for i in range(n):
            r = await c.post("/v1/tenants/acme/events", json={"event_type": "t", "payload": i})
            assert r.status_code == 202
        assert (await c.get("/v1/tenants/acme")).json()["usage"]["events_published"] == n
        recorded = await _recorded(api)  # the first commit's moves: recorded at once
        carry = await api.node.store.load_usage_carry()
        assert carry[("acme", "events_published")] == n - recorded[-1] > 0

        async def nothing() -> None:
            return None

        api.node.writer.record_usage = nothing  # type: ignore[method-assign]  # the crash
    assert await _stored_carry(tmp_path) == carry  # what the crash left in the file
    async with running_node(tmp_path, ingest={"usage_record_ms": 60_000}) as api:
        assert (await api.client.get("/v1/tenants/acme")).json()["usage"] == {
            "events_published": n, "backlog": 0, "deliveries_succeeded": 0,
            "deliveries_failed": 0,
        }  # fmt: skip
        # the restart's first commit records the carry it found
        r = await api.client.post("/v1/tenants/acme/events", json={"event_type": "t", "payload": 0})
        assert r.status_code == 202
        recorded = await _recorded(api)
        carry = await api.node.store.load_usage_carry()
        assert recorded[-1] >= n
        assert recorded[-1] + carry.get(("acme", "events_published"), 0) == n + 1


async def test_a_clean_stop_records_the_carry(tmp_path: Path) -> None:
    """What the previous release does not read (the carry table) is empty after a clean
    stop, so a rollback counts every move."""
    async with running_node(tmp_path, ingest={"usage_record_ms": 60_000}) as api:
        c = api.client
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
        for i in range(3):
            r = await c.post("/v1/tenants/acme/events", json={"event_type": "t", "payload": i})
            assert r.status_code == 202
        assert await api.node.store.load_usage_carry()
    assert await _stored_carry(tmp_path) == {}
    store = SqliteStore(tmp_path / "us-east-1.db")
    await store.open("us-east-1", new_incarnation=1)
    try:
        last = [r for r in await store.records_after({}, 1000) if r.kind == "registry"][-1]
        reg = decode_body("registry", last.body).registry
        assert reg["t/acme/usage/events_published"].value() == 3
    finally:
        await store.close()


async def _stored_carry(data_dir: Path) -> dict[tuple[str, str], int]:
    store = SqliteStore(data_dir / "us-east-1.db")
    await store.open("us-east-1", new_incarnation=1)
    try:
        carry = await store.load_usage_carry()
        assert carry is not None
        return carry
    finally:
        await store.close()


async def test_moves_of_a_commit_under_a_held_write_lock_wait_for_the_next_commit(
    tmp_path: Path,
) -> None:
    async with running_node(tmp_path, ingest={"usage_record_ms": 0}) as api:
        c, writer = api.client, api.node.writer
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201

        async def published() -> int:
            return (await c.get("/v1/tenants/acme")).json()["usage"]["events_published"]

        async with writer.lock:  # a holder may be between taking a seq and submitting
            await writer.submit(WriteBatch(usage={("acme", "events_published"): 5}))
        assert await published() == 5  # committed, its moves carried (and shown)
        assert not await _recorded(api)  # not recorded
        await writer.submit(WriteBatch(usage={("acme", "events_published"): 1}))
        assert await published() == 6
        own = [r for r in await api.node.store.records_after({}, 100) if r.kind == "registry"]
        assert (
            decode_body("registry", own[-1].body).registry["t/acme/usage/events_published"].value()
            == 6
        )
