"""The httpx Sender, for tests and the simulator (production runs ``aiohttp_sender``).

Both make the same decisions, ``core.sending``'s: the destination guard, the capture
bounds and the outcome of an attempt; this module is their I/O over httpx and httpcore.

``GuardedTransport`` judges the URL host once per request (``check_destination``): an
address literal by the address it denotes, a name by every address the resolver returns.
The checked address is then *pinned*: the connection goes to it and nowhere else, so DNS
rebinding cannot switch it. A literal host is rewritten to its canonical address (TLS
then verifies the certificate for that IP, as it would have). A name stays in the URL, so
``Host``, TLS SNI and certificate verification use the name and connections are pooled
per name (pooling per IP would let a connection verified for one name carry requests for
another name on the same IP); the checked address travels in a context variable to
``PinnedBackend.connect_tcp``, which connects to exactly that address, never resolves
anything, refuses a connect it has no pin for and re-checks the address.

Bounded capture: ``PinnedBackend`` streams read what ``ResponseBudget`` allows per
response (over TLS: the plaintext handed to the HTTP parser); ``HttpxSender`` reads at
most ``EXCERPT_BYTES`` + 1 of the body through any transport, under one
``asyncio.timeout`` around resolution, connect, send, head and body, so a receiver
dripping a byte at a time cannot extend the attempt. ``HttpxSender`` maps every failure
to an ``AttemptOutcome``; it never raises for network or HTTP failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import httpcore
import httpx

from ..core.retry import AttemptOutcome
from ..core.sending import (
    EXCERPT_BYTES,
    HEADERS_BYTES,
    CaptureLimitReached,
    DestinationRefused,
    Failure,
    ResponseBudget,
    SendError,
    Stage,
    attempt_deadline,
    failure_outcome,
    head_text,
    host_literal,
    response_outcome,
    timeout_outcome,
)
from ..core.urlguard import IPAddress, Network, address_allowed
from ..runtime.destinations import check_destination
from ..runtime.ports import OutboundRequest, Resolver

__all__ = ["GuardedTransport", "HttpxSender", "LifoPool", "PinnedBackend", "PinnedHTTPTransport"]

# (host as it appears in the URL, port, checked address) of the request being sent
_PIN: contextvars.ContextVar[tuple[str, int, IPAddress] | None] = contextvars.ContextVar(
    "regionsync_sender_pin", default=None
)


class _BoundedStream(httpcore.AsyncNetworkStream):
    """A network stream that reads at most what ``ResponseBudget`` allows per response:
    each request write starts a new one; a read once it is spent raises
    ``CaptureLimitReached``."""

    def __init__(self, inner: httpcore.AsyncNetworkStream, head_limit: int, body_limit: int):
        self.inner = inner
        self.budget = ResponseBudget(head_limit, body_limit)
        self.received = 0  # bytes read from the stream, for tests and benchmarks

    # httpcore's interface passes per-operation timeouts; the sender's deadline covers all
    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        self.budget.reset()
        await self.inner.write(buffer, timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        if self.budget.spent:
            raise CaptureLimitReached(f"response body exceeds {self.budget.body_limit} bytes")
        data = await self.inner.read(self.budget.want(max_bytes), timeout)
        self.received += len(data)
        self.budget.feed(data)  # all of it: the read asked for no more than the budget
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        tls = await self.inner.start_tls(ssl_context, server_hostname, timeout)
        return _BoundedStream(tls, self.budget.head_limit, self.budget.body_limit)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """httpcore network backend: connects only to the address ``GuardedTransport`` pinned
    for the current request, re-checks it, and bounds what is read (``_BoundedStream``)."""

    def __init__(
        self,
        allow: Sequence[Network] = (),
        inner: httpcore.AsyncNetworkBackend | None = None,
        head_limit: int = HEADERS_BYTES,
        body_limit: int = EXCERPT_BYTES,
    ):
        self.allow = tuple(allow)
        self.inner = inner or httpcore.AnyIOBackend()
        self.head_limit = head_limit
        self.body_limit = body_limit

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        pin = _PIN.get()
        if pin is None or pin[0] != host.lower() or pin[1] != port:
            raise DestinationRefused(f"no checked address for {host}:{port}; not connecting")
        addr = pin[2]
        if not address_allowed(addr, self.allow):  # defence in depth; the guard checked
            raise DestinationRefused(f"{addr} is not an allowed address")
        stream = await self.inner.connect_tcp(
            str(addr), port, timeout, local_address=local_address, socket_options=socket_options
        )
        return _BoundedStream(stream, self.head_limit, self.body_limit)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise DestinationRefused("deliveries never use unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _PooledStream:
    """A response body stream that hands its connection back to ``LifoPool`` once the
    response is closed (idle again after a complete response, else dropped)."""

    def __init__(self, inner: Any, pool: LifoPool, key: tuple, conn: Any):
        self.inner, self.pool, self.key, self.conn = inner, pool, key, conn

    async def __aiter__(self) -> Any:
        async for part in self.inner:
            yield part

    async def aclose(self) -> None:
        try:
            if hasattr(self.inner, "aclose"):
                await self.inner.aclose()
        finally:
            await self.pool.release(self.key, self.conn)


class LifoPool:
    """Keep-alive HTTP/1.1 connections per origin, taken and put back in O(1).

    httpcore's ``AsyncConnectionPool`` re-examines every connection (a readability
    syscall each, and a quadratic idle count) on every request and every response close,
    which dominated a node's delivery profile at 64 connections. Here a request takes the
    most recently used idle connection of its origin (checking only that one for expiry
    or a close by the server), else opens a new one; no global connection cap (lanes cap
    in-flight requests per endpoint). At most ``max_keepalive`` idle connections are kept;
    idle ones past ``keepalive_expiry`` seconds are closed by a sweep at most once a second.
    """

    def __init__(
        self,
        ssl_context: Any,
        network_backend: httpcore.AsyncNetworkBackend,
        max_keepalive: int = 256,
        keepalive_expiry: float = 15.0,
    ):
        self.ssl_context, self.backend = ssl_context, network_backend
        self.max_keepalive, self.keepalive_expiry = max_keepalive, keepalive_expiry
        self._idle: dict[tuple, list[Any]] = {}
        self._n_idle = 0
        self._swept = time.monotonic()

    def _take(self, key: tuple, closing: list[Any]) -> Any:
        stack = self._idle.get(key)
        while stack:
            conn = stack.pop()
            self._n_idle -= 1
            if conn.is_closed() or conn.has_expired():
                closing.append(conn)
                continue
            return conn
        return None

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        scheme = request.url.scheme.decode()
        if scheme not in ("http", "https"):
            raise httpcore.UnsupportedProtocol(f"unsupported scheme {scheme!r}")
        origin = request.url.origin
        key = (origin.scheme, origin.host, origin.port)
        closing: list[Any] = []
        try:
            while True:
                conn = self._take(key, closing)
                fresh = conn is None
                if conn is None:
                    conn = httpcore.AsyncHTTPConnection(
                        origin, ssl_context=self.ssl_context, retries=0,
                        keepalive_expiry=self.keepalive_expiry, network_backend=self.backend,
                    )  # fmt: skip
                try:
                    response = await conn.handle_async_request(request)
                except httpcore.ConnectionNotAvailable:
                    if fresh:
                        raise
                    closing.append(conn)  # closed under us meanwhile: take another
                    continue
                except BaseException:
                    closing.append(conn)
                    raise
                return httpcore.Response(
                    status=response.status, headers=response.headers,
                    content=_PooledStream(response.stream, self, key, conn),
                    extensions=response.extensions,
                )  # fmt: skip
        finally:
            await _close_all(closing)

    async def release(self, key: tuple, conn: Any) -> None:
        """Put ``conn`` back after its response closed (kept only if idle)."""
        closing: list[Any] = []
        if conn.is_idle() and self._n_idle < self.max_keepalive:
            self._idle.setdefault(key, []).append(conn)
            self._n_idle += 1
        elif not conn.is_closed():
            closing.append(conn)
        now = time.monotonic()
        if now - self._swept >= 1.0:
            self._swept = now
            for k, stack in list(self._idle.items()):
                keep = [c for c in stack if not (c.is_closed() or c.has_expired())]
                closing += [c for c in stack if c not in keep]
                self._n_idle -= len(stack) - len(keep)
                if keep:
                    self._idle[k] = keep
                else:
                    del self._idle[k]
        await _close_all(closing)

    async def aclose(self) -> None:
        closing = [c for stack in self._idle.values() for c in stack]
        self._idle, self._n_idle = {}, 0
        await _close_all(closing)


async def _close_all(conns: list[Any]) -> None:
    for conn in conns:
        with contextlib.suppress(Exception):
            await asyncio.shield(conn.aclose())


class PinnedHTTPTransport(httpx.AsyncHTTPTransport):
    """``httpx.AsyncHTTPTransport`` over ``PinnedBackend`` and a ``LifoPool``: no proxies
    from the environment, no retries, no global connection cap (lanes cap in-flight
    requests per endpoint; a pool-wide cap would let a tarpit endpoint starve the others)."""

    def __init__(
        self,
        allow: Sequence[Network] = (),
        keepalive: int = 256,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ):
        super().__init__(retries=0, trust_env=False)
        # httpx has no argument for the pool; it calls the documented httpcore interface
        self._pool = LifoPool(  # type: ignore[assignment]
            httpx.create_ssl_context(),
            PinnedBackend(allow, inner=network_backend),
            max_keepalive=keepalive,
            keepalive_expiry=15.0,
        )


async def _trace(request: httpx.Request, name: str) -> None:
    trace = request.extensions.get("trace")
    if trace is not None:
        await trace(name, {})


class GuardedTransport(httpx.AsyncBaseTransport):
    """Wraps ``inner``; every request goes to a checked, pinned IP address.

    The pinned address is also put in ``request.extensions["regionsync.pinned"]`` (an
    ``ipaddress`` object) for inner transports that want to see it (tests do).
    """

    def __init__(
        self,
        resolver: Resolver,
        allow: Sequence[Network] = (),
        inner: httpx.AsyncBaseTransport | None = None,
    ):
        self.resolver = resolver
        self.allow = tuple(allow)
        self.inner = inner or PinnedHTTPTransport(self.allow)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        pinned = await check_destination(
            self.resolver, self.allow, host, port, lambda name: _trace(request, name)
        )
        if host_literal(host) is not None and str(pinned) != host:
            # a literal in another spelling: connect to (and verify TLS for) the address
            request.url = request.url.copy_with(
                host=str(pinned) if pinned.version == 4 else f"[{pinned}]"
            )
        request.extensions = {**request.extensions, "regionsync.pinned": pinned}
        token = _PIN.set((request.url.raw_host.decode("ascii").lower(), port, pinned))
        try:
            return await self.inner.handle_async_request(request)
        finally:
            _PIN.reset(token)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Progress:
    """How far an attempt got (``Stage``), from httpcore's ``trace`` extension and the
    guard's events; a transport that reports none leaves it ``UNKNOWN``."""

    __slots__ = ("stage",)

    def __init__(self) -> None:
        self.stage = Stage.UNKNOWN

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        if self.stage is Stage.SENDING or ".send_request" in name:
            self.stage = Stage.SENDING
        elif name == "guard.resolve.started":
            self.stage = Stage.RESOLVING
        else:
            self.stage = Stage.CONNECTING


