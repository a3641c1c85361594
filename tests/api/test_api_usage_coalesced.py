"""Issue 17: a publish moves its tenant's usage counters through one registry record per
group commit (runtime.writepath ``_before_commit``), not a CRDT delta per event; the
counters stay exact, durable with their events, and replicated as records."""

from __future__ import annotations

import asyncio
from pathlib import Path

from api_support import running_node

from regionsync.core.model import WriteBatch
from regionsync.core.records import decode_body


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
        moves = [
            decode_body(r.kind, r.body).registry.get("t/acme/usage/events_published")
            for r in records
            if r.kind == "registry"
        ]
        moves = [m for m in moves if m is not None]
        # fewer counter records than events (they were coalesced), the last one holds n
        assert 1 <= len(moves) < n and moves[-1].value() == n
        # seqs of the actor are gapless and in commit order
        own = [r.seq for r in records if r.origin == api.node.writer.actor]
        assert own == list(range(1, len(own) + 1))
    async with running_node(tmp_path) as api:  # restarted over the same file
        usage = (await api.client.get("/v1/tenants/acme")).json()["usage"]
        assert usage["events_published"] == n


async def test_moves_of_a_commit_under_a_held_write_lock_wait_for_the_next_commit(
    tmp_path: Path,
) -> None:
    async with running_node(tmp_path) as api:
        c, writer = api.client, api.node.writer
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201

        async def published() -> int:
            return (await c.get("/v1/tenants/acme")).json()["usage"]["events_published"]

        async with writer.lock:  # a holder may be between taking a seq and submitting
            await writer.submit(WriteBatch(usage={("acme", "events_published"): 5}))
        assert await published() == 0  # committed, its moves carried, not recorded
        await writer.submit(WriteBatch(usage={("acme", "events_published"): 1}))
        assert await published() == 6
        own = [r for r in await api.node.store.records_after({}, 100) if r.kind == "registry"]
        assert (
            decode_body("registry", own[-1].body).registry["t/acme/usage/events_published"].value()
            == 6
        )
