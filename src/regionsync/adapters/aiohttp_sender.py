"""The production Sender on aiohttp: the same guarantees as ``HttpxSender`` over
``GuardedTransport``, at a fraction of the CPU per attempt (bench/delivery_rate.py).

The destination guard runs at every connect, as ``check_destination`` (sender.py) judges:
an address literal by the address it denotes (checked before the request, the URL then
rewritten to the canonical address), a name by every address the resolver returns, in
``PinnedResolver``, the connector's only resolver, which answers with exactly the checked
address (any non-allowed address refuses the attempt, final). Connections are pooled per
name (Host, TLS SNI and certificate checks use the name), so a request on a kept-alive
connection goes to the address that connection was checked and pinned to; a name is
resolved again for each new connection, never for a reused one. No redirects are followed, no
cookies kept, no proxies taken from the environment; one ``asyncio.timeout`` covers
resolution, connect, send, head and body.

Bounded capture (``BoundedHandler``, the connector's protocol): a response head over
``HEADERS_BYTES`` fails the attempt (``bad_response``) and closes the connection; after the
head at most ``EXCERPT_BYTES`` + 1 body bytes are handed to the parser, then the socket is
paused and the connection closed. Sockets have a small receive buffer (``RCVBUF_BYTES``),
so what the kernel hands over in one read past those bounds is at most one buffer.

aiohttp's ``ResponseHandler`` and the connector's ``_factory`` are not documented API;
checked against aiohttp 3.14 (tests/delivery/test_aiohttp_sender.py fails if they move).
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import socket
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.client_proto import ResponseHandler
from yarl import URL

from ..core.retry import AttemptOutcome, OutcomeKind
from ..core.urlguard import Network
from ..runtime.ports import OutboundRequest, Resolver
from .sender import (
    EXCERPT_BYTES,
    HEADERS_BYTES,
    MAX_TIMEOUT_S,
    DestinationRefused,
    ResolutionFailed,
    ResponseHeadTooLarge,
    check_destination,
    head_text,
    host_literal,
    response_outcome,
)

__all__ = ["RCVBUF_BYTES", "AiohttpSender", "BoundedHandler", "PinnedResolver"]

RCVBUF_BYTES = 8192  # SO_RCVBUF asked for (Linux doubles it for bookkeeping)
_LITERALS_KEPT = 4096  # address literals whose verdict a sender keeps

# how far the current attempt got: set once its request is about to be written
_PROGRESS: contextvars.ContextVar[_Progress | None] = contextvars.ContextVar(
    "regionsync_aiohttp_progress", default=None
)
_BLANK_LINE = re.compile(rb"\n\r?\n")  # where a head ends, as h11 and llhttp find it


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
            progress.resolving = True
        addr = await check_destination(self.resolver, self.allow, host, port)
        if progress is not None:
            progress.resolving = False
        fam = socket.AF_INET if addr.version == 4 else socket.AF_INET6
        flags = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
        return [ResolveResult(hostname=host, host=str(addr), port=port, family=fam, proto=0,
                              flags=flags)]  # fmt: skip

    async def close(self) -> None:
        return None


class BoundedHandler(ResponseHandler):
    """aiohttp's connection protocol, reading at most the capture bound of each response.

    ``set_response_params`` (called once per request, before its response is read)
    starts a new budget. Head phase: bytes until the head's blank line, skipping 1xx
    heads; over ``HEADERS_BYTES`` the response fails with ``ResponseHeadTooLarge``. Body
    phase: at most ``EXCERPT_BYTES`` + 1 bytes pass to the parser, then reading stops for
    good (the sender closes the connection). ``received`` counts bytes from the socket.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, stats: list[Any] | None = None):
        super().__init__(loop)
        self.received = 0
        self.peer: tuple[str, int] | None = None
        self._head = bytearray()
        self._in_head = True
        self._body_left = EXCERPT_BYTES + 1
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
            progress.sending = True
        self._head = bytearray()
        self._in_head = True
        self._body_left = EXCERPT_BYTES + 1
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
        if self._in_head:
            self._head += data
            while True:
                match = _BLANK_LINE.search(self._head)
                end = -1 if match is None else match.end()
                if end < 0:
                    if len(self._head) > HEADERS_BYTES:
                        return self._fail_head()
                    return super().data_received(data)
                if end > HEADERS_BYTES:
                    return self._fail_head()
                if self._head[9:10] == b"1":  # "HTTP/1.1 1xx": an interim head
                    del self._head[:end]
                    continue
                body = len(self._head) - end
                self._in_head = False
                self._head = bytearray()
                keep = len(data) - max(body - self._body_left, 0)
                self._body_left -= body
                data = data[:keep] if keep < len(data) else data
                break
        else:
            if len(data) > self._body_left:
                data = data[: self._body_left]
            self._body_left -= len(data)
        if data:
            super().data_received(data)
        if self._body_left <= 0:
            self._stop()

    def _stop(self) -> None:
        self._stopped = True
        self._should_close = True  # never back to the pool with unread bytes behind
        if self.transport is not None:
            self.transport.pause_reading()
        if self._payload is not None:  # the reader gets what passed, then the end
            self._payload.feed_eof()

    def _fail_head(self) -> None:
        self._stopped = True
        self._should_close = True
        if self.transport is not None:
            self.transport.close()
        self.set_exception(ResponseHeadTooLarge(f"response head exceeds {HEADERS_BYTES} bytes"))


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
    __slots__ = ("resolving", "sending")

    def __init__(self) -> None:
        self.resolving = False  # in PinnedResolver
        self.sending = False  # the request is about to be written (or was)


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

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        timer = self.timer
        start = timer()

        def ms() -> float:
            return (timer() - start) * 1000

        def failed(reason: str, text: str, final: bool = False) -> AttemptOutcome:
            return AttemptOutcome(
                OutcomeKind.FAILED, reason=reason, latency_ms=ms(), response_excerpt=text,
                final=final,
            )  # fmt: skip

        try:
            url = URL(request.url)
            host, port = url.raw_host, url.port
            if not host or port is None or url.scheme not in ("http", "https"):
                raise ValueError(f"not an absolute http(s) URL: {request.url!r}")
        except (ValueError, TypeError) as exc:
            return failed("bad_request", f"{type(exc).__name__}: {exc}", final=True)
        progress = _Progress()
        headers = {"accept-encoding": "identity", **request.headers}
        body = bytearray()
        try:
            async with asyncio.timeout(min(request.timeout_s, MAX_TIMEOUT_S)):
                pinned = self._literals.get(host)
                if pinned is None:
                    try:
                        literal = host_literal(host)
                    except ValueError as exc:
                        raise DestinationRefused(str(exc)) from None
                    if literal is not None:  # judged here: aiohttp never resolves a literal
                        checked = await check_destination(self.resolver, self.allow, host, port)
                        pinned = str(checked)  # its canonical spelling
                        if len(self._literals) >= _LITERALS_KEPT:
                            self._literals.clear()
                        self._literals[host] = pinned
                if pinned is not None:
                    url = url.with_host(pinned)
                mark = _PROGRESS.set(progress)
                try:
                    resp = await self._client().post(
                        url, data=request.body, headers=headers, allow_redirects=False
                    )
                finally:
                    _PROGRESS.reset(mark)
                try:
                    while len(body) <= EXCERPT_BYTES:
                        chunk = await resp.content.read(EXCERPT_BYTES + 1 - len(body))
                        if not chunk:
                            break
                        body += chunk
                finally:
                    if len(body) > EXCERPT_BYTES or not resp.content.at_eof():
                        resp.close()  # the rest is never read: the connection goes
                    else:
                        resp.release()  # back to the pool unless the handler stopped
        except TimeoutError:
            if progress.resolving:
                return failed("dns", "resolution timed out")
            if not progress.sending:
                return failed("connect", "timed out before the request was sent")
            return AttemptOutcome(OutcomeKind.INDETERMINATE, reason="timeout", latency_ms=ms())
        except DestinationRefused as exc:
            return failed("ssrf", str(exc), final=True)
        except ResolutionFailed as exc:
            return failed("dns", str(exc))
        except ResponseHeadTooLarge as exc:
            return failed("bad_response", str(exc))
        except aiohttp.ClientConnectorError as exc:
            cause = exc.__cause__ or exc.os_error
            if isinstance(cause, DestinationRefused):
                return failed("ssrf", str(cause), final=True)
            return failed("connect", str(exc))
        except (aiohttp.ClientResponseError, aiohttp.ClientPayloadError) as exc:
            if isinstance(exc.__cause__, ResponseHeadTooLarge):
                return failed("bad_response", str(exc.__cause__))
            return AttemptOutcome(
                OutcomeKind.INDETERMINATE, reason="network", latency_ms=ms(),
                response_excerpt=f"{type(exc).__name__}: {exc}",
            )  # fmt: skip
        except (aiohttp.ClientError, OSError) as exc:
            return AttemptOutcome(
                OutcomeKind.INDETERMINATE, reason="network", latency_ms=ms(),
                response_excerpt=f"{type(exc).__name__}: {exc}",
            )  # fmt: skip
        except (ValueError, TypeError) as exc:  # aiohttp cannot encode it
            return failed("bad_request", f"{type(exc).__name__}: {exc}", final=True)
        return response_outcome(
            resp.status, ms(), body, head_text(resp.raw_headers),
            resp.headers.get("retry-after"), self.wall(),
        )  # fmt: skip
