"""Broker destinations over the API (issue 46): the endpoint body's ``destination``
judged with problems naming the member, the address guard on the broker host, the
capability gate, credentials masked for read tokens and in lists and sealed at rest;
and per broker, 1,000 events published while the broker is stopped for 10 s and started
again: every event confirmed by the broker, once, failures recorded as attempts, nothing
dead-lettered."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aio_pika
import nats
import pytest
import redis.asyncio
from api_support import Api, eventually, running_node
from brokerserver import NatsServer, RabbitServer, RedisServer

from regionsync.core.capabilities import ALL, RELEASE, announced

ADMIN = "admin-token-0123456789"
PASSWORD = "s3cret-broker-pw"
N_EVENTS = 1000
OUTAGE_S = 10.0
# fast retries that outlast the outage and a RabbitMQ restart (~7 s) by far; a failing
# endpoint is probed every second at most
DELIVERY = {
    "retry_schedule_s": [0.5, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3],
    "probe_initial_s": 0.2,
    "probe_max_s": 1.0,
    "timeout_s": 5.0,
}


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def problem(api: Api, body: dict[str, Any], status: int, field: str, path: str = "") -> str:
    url = "/v1/tenants/acme/endpoints" + path
    resp = await (api.client.patch(url, json=body) if path else api.client.post(url, json=body))
    assert resp.status_code == status, (body, resp.text)
    assert resp.json()["field"] == field, (body, resp.json())
    return resp.json()["detail"]


async def test_destination_bodies_judged_with_the_field_named(tmp_path: Path) -> None:
    async with running_node(tmp_path) as api:
        assert (await api.client.post("/v1/tenants", json={"id": "acme", "name": "A"})).is_success
        redis_dest = {"type": "redis", "url": "redis://127.0.0.1:6379/0", "stream": "s"}
        for body, field in [
            ({"destination": {"type": "kafka"}}, "destination.type"),
            ({"destination": "redis"}, "destination"),
            ({"destination": {"type": "redis", "stream": "s"}}, "destination.url"),
            ({"destination": {"type": "redis", "url": "redis://127.0.0.1"}}, "destination.stream"),
            ({"destination": {**redis_dest, "url": "amqp://127.0.0.1/"}}, "destination.url"),
            ({"destination": {**redis_dest, "url": "redis://127.0.0.1/x"}}, "destination.url"),
            ({"destination": {**redis_dest, "url": "redis:///0"}}, "destination.url"),
            ({"destination": {**redis_dest, "subject": "a"}}, "destination.subject"),
            ({"destination": {"type": "nats", "url": "nats://127.0.0.1:4222", "subject": "a.*"}},
             "destination.subject"),
            ({"destination": {"type": "rabbitmq", "url": "amqp://127.0.0.1/"}},
             "destination.routing_key"),
            ({"destination": {"type": "http", "url": "http://x"}}, "destination.url"),
            ({"destination": {"type": "http"}}, "url"),  # http needs the endpoint's url
            ({"destination": redis_dest, "url": "http://127.0.0.1:9/"}, "url"),
            ({}, "url"),
        ]:  # fmt: skip
            await problem(api, body, 422, field)
        # the address guard: a private broker address not allowed, as for an HTTP url
        guarded = {**redis_dest, "url": "redis://10.0.0.7:6379/0"}
        detail = await problem(api, {"destination": guarded}, 422, "destination.url")
        assert "non-public address" in detail
        loose = {**redis_dest, "url": "redis://0x7f.1:6379/0"}  # 127.0.0.1, spelt loosely
        detail = await problem(api, {"destination": loose}, 422, "destination.url")
        assert "127.0.0.1" in detail
        # a single-region node: every region reads broker destinations
        made = await api.client.post("/v1/tenants/acme/endpoints", json={"destination": redis_dest})
        assert made.status_code == 201, made.text
        ep = made.json()
        assert ep["destination"] == redis_dest and ep["url"] == "redis://127.0.0.1:6379/0"
        path = f"/{ep['id']}"
        await problem(api, {"url": "http://127.0.0.1:9/"}, 422, "url", path)
        await problem(api, {"destination": {"type": "http"}}, 422, "url", path)
        back = {"destination": {"type": "http"}, "url": "http://127.0.0.1:9/h"}
        resp = await api.client.patch(f"/v1/tenants/acme/endpoints{path}", json=back)
        assert resp.status_code == 200, resp.text
        assert resp.json()["destination"] == {"type": "http"}
        assert resp.json()["url"] == "http://127.0.0.1:9/h"


async def test_capability_gate_refuses_until_every_region_reads_it(tmp_path: Path) -> None:
    peers = [{"region": "eu-west-1", "address": "127.0.0.1:9"}]
    async with running_node(tmp_path, peers=peers) as api:
        c = api.client
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).is_success
        body = {"destination": {"type": "redis", "url": "redis://127.0.0.1:1/0", "stream": "s"}}
        resp = await c.post("/v1/tenants/acme/endpoints", json=body)
        # eu-west-1 was never heard: it may be 917426d, which would refuse the record
        assert resp.status_code == 409 and resp.json()["error"] == "capability_missing"
        assert resp.json()["field"] == "destination" and "upgrade" in resp.json()["detail"]
        http = await c.post("/v1/tenants/acme/endpoints", json={"url": "http://127.0.0.1:9/"})
        assert http.status_code == 201  # plain HTTP endpoints are written as before
        api.node.capabilities.announce("eu-west-1", RELEASE, announced(ALL), 0)  # its Hello
        resp = await c.post("/v1/tenants/acme/endpoints", json=body)
        assert resp.status_code == 201, resp.text


async def test_broker_credentials_masked_and_sealed_at_rest(tmp_path: Path) -> None:
    async with running_node(tmp_path, tokens=[{"token": ADMIN, "scope": "admin"}]) as api:
        c = api.client
        c.headers.update(bearer(ADMIN))
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).is_success
        dest = {"type": "rabbitmq", "url": f"amqp://app:{PASSWORD}@127.0.0.1:5672/prod",
                "exchange": "events", "routing_key": "orders"}  # fmt: skip
        ep = (await c.post("/v1/tenants/acme/endpoints", json={"destination": dest})).json()
        assert ep["destination"] == dest  # the creator sees what it wrote
        assert ep["url"] == "amqp://app:\u2026@127.0.0.1:5672/prod"
        made = await c.post("/v1/tokens", json={"scope": "tenant:acme:read", "name": "r"})
        read = made.json()["token"]
        one = await c.get(f"/v1/tenants/acme/endpoints/{ep['id']}")
        assert one.json()["destination"] == dest  # admin: as written
        for token, path in ((read, f"/{ep['id']}"), (read, ""), (ADMIN, "")):
            resp = await c.get(f"/v1/tenants/acme/endpoints{path}", headers=bearer(token))
            assert resp.status_code == 200 and PASSWORD not in resp.text, (token, path)
            got = resp.json() if path else resp.json()["items"][0]
            assert got["destination"]["url"] == "amqp://app:\u2026@127.0.0.1:5672/prod"
    assert _files_holding(tmp_path, PASSWORD) == []  # the node stopped: all of it written


def _files_holding(directory: Path, text: str) -> list[str]:
    files = [p for p in directory.rglob("*") if p.is_file()]
    assert files
    return [p.name for p in files if text.encode() in p.read_bytes()]


# -- the outage: per broker ------------------------------------------------------------


class Target:
    """One broker destination for the outage test: its ``destination`` body, how to make
    it ready and how to read the event ids it holds."""

    def __init__(self, server: Any, dest: dict[str, Any]) -> None:
        self.server, self.dest = server, dest

    async def prepare(self) -> None:
        pass

    async def event_ids(self) -> list[str]:
        raise NotImplementedError


class RedisTarget(Target):
    async def event_ids(self) -> list[str]:
        r = redis.asyncio.Redis.from_url(self.server.url)
        try:
            rows = await r.xrange(self.dest["stream"])
        finally:
            await r.aclose()
        return [fields[b"webhook-id"].decode() for _, fields in rows]


class NatsTarget(Target):
    async def prepare(self) -> None:
        nc = await nats.connect(self.server.url)
        await nc.jetstream().add_stream(name=self.dest["stream"], subjects=[self.dest["subject"]])
        await nc.close()

    async def event_ids(self) -> list[str]:
        nc = await nats.connect(self.server.url)
        try:
            js = nc.jetstream()
            n = (await js.stream_info(self.dest["stream"])).state.last_seq
            msgs = [await js.get_msg(self.dest["stream"], seq) for seq in range(1, n + 1)]
        finally:
            await nc.close()
        return [m.headers["webhook-id"] for m in msgs]


class RabbitTarget(Target):
    """A durable queue bound to a durable exchange; ``event_ids`` consumes what it holds
    (every call adds to ``seen``: a message is read once)."""

    seen: list[str]

    async def prepare(self) -> None:
        self.seen = []
        conn = await aio_pika.connect(self.server.url)
        ch = await conn.channel()
        ex = await ch.declare_exchange(self.dest["exchange"], aio_pika.ExchangeType.DIRECT,
                                       durable=True)  # fmt: skip
        q = await ch.declare_queue(self.dest["routing_key"], durable=True)
        await q.bind(ex, routing_key=self.dest["routing_key"])
        await conn.close()

    async def event_ids(self) -> list[str]:
        conn = await aio_pika.connect(self.server.url)
        try:
            q = await (await conn.channel()).get_queue(self.dest["routing_key"])
            while (msg := await q.get(fail=False, no_ack=True)) is not None:
                assert msg.message_id == msg.headers["webhook-id"]
                self.seen.append(msg.message_id)
        finally:
            await conn.close()
        return list(self.seen)


def _target(kind: str, request: pytest.FixtureRequest) -> Target:
    tag = uuid.uuid4().hex[:8]
    if kind == "redis":
        server = request.getfixturevalue("redis_server")
        return RedisTarget(server, {"type": "redis", "url": server.url, "stream": f"s-{tag}"})
    if kind == "nats":
        server = request.getfixturevalue("nats_server")
        return NatsTarget(server, {"type": "nats", "url": server.url, "subject": f"ev.{tag}",
                                   "stream": f"EV{tag}"})  # fmt: skip
    server = request.getfixturevalue("rabbitmq")
    return RabbitTarget(server, {"type": "rabbitmq", "url": server.url,
                                 "exchange": f"ex-{tag}", "routing_key": f"q-{tag}"})  # fmt: skip


async def _failed_attempts(api: Api, endpoint: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(100):  # pages of 1000
        params: dict[str, Any] = {"status": "failed", "limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = (await api.client.get(f"/v1/tenants/acme/endpoints/{endpoint}/attempts",
                                     params=params)).json()  # fmt: skip
        rows += page["items"]
        cursor = page["next"]
        if not cursor:
            break
    return rows


async def _publish(api: Api, n: int, offset: int) -> set[str]:
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> str:
        async with sem:
            resp = await api.client.post("/v1/tenants/acme/events", json={
                "event_type": "order.paid", "payload": {"i": i, "amount": 12.10}})  # fmt: skip
            assert resp.status_code == 202, resp.text
            return resp.json()["id"]

    return set(await asyncio.gather(*(one(offset + i) for i in range(n))))


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    await eventually(check, timeout_s=timeout_s, interval=0.2)


@pytest.mark.parametrize("kind", ["redis", "nats", "rabbitmq"])
async def test_broker_down_10s_every_event_confirmed_once(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = _target(kind, request)
    server: RedisServer | NatsServer | RabbitServer = target.server
    await target.prepare()
    async with running_node(tmp_path, delivery=DELIVERY) as api:
        assert (await api.client.post("/v1/tenants", json={"id": "acme", "name": "A"})).is_success
        made = await api.client.post("/v1/tenants/acme/endpoints", json={
            "destination": target.dest, "rate_limit_per_s": 5000, "max_in_flight": 64})  # fmt: skip
        assert made.status_code == 201, made.text
        ep = made.json()["id"]
        acked = await _publish(api, N_EVENTS // 4, 0)  # delivered while the broker is up
        try:
            await asyncio.to_thread(server.stop)
            stopped = time.monotonic()
            acked |= await _publish(api, N_EVENTS - len(acked), len(acked))

            async def failing() -> bool:  # health follows broker attempts as HTTP ones
                state = (await api.client.get(f"/v1/tenants/acme/endpoints/{ep}")).json()
                return state["state"] == "failing" and len(await _failed_attempts(api, ep)) >= 5

            await _until(failing, OUTAGE_S)
            await asyncio.sleep(max(OUTAGE_S - (time.monotonic() - stopped), 0))
        finally:
            await asyncio.to_thread(server.start)
        assert len(acked) == N_EVENTS
        got: list[str] = []

        async def all_confirmed() -> bool:
            got[:] = await target.event_ids()
            return acked <= set(got)

        await _until(all_confirmed, 40)

        async def recorded() -> bool:  # the confirmations recorded as delivered
            counts = await api.node.store.counts("us-east-1")
            return counts["deliveries_delivered"] == N_EVENTS

        await _until(recorded, 10)
        counts = await api.node.store.counts("us-east-1")
        assert counts["deliveries_dead"] == 0 and counts["deliveries_pending"] == 0
        state = (await api.client.get(f"/v1/tenants/acme/endpoints/{ep}")).json()["state"]
        assert state == "active"  # a confirmed probe ended the failing state
        failed = await _failed_attempts(api, ep)
        reasons = Counter(a["error"] for a in failed)
        assert set(reasons) <= {"connect", "network", "timeout", "broker_refused"}, reasons
        assert any(kind in a["response_excerpt"] for a in failed)
        assert PASSWORD not in str(failed)
        # once: a second copy only where an attempt may have reached the broker unconfirmed
        dups = sum(n - 1 for n in Counter(got).values())
        assert dups <= reasons["network"] + reasons["timeout"], (dups, reasons)
        assert set(got) == acked


async def test_cli_creates_and_lists_a_broker_endpoint(tmp_path: Path) -> None:
    from test_cli_manage import cli, ok

    async with running_node(tmp_path) as api:
        assert (await api.client.post("/v1/tenants", json={"id": "acme", "name": "A"})).is_success
        url = f"redis://u:{PASSWORD}@127.0.0.1:6379/2"
        out = ok(await cli(api, "--json", "endpoints", "create", "--tenant", "acme",
                           "--destination-type", "redis", "--destination-url", url,
                           "--stream", "orders"))  # fmt: skip
        assert '"type": "redis"' in out and '"stream": "orders"' in out
        listing = ok(await cli(api, "endpoints", "list", "--tenant", "acme"))
        header, row = listing.splitlines()[:2]
        assert header.split()[:3] == ["ID", "TYPE", "URL"]
        assert row.split()[1:3] == ["redis", "redis://u:\u2026@127.0.0.1:6379/2"]
        assert PASSWORD not in listing
        bad = await cli(
            api,
            "endpoints",
            "create",
            "--tenant",
            "acme",
            "--destination-type",
            "nats",
            "--destination-url",
            "redis://127.0.0.1",
            "--subject",
            "a",
        )
        assert bad.exit_code == 1 and "destination.url" in bad.output, bad.output
        mixed = await cli(api, "endpoints", "create", "--tenant", "acme", "--url",
                          "http://127.0.0.1:9/", "--stream", "s")  # fmt: skip
        assert mixed.exit_code == 2 and "--destination-type" in mixed.output


async def test_dead_letters_of_a_broker_endpoint_recovered(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    """No stream takes the subject yet: every attempt is refused by JetStream and the
    deliveries die after the (fast) schedule; once the stream exists, recover delivers
    each event once, with its event id."""
    tag = uuid.uuid4().hex[:8]
    dest = {"type": "nats", "url": nats_server.url, "subject": f"late.{tag}"}
    target = NatsTarget(nats_server, {**dest, "stream": f"LATE{tag}"})
    async with running_node(tmp_path) as api:
        c = api.client
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).is_success
        ep = (await c.post("/v1/tenants/acme/endpoints", json={"destination": dest})).json()
        acked = await _publish(api, 5, 0)
        deliveries = f"/v1/tenants/acme/endpoints/{ep['id']}/deliveries"

        async def status_is(status: str) -> bool:
            page = (await c.get(deliveries, params={"status": status})).json()
            return len(page["items"]) == len(acked)

        await _until(lambda: status_is("dead"), 20)
        failed = await _failed_attempts(api, ep["id"])
        assert {a["error"] for a in failed} == {"broker_refused"}
        assert "no JetStream stream" in failed[0]["response_excerpt"]
        await target.prepare()
        resp = await c.post(f"/v1/tenants/acme/endpoints/{ep['id']}/recover",
                            json={"since": "2000-01-01T00:00:00Z"})  # fmt: skip
        assert resp.status_code == 202, resp.text
        await _until(lambda: status_is("delivered"), 20)
        got = await target.event_ids()
        assert sorted(got) == sorted(acked)
