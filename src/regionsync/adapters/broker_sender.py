"""The Sender for broker destinations (issue 46), and the one that routes between it and
the HTTP sender.

``BrokerSender.send`` makes one attempt to the request's ``destination``: the address
guard on the broker's host and port (``runtime.destinations.check_destination``, as an
HTTP attempt has it: a refused address is the final ``ssrf`` failure), a connection
pinned to the checked address (kept per destination and address, opened again when it
broke or the address changed), one publish, and the broker's confirmation. Within the
attempt's deadline (``core.sending.attempt_deadline``). Outcomes, never exceptions:

- confirmed (ack, PubAck, entry id): ``succeeded``, the confirmation as the excerpt;
- no connection (refused, reset, timed out before the publish): ``failed``/``connect``;
- the broker said no (nack, unroutable, no stream): ``failed``/``broker_refused``;
- the connection broke or the deadline passed after the publish went out: the broker
  may hold the message, ``indeterminate`` (``network``/``timeout``), retried; consumers
  dedupe by the event id (JetStream does itself, by ``Nats-Msg-Id``).

Every failure is retried on the endpoint's schedule, as an HTTP failure is. Broker
attempts run on the node's event loop (not in the sender process): a publish is a frame
write and a wait, not an HTTP client's parsing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ..core.brokers import BrokerDestination, broker_headers
from ..core.retry import AttemptOutcome, OutcomeKind
from ..core.sending import (
    Failure,
    SendError,
    attempt_deadline,
    failure_outcome,
)  # fmt: skip
from ..core.urlguard import Network
from ..runtime.destinations import check_destination
from ..runtime.ports import OutboundRequest, Resolver, Sender
from .broker_clients import CLIENTS, Refused, never_sent

__all__ = ["BrokerSender", "RoutingSender"]

log = logging.getLogger("regionsync.delivery")

MAX_CLIENTS = 256  # open broker connections kept; the least recently used closes first


def _outcome(kind: OutcomeKind, reason: str | None, text: str, t0: float) -> AttemptOutcome:
    return AttemptOutcome(
        kind, reason=reason, latency_ms=(time.monotonic() - t0) * 1000, response_excerpt=text
    )


class BrokerSender:
    """A ``Sender`` for requests with a broker ``destination`` (module docstring);
    ``allow``: the networks exempt from the address guard
    (``delivery.allow_private_networks``)."""

    def __init__(self, resolver: Resolver, allow: Sequence[Network] = ()):
        self.resolver, self.allow = resolver, list(allow)
        self._clients: OrderedDict[BrokerDestination, tuple[str, Any]] = OrderedDict()
        self._locks: dict[BrokerDestination, asyncio.Lock] = {}

    async def _client(self, d: BrokerDestination, address: str, timeout_s: float) -> Any:
        """The open client of ``d`` at ``address`` (opened here if there is none, or the
        one there is broke or pins another address); one opener per destination."""
        held = self._clients.get(d)
        if held is not None and held[0] == address and held[1].usable:
            self._clients.move_to_end(d)
            return held[1]
        lock = self._locks.setdefault(d, asyncio.Lock())
        async with lock:
            held = self._clients.get(d)
            if held is not None and held[0] == address and held[1].usable:
                return held[1]
            if held is not None:
                del self._clients[d]
                await held[1].close()
            client = await CLIENTS[d.type].open(d.with_host(address), timeout_s)
            self._clients[d] = (address, client)
        while len(self._clients) > MAX_CLIENTS:  # a deleted or changed destination's
            old, (_, idle) = self._clients.popitem(last=False)
            self._locks.pop(old, None)
            await idle.close()
        return client

    async def _drop(self, d: BrokerDestination, client: Any) -> None:
        held = self._clients.get(d)
        if held is not None and held[1] is client:
            del self._clients[d]
        await client.close()

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        """One publish of ``request.body`` with ``request.headers`` to
        ``request.destination``; see the module docstring for the outcomes."""
        d = request.destination
        assert d is not None, "BrokerSender gets requests with a destination"
        t0 = time.monotonic()
        if d.type not in CLIENTS:  # core.brokers.UNREADABLE: retried, never sent as HTTP
            return _outcome(OutcomeKind.FAILED, "bad_destination", "the endpoint's destination "
                            "is not one this release reads", t0)  # fmt: skip
        deadline = attempt_deadline(request.timeout_s)
        headers = broker_headers(request.headers)
        event_id = headers.get("webhook-id", "")
        host, port = d.host_port
        where = f"{d.type} at {d.public_url()}"
        published, client = False, None
        try:
            async with asyncio.timeout(deadline):
                address = str(await check_destination(self.resolver, self.allow, host, port))
                client = await self._client(d, address, deadline)
                published = True
                text = await client.publish(d, event_id, headers, request.body, deadline)
        except SendError as exc:  # the guard: refused (final) or not resolved
            return failure_outcome(exc.failure, exc, (time.monotonic() - t0) * 1000)
        except Refused as exc:
            return _outcome(OutcomeKind.FAILED, "broker_refused", f"{where}: {exc}", t0)
        except TimeoutError:
            if client is not None:
                await self._drop(d, client)
            if published:
                return _outcome(OutcomeKind.INDETERMINATE, "timeout",
                                f"{where}: no confirmation within {deadline} s", t0)  # fmt: skip
            return failure_outcome(Failure.CONNECT, f"{where}: no connection within "
                                   f"{deadline} s", (time.monotonic() - t0) * 1000)  # fmt: skip
        except Exception as exc:  # the libraries' connection errors (module docstring)
            if client is not None:
                await self._drop(d, client)
            text = f"{where}: {type(exc).__name__}: {exc}".rstrip(": ")
            if published and not never_sent(exc):
                return _outcome(OutcomeKind.INDETERMINATE, Failure.NETWORK.value, text, t0)
            return failure_outcome(Failure.CONNECT, text, (time.monotonic() - t0) * 1000)
        return _outcome(OutcomeKind.SUCCEEDED, None, text, t0)

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for _, client in clients:
            await client.close()


class RoutingSender:
    """The node's ``Sender``: a request with a broker destination goes to ``brokers``,
    every other one to ``http`` (the HTTP sender, e.g. ``ProcessSender``)."""

    def __init__(self, http: Sender, brokers: BrokerSender):
        self.http, self.brokers = http, brokers

    async def start(self) -> None:
        start = getattr(self.http, "start", None)
        if start is not None:
            await start()

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        if request.destination is not None:
            return await self.brokers.send(request)
        return await self.http.send(request)

    async def aclose(self) -> None:
        await self.brokers.aclose()
        await self.http.aclose()  # type: ignore[attr-defined]
