"""The production Sender on aiohttp, run in a child process by ``process_sender``.

It makes ``core.sending``'s decisions (the destination guard, the capture bounds, the
outcome of an attempt), as ``HttpxSender`` (sender.py, for tests and the simulator)
does; this module is their I/O over aiohttp, at a fraction of httpx's CPU per attempt
(bench/delivery_rate.py).

The destination guard runs at every connect (``runtime.destinations.check_destination``):
an address literal is judged by the address it denotes before the request, the URL then
rewritten to the canonical address; a name by every address the resolver returns, in
``PinnedResolver``, the connector's only resolver, which answers with exactly the checked
address (any non-allowed address refuses the attempt, final). Connections are pooled per
name (Host, TLS SNI and certificate checks use the name), so a request on a kept-alive
connection goes to the address that connection was checked and pinned to; a name is
resolved again for each new connection, never for a reused one. No redirects are followed, no
cookies kept, no proxies taken from the environment; one ``asyncio.timeout`` covers
resolution, connect, send, head and body.

Bounded capture (``BoundedHandler``, the connector's protocol, over ``ResponseBudget``): a
response head over ``HEADERS_BYTES`` fails the attempt (``bad_response``) and closes the
connection; after the head at most ``EXCERPT_BYTES`` + 1 body bytes are handed to the
parser, then the socket is paused and the connection closed. Sockets have a small receive
buffer (``RCVBUF_BYTES``), so what the kernel hands over in one read past those bounds is
at most one buffer.

aiohttp's ``ResponseHandler`` and the connector's ``_factory`` are not documented API;
checked against aiohttp 3.14 (tests/delivery/test_aiohttp_sender.py fails if they move).
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.client_proto import ResponseHandler
from yarl import URL

from ..core.retry import AttemptOutcome
from ..core.sending import (
    EXCERPT_BYTES,
    HEADERS_BYTES,
    Failure,
    ResponseBudget,
    ResponseHeadTooLarge,
    SendError,
    Stage,
    attempt_deadline,
    failure_outcome,
    head_text,
    literal_destination,
    response_outcome,
    timeout_outcome,
)
from ..core.urlguard import Network
from ..runtime.destinations import check_destination
from ..runtime.ports import OutboundRequest, Resolver

__all__ = ["RCVBUF_BYTES", "AiohttpSender", "BoundedHandler", "PinnedResolver"]

RCVBUF_BYTES = 8192  # SO_RCVBUF asked for (Linux doubles it for bookkeeping)
_LITERALS_KEPT = 4096  # address literals whose verdict a sender keeps

# how far the current attempt got: set once its request is about to be written
_PROGRESS: contextvars.ContextVar[_Progress | None] = contextvars.ContextVar(
    "regionsync_aiohttp_progress", default=None
)


class PinnedResolver(AbstractResolver):
    """The connector's resolver, asked once per new connection to a name: judges the name
    with ``check_destination`` over ``resolver`` and answers with the one checked address
    (raises ``DestinationRefused`` or ``ResolutionFailed``, which aiohttp passes through)."""

    def __init__(self, resolver: Resolver, allow: Sequence[Network] = ()):
        self.resolver = resolver
        self.allow = tuple(allow)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        progress = _PROGRESS.get()
        if progress is not None:
            progress.stage = Stage.RESOLVING
        addr = await check_destination(self.resolver, self.allow, host, port)
        if progress is not None:
            progress.stage = Stage.CONNECTING
        fam = socket.AF_INET if addr.version == 4 else socket.AF_INET6
        flags = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
        return [ResolveResult(hostname=host, host=str(addr), port=port, family=fam, proto=0,
                              flags=flags)]  # fmt: skip

    async def close(self) -> None:
        return None


class BoundedHandler(ResponseHandler):
    """aiohttp's connection protocol, reading at most what ``ResponseBudget`` allows.

    ``set_response_params`` (called once per request, before its response is read)
    starts a new budget. A head over ``HEADERS_BYTES`` fails the response with
    ``ResponseHeadTooLarge``; once the budget is spent reading stops for good (the sender
    closes the connection). ``received`` counts bytes from the socket.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, stats: list[Any] | None = None):
        super().__init__(loop)
        self.received = 0
        self.peer: tuple[str, int] | None = None
        self.budget = ResponseBudget()
        self._stopped = False
        if stats is not None:
            stats.append(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        self.peer = (peer[0], peer[1]) if peer else None

    def set_response_params(self, **kwargs: Any) -> None:
        # aiohttp calls this on the connection it got, right before writing the request
        progress = _PROGRESS.get()
        if progress is not None:
            progress.stage = Stage.SENDING
        self.budget.reset()
        super().set_response_params(**kwargs)

    def resume_reading(self, *args: Any, **kwargs: Any) -> None:
        if not self._stopped:
            super().resume_reading(*args, **kwargs)

    def data_received(self, data: bytes) -> None:
        if not data:
            return super().data_received(data)
        self.received += len(data)
        if self._stopped:
            return
        try:
            keep = self.budget.feed(data)
        except ResponseHeadTooLarge as exc:
            return self._fail_head(exc)
        if keep:
            super().data_received(data[:keep] if keep < len(data) else data)
        if self.budget.spent:
            self._stop()

    def _stop(self) -> None:
        self._stopped = True
        self._should_close = True  # never back to the pool with unread bytes behind
        if self.transport is not None:
            self.transport.pause_reading()
        if self._payload is not None:  # the reader gets what passed, then the end
            self._payload.feed_eof()

    def _fail_head(self, exc: ResponseHeadTooLarge) -> None:
        self._stopped = True
        self._should_close = True
        if self.transport is not None:
            self.transport.close()
        self.set_exception(exc)


def _small_rcvbuf_socket(addr_info: Any) -> socket.socket:
    family, type_, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=type_, proto=proto)
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
    return sock


