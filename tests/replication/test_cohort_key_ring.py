"""The processes of a region on one PostgreSQL database agree on the key ring, and a
process that cannot read its region's records stops acknowledging (issue 38, kind 8), on
a real PostgreSQL server, in-process:

- two processes that each generated their own ``<data_dir>/<region>.key`` (no ring
  configured), both started before the first endpoint exists: the second refuses to
  start with one line naming ``[secrets] keys`` (it used to start, fail to open the
  endpoint secret the first sealed, log hundreds of errors and answer 202 to publishes
  that were never delivered); the same ring starts; a database from before the key check
  whose sealed rows this ring cannot open refuses it too;
- a process whose ring lags a rotation made on another (it started first) cannot read
  what the other seals: publishes and inbound get 503 ``not_following`` with
  Retry-After, ``/readyz`` is unready, one error is logged however many rounds fail, and
  once it can read again it acknowledges (and matches the endpoint) again."""

from __future__ import annotations

import base64
import hashlib
import logging
from pathlib import Path

import httpx
import psycopg
import pytest
from memnodes import RecordingSender, StaticResolver, eventually

from regionsync.adapters.grpc_transport import GrpcTransport
from regionsync.adapters.http_api import create_app
from regionsync.adapters.postgres_coordinator import PostgresCoordinator
from regionsync.adapters.postgres_store import PostgresStore
from regionsync.adapters.secretbox import NodeKeys
from regionsync.adapters.system import SystemClock, UlidSource, system_rng
from regionsync.adapters.wiring import build_store
from regionsync.config import load_settings
from regionsync.demo import free_port
from regionsync.errors import CannotStart, Unavailable
from regionsync.runtime.node import Node

REGION = "pg"


def ring(*ids: str) -> str:
    return ",".join(f"{i}:{base64.b64encode(hashlib.sha256(i.encode()).digest()).decode()}"
                    for i in ids)  # fmt: skip


def node(data_dir: Path, url: str, holder: str, keys: str | None = None) -> Node:
    settings = load_settings(
        None, region=REGION, data_dir=data_dir, store=url, grpc_listen=f"127.0.0.1:{free_port()}",
        secrets={"keys": keys} if keys else {},
        replication={"leader_poll_s": 0.05, "follow_interval_ms": 20.0},
    )  # fmt: skip
    clock, rng = SystemClock(), system_rng()
    st = build_store(settings)
    assert isinstance(st, PostgresStore)
    return Node(
        settings, store=st, clock=clock, rng=rng, ids=UlidSource(clock, rng),
        transport=GrpcTransport(settings.grpc_listen), sender=RecordingSender(),
        resolver=StaticResolver(), coordinator=PostgresCoordinator(st, REGION, holder),
    )  # fmt: skip


async def test_processes_with_their_own_generated_keys_do_not_both_start(
    tmp_path: Path, pg_url: str
) -> None:
    a = node(tmp_path / "a", pg_url, "a")  # each its own data_dir: its own generated key
    b = node(tmp_path / "b", pg_url, "b")
    await a.start()
    try:
        with pytest.raises(CannotStart) as refused:
            await b.start()
        text = str(refused.value)
        assert "[secrets] keys" in text and "\n" not in text
        assert not b.started
        # the same ring (here: a's generated key file) starts
        (tmp_path / "c").mkdir()
        (tmp_path / "c" / f"{REGION}.key").write_bytes(
            (tmp_path / "a" / f"{REGION}.key").read_bytes()
        )
        c = node(tmp_path / "c", pg_url, "c")
        await c.start()
        await c.stop()
    finally:
        await a.stop()


async def test_a_ring_that_cannot_open_rows_sealed_before_the_check_is_refused(
    tmp_path: Path, pg_url: str
) -> None:
    a = node(tmp_path / "a", pg_url, "a", ring("ka"))
    await a.start()
    await a.registry_ops.create_tenant("t", "T")
    await a.registry_ops.create_endpoint("t", {"url": "https://example.com/h"})  # sealed: ka
    await a.stop()
    # as a database written before this release: no key check yet
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("DELETE FROM meta WHERE key = 'key_check'")
    with pytest.raises(CannotStart, match=r"\[secrets\] keys"):
        await node(tmp_path / "b", pg_url, "b", ring("kb")).start()
    both = node(tmp_path / "c", pg_url, "c", ring("kb", "ka"))  # a ring holding both
    await both.start()
    await both.stop()
    with pytest.raises(CannotStart):  # the check now names kb, which "ka" alone lacks
        await node(tmp_path / "d", pg_url, "d", ring("ka")).start()


async def test_a_process_that_cannot_read_its_region_stops_acknowledging(
    tmp_path: Path, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    b = node(tmp_path / "b", pg_url, "b", ring("k1"))
    await b.start()  # first: the key check is sealed with k1
    a = node(tmp_path / "a", pg_url, "a", ring("k2", "k1"))  # a rotation made on a only
    await a.start()
    app = create_app(b)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://b")
    try:
        assert (await http.get("/readyz")).status_code == 200
        await a.registry_ops.create_tenant("t", "T")
        await eventually(lambda: b.catalog.registry.has_tenant("t"))
        caplog.set_level(logging.ERROR, logger="regionsync.cohort")
        assert b.cohort is not None
        rounds, follow_once = [], b.cohort.follow_once

        async def counted() -> int:
            rounds.append(1)
            return await follow_once()

        b.cohort.follow_once = counted  # type: ignore[method-assign]
        ep = await a.registry_ops.create_endpoint("t", {"url": "https://example.com/h"})
        start = len(rounds)
        await eventually(lambda: len(rounds) >= start + 20)  # b cannot open k2's seal
        with pytest.raises(Unavailable) as exc:
            await b.ingest.publish("t", "x", b"{}", None)
        assert exc.value.code == "not_following"
        resp = await http.post("/v1/tenants/t/events", json={"event_type": "x", "payload": {}})
        assert resp.status_code == 503 and resp.headers["retry-after"] == "1"
        assert resp.json()["error"] == "not_following"
        ready = await http.get("/readyz")
        assert ready.status_code == 503 and "records" in ready.json()["detail"]
        errors = [r for r in caplog.records if r.name == "regionsync.cohort"]
        assert len(errors) == 1, [r.getMessage() for r in errors]  # once, not per round
        assert "SealedKeyError" in errors[0].getMessage()

        # given the ring, b reads the region again and acknowledges, matching the endpoint
        b.store.at_rest.keys = NodeKeys.parse(ring("k2", "k1"))
        await eventually(lambda: b.following)
        assert (await http.get("/readyz")).status_code == 200
        event, _ = await b.ingest.publish("t", "x", b"{}", None)
        rows = await b.store.deliveries_of_event(event.id)
        assert [d.endpoint_id for d in rows] == [ep.id]
    finally:
        await http.aclose()
        await a.stop()
        await b.stop()
