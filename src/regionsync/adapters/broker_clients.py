"""One client per broker type for ``BrokerSender`` (adapters/broker_sender.py): open a
connection to a URL whose host is the address the guard checked, publish one message and
wait for the broker's confirmation, close. Each ``publish`` returns the text recorded as
the attempt's excerpt, or raises ``Refused`` (the broker answered no: a nack, an
unroutable message, no stream) or the library's own exception for a lost connection
(``BrokerSender`` turns those into outcomes, in one place).

- RabbitMQ (aio-pika, AMQP 0-9-1): a channel with publisher confirms; a persistent
  message with ``message_id`` = the event id, the headers as AMQP headers, published
  ``mandatory`` (an unroutable message comes back: refused); the ack is the confirmation.
- NATS JetStream (nats-py): an acked JetStream publish with the headers and
  ``Nats-Msg-Id`` = the event id (the stream drops a duplicate in its window); the
  PubAck is the confirmation.
- Redis Streams (redis.asyncio): ``XADD`` of the headers and the field ``body`` (the
  payload bytes); the entry id is the confirmation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Protocol

import aio_pika
import aiormq.exceptions
import nats
import nats.errors
import nats.js.errors
import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ..core.brokers import BrokerDestination

__all__ = ["CLIENTS", "BrokerClient", "Refused", "never_sent"]


class Refused(Exception):
    """The broker answered and did not take the message (retryable: a queue, stream or
    binding may be created later)."""


class BrokerClient(Protocol):
    async def publish(
        self, d: BrokerDestination, event_id: str, headers: Mapping[str, str], body: bytes,
        timeout_s: float,
    ) -> str: ...  # fmt: skip

    async def close(self) -> None: ...


class RabbitClient:
    """One AMQP connection and one confirming channel (concurrent publishes share it)."""

    def __init__(self, conn: Any, channel: Any):
        self.conn, self.channel = conn, channel

    @classmethod
    async def open(cls, url: str, timeout_s: float) -> RabbitClient:
        conn = await aio_pika.connect(url, timeout=timeout_s)
        try:
            channel = await conn.channel(publisher_confirms=True, on_return_raises=True)
        except BaseException:
            await conn.close()
            raise
        return cls(conn, channel)

    async def publish(
        self, d: BrokerDestination, event_id: str, headers: Mapping[str, str], body: bytes,
        timeout_s: float,
    ) -> str:  # fmt: skip
        if self.channel.is_closed:
            raise ConnectionError("the AMQP channel is closed")
        exchange = (
            self.channel.default_exchange if not d.exchange
            else await self.channel.get_exchange(d.exchange, ensure=False)
        )  # fmt: skip
        message = aio_pika.Message(
            body, headers=dict(headers), message_id=event_id,
            content_type=headers.get("content-type"),
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )  # fmt: skip
        try:
            await exchange.publish(message, d.routing_key, mandatory=True, timeout=timeout_s)
        except aiormq.exceptions.PublishError:
            raise Refused(f"unroutable: exchange {d.exchange!r} has no queue bound for "
                          f"routing key {d.routing_key!r} (basic.return)") from None  # fmt: skip
        except aiormq.exceptions.DeliveryError as exc:
            raise Refused(f"the broker did not confirm the message (basic.nack): {exc}") from None
        except aiormq.exceptions.ChannelNotFoundEntity as exc:
            raise Refused(f"not found: {exc}") from None
        return f"confirmed by rabbitmq (basic.ack) on exchange {d.exchange!r}"

    @property
    def usable(self) -> bool:
        return not self.conn.is_closed and not self.channel.is_closed

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.conn.close()


async def _quiet(*_: Any) -> None:
    """nats-py's callbacks: errors reach the publish that meets them."""


class NatsClient:
    """One NATS connection (no reconnects: a lost connection is opened again next time)."""

    def __init__(self, nc: Any):
        self.nc = nc
        self.js = nc.jetstream()

    @classmethod
    async def open(cls, url: str, timeout_s: float) -> NatsClient:
        errors: list[Exception] = []

        async def seen(exc: Exception) -> None:
            errors.append(exc)

        try:
            # one try (nats-py tries a server max_reconnect_attempts + 1 times; 0: forever)
            nc = await nats.connect(
                servers=[url], connect_timeout=max(int(timeout_s), 1), allow_reconnect=False,
                max_reconnect_attempts=1, reconnect_time_wait=0, error_cb=seen,
                closed_cb=_quiet, disconnected_cb=_quiet,
            )  # fmt: skip
        except nats.errors.NoServersError:
            last = errors[-1] if errors else None
            raise ConnectionError(f"no connection: {last}") from last
        return cls(nc)

    async def publish(
        self, d: BrokerDestination, event_id: str, headers: Mapping[str, str], body: bytes,
        timeout_s: float,
    ) -> str:  # fmt: skip
        hdrs = {**headers, "Nats-Msg-Id": event_id}
        try:
            ack = await self.js.publish(
                d.subject, body, timeout=timeout_s, stream=d.stream or None, headers=hdrs
            )
        except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError):
            raise Refused(f"no JetStream stream takes subject {d.subject!r}") from None
        except nats.js.errors.APIError as exc:
            raise Refused(f"JetStream refused the message: {exc}") from None
        dup = " (duplicate: already stored)" if ack.duplicate else ""
        return f"acked by JetStream stream {ack.stream!r} seq {ack.seq}{dup}"

    @property
    def usable(self) -> bool:
        return self.nc.is_connected

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.nc.close()


class RedisClient:
    """A redis.asyncio client (its pool reconnects by itself)."""

    def __init__(self, client: Any):
        self.client = client

    @classmethod
    async def open(cls, url: str, timeout_s: float) -> RedisClient:
        client = redis.asyncio.Redis.from_url(
            url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),  # the retry schedule retries, not the client
        )  # fmt: skip
        return cls(client)

    async def publish(
        self, d: BrokerDestination, event_id: str, headers: Mapping[str, str], body: bytes,
        timeout_s: float,
    ) -> str:  # fmt: skip
        fields: dict[Any, Any] = {**headers, "body": body}
        try:
            entry = await self.client.xadd(d.stream, fields)
        except redis.exceptions.ResponseError as exc:
            raise Refused(f"XADD refused: {exc}") from None
        text = entry.decode() if isinstance(entry, bytes) else str(entry)
        return f"added to redis stream {d.stream!r} as {text}"

    @property
    def usable(self) -> bool:
        return True

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.aclose()


def never_sent(exc: BaseException) -> bool:
    """True if ``exc`` (or what caused it) says no connection was made, so the message
    cannot have gone out: a refused connection, or redis-py's lazy connect failing."""
    seen: BaseException | None = exc
    for _ in range(8):  # a bounded walk of the cause chain
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError):
            return True
        if isinstance(seen, redis.exceptions.ConnectionError) and "connecting to" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


CLIENTS: dict[str, Any] = {"rabbitmq": RabbitClient, "nats": NatsClient, "redis": RedisClient}
