"""BrokerSender (issue 46) against real brokers on loopback (tests/brokerserver.py): a
confirmed publish carries the body and the signed headers; the address guard refuses a
broker host as it refuses an HTTP one; a broker that says no, one that is down and an
unknown stream are failed attempts with a clear error, never exceptions."""

from __future__ import annotations

import uuid
from typing import Any

import aio_pika
import nats
import pytest
import redis.asyncio
from brokerserver import NatsServer, RabbitServer, RedisServer

from regionsync.adapters.broker_sender import BrokerSender, RoutingSender
from regionsync.adapters.system import SystemResolver
from regionsync.core.brokers import BrokerDestination
from regionsync.core.retry import OutcomeKind
from regionsync.core.urlguard import parse_networks
from regionsync.runtime.ports import OutboundRequest

LOOPBACK = parse_networks(["127.0.0.1/32"])
HEADERS = {
    "content-type": "application/json",
    "user-agent": "regionsync/test",
    "webhook-id": "evt_1",
    "webhook-timestamp": "1700000000",
    "webhook-signature": "v1,abc=",
    "webhook-event-type": "order.paid",
    "x-team": "blue",
}
BODY = b'{"amount": 12.10, "id": 1}'


def request(d: BrokerDestination, event_id: str = "evt_1", timeout_s: float = 5.0) -> Any:
    headers = {**HEADERS, "webhook-id": event_id}
    return OutboundRequest(d.public_url(), headers, BODY, timeout_s, d)


class NoHttp:
    async def send(self, request: OutboundRequest) -> Any:
        raise AssertionError("a broker request went to the HTTP sender")

    async def aclose(self) -> None:
        pass


async def test_redis_xadd_confirmed_with_body_and_headers(redis_server: RedisServer) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    d = BrokerDestination("redis", redis_server.url, stream=stream)
    sender = RoutingSender(NoHttp(), BrokerSender(SystemResolver(), LOOPBACK))
    try:
        out = await sender.send(request(d))
        assert out.kind is OutcomeKind.SUCCEEDED, out
        assert f"redis stream {stream!r}" in out.response_excerpt
        r = redis.asyncio.Redis.from_url(redis_server.url)
        [(_, fields)] = await r.xrange(stream)
        await r.aclose()
        assert fields[b"body"] == BODY
        assert fields[b"webhook-id"] == b"evt_1" and fields[b"webhook-signature"] == b"v1,abc="
        assert fields[b"webhook-event-type"] == b"order.paid" and fields[b"x-team"] == b"blue"
        assert b"user-agent" not in fields
    finally:
        await sender.aclose()


async def test_address_guard_refuses_a_broker_host_final(redis_server: RedisServer) -> None:
    d = BrokerDestination("redis", redis_server.url, stream="s")
    sender = BrokerSender(SystemResolver(), ())  # loopback not allowed
    out = await sender.send(request(d))
    assert out.kind is OutcomeKind.FAILED and out.reason == "ssrf" and out.final
    assert "non-public address" in out.response_excerpt


async def test_broker_down_is_a_retryable_connect_failure() -> None:
    from regionsync.demo import free_port

    port = free_port()  # nothing listens there
    sender = BrokerSender(SystemResolver(), LOOPBACK)
    try:
        for d in (
            BrokerDestination("redis", f"redis://127.0.0.1:{port}/0", stream="s"),
            BrokerDestination("nats", f"nats://127.0.0.1:{port}", subject="a.b"),
            BrokerDestination("rabbitmq", f"amqp://u:p@127.0.0.1:{port}/", routing_key="k"),
        ):
            out = await sender.send(request(d, timeout_s=30.0))
            assert out.kind is OutcomeKind.FAILED and out.reason == "connect", (d.type, out)
            assert out.latency_ms < 15_000, out  # refused at once, not at the deadline
            assert not out.final and f"127.0.0.1:{port}" in out.response_excerpt
            assert ":p@" not in out.response_excerpt  # the password is not recorded
    finally:
        await sender.aclose()


