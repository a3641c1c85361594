"""The outbox relay (``regionsync outbox-relay``) over the tests' real PostgreSQL: a
relay process SIGKILLed mid-run and restarted delivers every row, none under two ids,
each tenant's rows in order; and, with a scripted publisher, a crash between a publish
and its mark republishes the row with the same id; refusals and waits."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest
from api_support import Api, eventually
from psycopg.types.json import Jsonb
from regionsync_client import ApiError, RegionsUnavailable

from regionsync.manage.outbox_relay import (
    OutboxRelay,
    ensure_table,
    outbox_status,
    producer_insert,
)

TABLE = "regionsync_outbox"
TENANTS = ("acme", "beta", "gamma")


async def produce(url: str, start: int, n: int, per_tx: int = 50) -> None:
    """``n`` rows, round-robin over TENANTS, in producer transactions of ``per_tx`` (the
    table made first, as the relay would make it)."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await ensure_table(conn, TABLE)
        for first in range(start, start + n, per_tx):
            async with conn.transaction(), conn.cursor() as cur:
                rows = [(TENANTS[k % 3], "outbox.test", Jsonb({"k": k}), None)
                        for k in range(first, min(first + per_tx, start + n))]  # fmt: skip
                await cur.executemany(producer_insert(TABLE), rows)


async def rows_of(url: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            f"SELECT id, tenant, payload, event_id, sent_at, failed_at FROM {TABLE} ORDER BY id"
        )
        return await cur.fetchall()


def relay(api: Api, url: str, log: Path) -> subprocess.Popen[bytes]:
    """A relay process logging to ``log`` (appended)."""
    args = ["--url", api.base, "outbox-relay", "--dsn", url, "--batch", "100",
            "--progress", "0.5"]  # fmt: skip
    with open(log, "ab") as out:  # the child keeps its own copy
        return subprocess.Popen([sys.executable, "-m", "regionsync.cli", *args], stdout=out,
                                stderr=subprocess.STDOUT, env=os.environ.copy())  # fmt: skip


async def test_relay_sigkilled_mid_run_delivers_every_row_once_by_id(
    api: Api, pg_url: str, receiver
) -> None:
    for t in TENANTS:
        await api.client.post("/v1/tenants", json={"id": t, "name": t})
        ep = await api.client.post(f"/v1/tenants/{t}/endpoints", json={"url": receiver.url(t)})
        receiver.secrets[t] = ep.json()["secret"]
    await produce(pg_url, 0, 1200)

    log = api.data_dir / "relay.log"
    first = relay(api, pg_url, log)

    async def some_sent() -> bool:
        return sum(1 for r in await rows_of(pg_url) if r[4] is not None) >= 300

    await eventually(some_sent, timeout_s=60)
    first.send_signal(signal.SIGKILL)
    assert first.wait(timeout=10) == -9
    killed = await rows_of(pg_url)
    pending = [r for r in killed if r[4] is None]
    assert pending, "the relay finished before the kill: not a mid-run kill"
    await produce(pg_url, 1200, 300)  # the producer goes on while the relay is down

    second = relay(api, pg_url, log)
    try:

        async def all_sent() -> bool:
            rows = await rows_of(pg_url)
            return len(rows) == 1500 and all(r[4] is not None for r in rows)

        await eventually(all_sent, timeout_s=90, interval=0.2)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=20)
    out = log.read_text()
    assert second.returncode == 0, out
    assert "pending 0" in out and "lag" in out, out

    rows = await rows_of(pg_url)
    ids = [r[3] for r in rows]
    assert len(set(ids)) == 1500 and all(i.startswith("evt_") for i in ids)
    # a row that had its id at the kill kept it (assigned before its first publish)
    before = {r[0]: r[3] for r in killed if r[3] is not None}
    assert all(r[3] == before[r[0]] for r in rows if r[0] in before)
    assert any(r[3] is not None for r in pending) or len(before) >= 300

    async def delivered() -> bool:
        got = {h.headers["webhook-id"] for t in TENANTS for h in receiver.of(t)}
        return set(ids) <= got

    await eventually(delivered, timeout_s=60, interval=0.2)
    webhook_ids: dict[int, set[str]] = defaultdict(set)
    for t in TENANTS:
        for h in receiver.of(t):
            webhook_ids[json.loads(h.body)["k"]].add(h.headers["webhook-id"])
    assert all(webhook_ids[r[2]["k"]] == {r[3]} for r in rows), "a row under two ids"
    await _in_order_per_tenant(api, rows)
    status = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "regionsync.cli", "--json", "outbox-relay", "--dsn", pg_url,
         "--status"], capture_output=True, check=True,
    )  # fmt: skip
    s = json.loads(status.stdout)
    assert (s["pending"], s["sent"], s["failed"], s["lag_s"]) == (0, 1500, 0, 0.0)