class _PinnedConnector(aiohttp.TCPConnector):
    def __init__(self, resolver: Resolver, allow: Sequence[Network], stats: list[Any] | None):
        super().__init__(
            resolver=PinnedResolver(resolver, allow),
            use_dns_cache=False,
            limit=0,  # lanes cap in-flight requests per endpoint; no global cap
            limit_per_host=0,
            keepalive_timeout=15.0,
            socket_factory=_small_rcvbuf_socket,
        )
        self._factory = partial(BoundedHandler, loop=self._loop, stats=stats)


class _Progress:
    __slots__ = ("stage",)

    def __init__(self) -> None:
        self.stage = Stage.CONNECTING  # until PinnedResolver or BoundedHandler says more


def _failure(exc: Exception) -> tuple[Failure, BaseException] | None:
    """How an error of aiohttp (or the guard, or the capture) ends an attempt, and the
    error that explains it (aiohttp wraps some as their cause)."""
    if isinstance(exc, aiohttp.ClientError) and isinstance(exc.__cause__, SendError):
        exc = exc.__cause__
    if isinstance(exc, SendError):
        return exc.failure, exc
    if isinstance(exc, aiohttp.ClientConnectorError):
        return Failure.CONNECT, exc
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return Failure.NETWORK, exc
    if isinstance(exc, (ValueError, TypeError)):  # aiohttp cannot encode it
        return Failure.BAD_REQUEST, exc
    return None


class AiohttpSender:
    """One POST per attempt over a pinned aiohttp connector; see the module docstring.

    ``timer`` is the monotonic clock (seconds) attempt latency is measured with;
    ``wall`` is Unix time for HTTP-date ``Retry-After`` values. ``stats``, if given,
    collects every connection's ``BoundedHandler`` (tests read ``peer`` and ``received``).
    Create it inside a running event loop; ``aclose`` when done.
    """

    def __init__(
        self,
        resolver: Resolver,
        allow: Sequence[Network] = (),
        *,
        timer: Callable[[], float] | None = None,
        wall: Callable[[], float] | None = None,
        stats: list[Any] | None = None,
    ):
        self.resolver = resolver
        self.allow = tuple(allow)
        self.timer = timer or time.perf_counter
        self.wall = wall or time.time
        self._stats = stats
        self._session: aiohttp.ClientSession | None = None
        # allowed address literals -> their canonical text: the verdict depends only on
        # the host and ``allow`` (fixed), so it is judged once, not per attempt (issue 17)
        self._literals: dict[str, str] = {}

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=_PinnedConnector(self.resolver, self.allow, self._stats),
                timeout=aiohttp.ClientTimeout(total=None),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                auto_decompress=False,
                max_line_size=HEADERS_BYTES,
                max_field_size=HEADERS_BYTES,
                max_headers=HEADERS_BYTES // 3,  # the head's byte bound governs, not a count
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _pin_literal(self, url: URL, host: str) -> URL:
        """``url`` with an address literal host judged and in its canonical spelling
        (aiohttp never resolves a literal, so ``PinnedResolver`` would not see it)."""
        pinned = self._literals.get(host)
        if pinned is None:
            checked = literal_destination(host, self.allow)
            if checked is None:
                return url  # a name: judged at connect
            pinned = str(checked)
            if len(self._literals) >= _LITERALS_KEPT:
                self._literals.clear()
            self._literals[host] = pinned
        return url.with_host(pinned)

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        start = self.timer()
        progress = _Progress()
        headers = {"accept-encoding": "identity", **request.headers}
        body = bytearray()
        try:
            url = URL(request.url)
            host = url.raw_host
            if not host or url.port is None or url.scheme not in ("http", "https"):
                raise ValueError(f"not an absolute http(s) URL: {request.url!r}")
            async with asyncio.timeout(attempt_deadline(request.timeout_s)):
                url = self._pin_literal(url, host)
                mark = _PROGRESS.set(progress)
                try:
                    resp = await self._client().post(
                        url, data=request.body, headers=headers, allow_redirects=False
                    )
                finally:
                    _PROGRESS.reset(mark)
                await _read_excerpt(resp, body)
        except TimeoutError:
            return timeout_outcome(progress.stage, (self.timer() - start) * 1000)
        except Exception as exc:
            failure = _failure(exc)
            if failure is None:
                raise
            return failure_outcome(*failure, (self.timer() - start) * 1000)
        return response_outcome(
            resp.status, (self.timer() - start) * 1000, body, head_text(resp.raw_headers),
            resp.headers.get("retry-after"), self.wall(),
        )  # fmt: skip


async def _read_excerpt(resp: aiohttp.ClientResponse, body: bytearray) -> None:
    """Up to ``EXCERPT_BYTES`` + 1 bytes of ``resp``'s body into ``body``; then the
    connection goes back to the pool if the response ended, else it is closed."""
    try:
        while len(body) <= EXCERPT_BYTES:
            chunk = await resp.content.read(EXCERPT_BYTES + 1 - len(body))
            if not chunk:
                break
            body += chunk
    finally:
        if len(body) > EXCERPT_BYTES or not resp.content.at_eof():
            resp.close()  # the rest is never read
        else:
            resp.release()  # back to the pool unless the handler stopped