async def test_nats_jetstream_acked_and_deduplicated(nats_server: NatsServer) -> None:
    name = f"S{uuid.uuid4().hex[:8]}"
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    sender = BrokerSender(SystemResolver(), LOOPBACK)
    try:
        d = BrokerDestination("nats", nats_server.url, subject=f"{name}.orders", stream=name)
        first = await sender.send(request(d))
        again = await sender.send(request(d))  # the same event id: JetStream drops it
        assert first.kind is again.kind is OutcomeKind.SUCCEEDED, (first, again)
        assert "duplicate" in again.response_excerpt
        info = await js.stream_info(name)
        assert info.state.messages == 1
        msg = await js.get_msg(name, 1)
        assert msg.data == BODY and msg.headers["Nats-Msg-Id"] == "evt_1"
        assert msg.headers["webhook-signature"] == "v1,abc="

        nowhere = BrokerDestination("nats", nats_server.url, subject="nobody.listens")
        out = await sender.send(request(nowhere, "evt_2"))
        assert out.kind is OutcomeKind.FAILED and out.reason == "broker_refused", out
        assert "no JetStream stream" in out.response_excerpt
    finally:
        await sender.aclose()
        await nc.close()


async def test_rabbitmq_confirmed_persistent_and_unroutable_refused(rabbitmq: RabbitServer) -> None:
    queue_name = f"q-{uuid.uuid4().hex[:8]}"
    conn = await aio_pika.connect(rabbitmq.url)
    ch = await conn.channel()
    exchange = await ch.declare_exchange("regionsync-test", aio_pika.ExchangeType.DIRECT,
                                         durable=True)  # fmt: skip
    queue = await ch.declare_queue(queue_name, durable=True)
    await queue.bind(exchange, routing_key=queue_name)
    sender = BrokerSender(SystemResolver(), LOOPBACK)
    try:
        d = BrokerDestination("rabbitmq", rabbitmq.url, exchange="regionsync-test",
                              routing_key=queue_name)  # fmt: skip
        out = await sender.send(request(d))
        assert out.kind is OutcomeKind.SUCCEEDED and "basic.ack" in out.response_excerpt, out
        msg = await queue.get(timeout=5)
        assert msg.body == BODY and msg.message_id == "evt_1"
        assert msg.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
        assert msg.headers["webhook-signature"] == "v1,abc=" and "user-agent" not in msg.headers
        await msg.ack()

        lost = BrokerDestination("rabbitmq", rabbitmq.url, exchange="regionsync-test",
                                 routing_key="no-queue")  # fmt: skip
        out = await sender.send(request(lost, "evt_2"))
        assert out.kind is OutcomeKind.FAILED and out.reason == "broker_refused", out
        assert "unroutable" in out.response_excerpt
        missing = BrokerDestination("rabbitmq", rabbitmq.url, exchange="no-such-exchange",
                                    routing_key="k")  # fmt: skip
        out = await sender.send(request(missing, "evt_3"))
        assert out.kind is OutcomeKind.FAILED, out
        assert "no-such-exchange" in out.response_excerpt
        again = await sender.send(request(d, "evt_4"))  # a closed channel is opened again
        assert again.kind is OutcomeKind.SUCCEEDED, again
    finally:
        await sender.aclose()
        await queue.delete(if_unused=False, if_empty=False)
        await conn.close()


async def test_unreadable_destination_fails_retryably_and_never_goes_to_http() -> None:
    from regionsync.core.brokers import UNREADABLE

    sender = RoutingSender(NoHttp(), BrokerSender(SystemResolver(), LOOPBACK))
    out = await sender.send(OutboundRequest("kafka://k:9092", HEADERS, BODY, 5.0, UNREADABLE))
    assert out.kind is OutcomeKind.FAILED and out.reason == "bad_destination" and not out.final


async def test_connections_kept_are_bounded(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from regionsync.adapters import broker_sender

    monkeypatch.setattr(broker_sender, "MAX_CLIENTS", 2)
    sender = BrokerSender(SystemResolver(), LOOPBACK)
    try:
        dests = [BrokerDestination("redis", redis_server.url, stream=f"b{i}") for i in range(3)]
        for i, d in enumerate(dests):
            out = await sender.send(request(d, f"evt_{i}"))
            assert out.kind is OutcomeKind.SUCCEEDED, out
        assert list(sender._clients) == dests[1:]  # the least recently used closed
        assert (await sender.send(request(dests[0], "evt_3"))).kind is OutcomeKind.SUCCEEDED
        assert list(sender._clients) == [dests[2], dests[0]]
    finally:
        await sender.aclose()