async def _in_order_per_tenant(api: Api, rows: list[tuple[Any, ...]]) -> None:
    """Each tenant's events were accepted in the order of its rows (and only once)."""
    for t in TENANTS:
        received: dict[str, str] = {}
        cursor = None
        while True:
            page = (await api.client.get(f"/v1/tenants/{t}/events",
                                         params={"limit": 500, **({"cursor": cursor} if cursor
                                                                  else {})})).json()  # fmt: skip
            received.update({e["id"]: e["received_at"] for e in page["items"]})
            cursor = page["next"]
            if not cursor:
                break
        mine = [r[3] for r in rows if r[1] == t]
        assert sorted(received) == sorted(mine)  # one event per row, no other
        times = [received[e] for e in mine]
        assert times == sorted(times), f"tenant {t}: rows accepted out of order"


class Crash(BaseException):
    """The relay's process ending between a publish and its mark (as a SIGKILL would)."""


class Scripted:
    """A publisher that records (row payload k, event id) and fails as told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []
        self.crash_after: int | None = None  # raise after this many publishes
        self.refuse: set[int] = set()  # payload k -> 422
        self.down: set[str] = set()  # tenants no region takes now

    async def publish(
        self,
        tenant: str,
        event_type: str,
        payload: Any,
        idempotency_key: str | None = None,
        *,
        event_id: str | None = None,
    ) -> Any:
        if tenant in self.down:
            raise RegionsUnavailable([("http://a", "refused")], None)
        if payload["k"] in self.refuse:
            raise ApiError(422, {"error": "invalid", "detail": "no", "field": "x"}, "http://a")
        assert event_id is not None
        self.calls.append((tenant, payload["k"], event_id))
        if self.crash_after is not None and len(self.calls) >= self.crash_after:
            raise Crash  # the process dies after the publish, before its mark
        return {"id": event_id}


async def test_crash_between_publish_and_mark_republishes_the_same_id(pg_url: str) -> None:
    await produce(pg_url, 0, 30, per_tx=30)
    pub = Scripted()
    pub.crash_after = 7
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        await ensure_table(conn, TABLE)
        with pytest.raises(Crash):
            await OutboxRelay(conn, TABLE, pub, concurrency=1).step()
    crashed = list(pub.calls)
    pub.crash_after = None
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        relay2 = OutboxRelay(conn, TABLE, pub, concurrency=1)
        assert await relay2.step() == 30
        assert await relay2.step() == 0
        status = await outbox_status(conn, TABLE)
    again = pub.calls[len(crashed) :]
    ids_by_k = defaultdict(set)
    for _t, k, eid in pub.calls:
        ids_by_k[k].add(eid)
    assert all(len(v) == 1 for v in ids_by_k.values()) and len(ids_by_k) == 30
    assert {k for _t, k, _e in crashed} <= {k for _t, k, _e in again}  # none was marked
    for t in TENANTS:
        ks = [k for tt, k, _e in again if tt == t]
        assert ks == sorted(ks)
    assert (status["pending"], status["sent"]) == (0, 30)


async def test_refused_rows_fail_and_unreachable_tenants_wait_in_order(pg_url: str) -> None:
    await produce(pg_url, 0, 12, per_tx=12)
    pub = Scripted()
    pub.refuse, pub.down = {4}, {"beta"}
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        await ensure_table(conn, TABLE)
        relay1 = OutboxRelay(conn, TABLE, pub)
        await relay1.step()
        status = await outbox_status(conn, TABLE)
        assert (status["sent"], status["failed"], status["pending"]) == (8, 0, 4)
        assert [k for t, k, _e in pub.calls if t == "beta"] == []  # beta's rows wait
        pub.down = set()
        await relay1.step()
        status = await outbox_status(conn, TABLE)
        assert (status["sent"], status["failed"], status["pending"]) == (11, 1, 0)
    assert [k for t, k, _e in pub.calls if t == "beta"] == [1, 7, 10]  # 4 was refused
    rows = await rows_of(pg_url)
    failed = [r for r in rows if r[5] is not None]
    assert [r[2]["k"] for r in failed] == [4]