def _failure(exc: Exception) -> Failure | None:
    """How an error of httpx (or the guard, or the capture) ends an attempt."""
    if isinstance(exc, SendError):
        return exc.failure
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return Failure.CONNECT
    if isinstance(exc, httpx.HTTPError):
        return Failure.NETWORK
    if isinstance(exc, (httpx.InvalidURL, ValueError, TypeError)):  # httpx cannot encode it
        return Failure.BAD_REQUEST
    return None


class HttpxSender:
    """One POST per attempt over ``client``; total deadline enforced around the whole call.

    ``timer`` is the monotonic clock (seconds) that attempt latency is measured with:
    ``time.perf_counter`` by default; the simulator passes its virtual clock. ``wall`` is
    Unix time in seconds for HTTP-date ``Retry-After`` values (``time.time`` by default).
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        timer: Callable[[], float] | None = None,
        wall: Callable[[], float] | None = None,
    ):
        self.client = client
        self.timer = timer or time.perf_counter
        self.wall = wall or time.time

    @classmethod
    def guarded(
        cls,
        resolver: Resolver,
        allow: Sequence[Network] = (),
        *,
        timer: Callable[[], float] | None = None,
        wall: Callable[[], float] | None = None,
    ) -> HttpxSender:
        """A sender whose every connection is checked and pinned (``GuardedTransport``)."""
        transport = GuardedTransport(resolver, allow)
        client = httpx.AsyncClient(
            transport=transport, follow_redirects=False, timeout=None, trust_env=False
        )
        return cls(client, timer=timer, wall=wall)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        start = self.timer()
        progress = _Progress()
        # identity: the excerpt is the body as sent, and no decompression bomb is inflated
        headers = {"accept-encoding": "identity", **request.headers}
        body = bytearray()
        try:
            async with asyncio.timeout(attempt_deadline(request.timeout_s)):
                async with self.client.stream(
                    "POST", request.url, content=request.body, headers=headers,
                    follow_redirects=False, extensions={"trace": progress},
                ) as resp:  # fmt: skip
                    await _read_excerpt(resp, body)
        except TimeoutError:
            return timeout_outcome(progress.stage, (self.timer() - start) * 1000)
        except Exception as exc:
            failure = _failure(exc)
            if failure is None:
                raise
            return failure_outcome(failure, exc, (self.timer() - start) * 1000)
        return response_outcome(
            resp.status_code, (self.timer() - start) * 1000, body, head_text(resp.headers.raw),
            resp.headers.get("retry-after"), self.wall(),
        )  # fmt: skip


async def _read_excerpt(resp: httpx.Response, body: bytearray) -> None:
    """Up to ``EXCERPT_BYTES`` + 1 bytes of ``resp``'s body into ``body``."""
    if resp.is_stream_consumed:  # a transport that answered with content=
        body += resp.content[: EXCERPT_BYTES + 1]
        return
    try:
        async for chunk in resp.aiter_raw():
            body += chunk
            if len(body) > EXCERPT_BYTES:
                break
    except CaptureLimitReached:
        pass  # chunked framing counts too: the excerpt is what we have
