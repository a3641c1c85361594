"""The production Sender: httpx over a transport that refuses non-public destinations.

``GuardedTransport`` judges the URL host once per request: an address literal (in any
spelling ``core.urlguard.parse_host_literal`` reads) by the address it denotes, a name by
every address the resolver returns. If any address is not allowed the request is refused
(``DestinationRefused``, final); if the name does not resolve, ``ResolutionFailed``
(retryable). The checked address is then *pinned*: the connection goes to it and nowhere
else, so DNS rebinding cannot switch it.

How the pin works. A literal host is rewritten to its canonical address (TLS then
verifies the certificate for that IP, as it would have). A name stays in the URL, so
``Host``, TLS SNI and certificate verification use the name and httpcore pools
connections per name (pooling per IP would let a connection verified for one name carry
requests for another name on the same IP); the checked address travels in a context
variable to ``PinnedBackend.connect_tcp``, which connects to exactly that address, never
resolves anything, refuses a connect it has no pin for and re-checks the address.

Bounded capture. ``PinnedBackend`` streams cap what is read from the socket per response:
the head in reads of at most 4 KiB + 1 until its blank line, at most 8 KiB of head, then
at most 4 KiB + 1 bytes after the head (over TLS: plaintext handed to the HTTP parser).
``HttpxSender`` reads at most 4 KiB + 1 of the body through any transport, under one
``asyncio.timeout`` around resolution, connect, send, head and body, so a receiver
dripping a byte at a time cannot extend the attempt. ``HttpxSender`` maps every failure
to an ``AttemptOutcome``; it never raises for network or HTTP failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import functools
import ipaddress
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import httpcore
import httpx

from ..core.retry import AttemptOutcome, OutcomeKind
from ..core.urlguard import IPAddress, Network, address_allowed, parse_host_literal
from ..runtime.ports import OutboundRequest, Resolver

__all__ = [
    "EXCERPT_BYTES",
    "HEADERS_BYTES",
    "MAX_TIMEOUT_S",
    "CaptureLimitReached",
    "DestinationRefused",
    "GuardedTransport",
    "HttpxSender",
    "PinnedBackend",
    "ResolutionFailed",
    "ResponseHeadTooLarge",
    "check_destination",
    "head_text",
    "response_outcome",
    "host_literal",
    "retry_after",
]

EXCERPT_BYTES = 4096  # response body kept per attempt
HEADERS_BYTES = 8192  # response head kept (and read) per attempt
MAX_TIMEOUT_S = 60.0  # an attempt's total deadline never exceeds this

# (host as it appears in the URL, port, checked address) of the request being sent
_PIN: contextvars.ContextVar[tuple[str, int, IPAddress] | None] = contextvars.ContextVar(
    "regionsync_sender_pin", default=None
)


class DestinationRefused(httpx.TransportError):
    """The destination is, or resolves to, an address deliveries may not reach (final)."""


class ResolutionFailed(httpx.TransportError):
    """The destination's name did not resolve (retryable: DNS failures are often brief)."""


class ResponseHeadTooLarge(Exception):
    """The receiver's response head exceeded ``HEADERS_BYTES``."""


class CaptureLimitReached(Exception):
    """The capture bound was reached before the response ended; the rest is not read."""


class _BoundedStream(httpcore.AsyncNetworkStream):
    """A network stream that reads at most the capture bound of each response.

    Each request write starts a new response budget (HTTP/1.1 without pipelining: a
    response is read only after its request was written). Head phase: reads of at most
    ``body_limit + 1`` bytes until the head's blank line (``\\n\\r?\\n``, as h11 finds it);
    1xx heads are skipped; a head over ``head_limit`` raises ``ResponseHeadTooLarge``.
    Body phase: at most ``body_limit + 1`` bytes after the head, counting body bytes that
    arrived with the head; a read past that raises ``CaptureLimitReached``.
    """

    _BLANK_LINE = re.compile(rb"\n\r?\n")

    def __init__(self, inner: httpcore.AsyncNetworkStream, head_limit: int, body_limit: int):
        self.inner = inner
        self.head_limit = head_limit
        self.body_limit = body_limit
        self.received = 0  # bytes read from the stream, for tests and benchmarks
        self._reset()

    def _reset(self) -> None:
        self._head = bytearray()
        self._in_head = True
        self._body_left = self.body_limit + 1

    # httpcore's interface passes per-operation timeouts; the sender's deadline covers all
    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        self._reset()
        await self.inner.write(buffer, timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        if self._in_head:
            want = min(max_bytes, self.body_limit + 1)
        elif self._body_left <= 0:
            raise CaptureLimitReached(f"response body exceeds {self.body_limit} bytes")
        else:
            want = min(max_bytes, self._body_left)
        data = await self.inner.read(want, timeout)
        self.received += len(data)
        if self._in_head:
            self._head += data
            self._scan_head()
        else:
            self._body_left -= len(data)
        return data

    def _scan_head(self) -> None:
        while True:
            match = self._BLANK_LINE.search(self._head)
            if match is None:
                if len(self._head) > self.head_limit:
                    raise ResponseHeadTooLarge(f"response head exceeds {self.head_limit} bytes")
                return
            end = match.end()
            if end > self.head_limit:
                raise ResponseHeadTooLarge(f"response head exceeds {self.head_limit} bytes")
            if self._head[9:10] == b"1":  # "HTTP/1.1 1xx": an interim head, another follows
                del self._head[:end]
                continue
            self._in_head = False
            self._body_left = self.body_limit + 1 - (len(self._head) - end)
            self._head = bytearray()
            return

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        tls = await self.inner.start_tls(ssl_context, server_hostname, timeout)
        return _BoundedStream(tls, self.head_limit, self.body_limit)

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


@functools.lru_cache(maxsize=4096)
def host_literal(host: str) -> IPAddress | None:
    """``core.urlguard.parse_host_literal``, memoised (a pure function of the host; an
    attempt asks it once or twice). Raises ValueError as it does."""
    return parse_host_literal(host)


@functools.lru_cache(maxsize=4096)
def _address(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


@functools.lru_cache(maxsize=4096)
def _allowed(addr: IPAddress, allow: tuple[Network, ...]) -> bool:
    return address_allowed(addr, allow)


async def check_destination(
    resolver: Resolver,
    allow: Sequence[Network],
    host: str,
    port: int,
    trace: Callable[[str], Awaitable[None]] | None = None,
) -> IPAddress:
    """The address an attempt to ``host``:``port`` may connect to (the first of the
    resolver's answers), judged as the module docstring says. Raises ``DestinationRefused``
    (final) if the host or any address it resolves to is not allowed, ``ResolutionFailed``
    (retryable) if the name does not resolve. ``trace`` gets ``guard.resolve.started`` and
    ``guard.resolve.complete`` around a lookup."""
    try:
        literal = host_literal(host)
    except ValueError as exc:
        raise DestinationRefused(str(exc)) from None
    if literal is not None:
        addrs: list[IPAddress] = [literal]
    else:
        if trace is not None:
            await trace("guard.resolve.started")
        try:
            found = await resolver.resolve(host, port)
        except (OSError, UnicodeError) as exc:
            raise ResolutionFailed(f"cannot resolve {host!r}: {exc}") from exc
        if trace is not None:
            await trace("guard.resolve.complete")
        if not found:
            raise ResolutionFailed(f"{host!r} resolves to no address")
        try:
            addrs = [_address(a) for a in found]
        except ValueError:
            raise DestinationRefused(f"{host!r} resolves to an unusable address {found}") from None
    bad = [str(a) for a in addrs if not _allowed(a, tuple(allow))]
    if bad:
        raise DestinationRefused(
            f"{host!r} is or resolves to a non-public address ({', '.join(bad)}); list "
            "its network in delivery.allow_private_networks to allow it"
        )
    return addrs[0]


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
        try:
            pinned = await check_destination(
                self.resolver, self.allow, host, port, lambda name: _trace(request, name)
            )
        except (DestinationRefused, ResolutionFailed) as exc:
            exc.request = request
            raise
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


def retry_after(value: str | None, now: float) -> float | None:
    """``Retry-After`` as seconds from ``now`` (Unix seconds): delta-seconds or an HTTP
    date (RFC 9110 10.2.3); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        return None
    return max(when.timestamp() - now, 0.0)


def response_outcome(
    code: int, latency_ms: float, body: bytes, head: str, retry_after_value: str | None, now: float
) -> AttemptOutcome:
    """The outcome of an attempt answered with status ``code``: 2xx succeeded, anything
    else failed (``redirect`` for 3xx: never followed, else ``http_<code>``), with the
    first ``EXCERPT_BYTES`` of ``body`` as text, the captured ``head`` and, for 429 and
    5xx, the ``Retry-After`` delay (seconds; ``now`` is wall time in seconds)."""
    text = bytes(body[:EXCERPT_BYTES]).decode("utf-8", "replace")
    if 200 <= code < 300:
        return AttemptOutcome(
            OutcomeKind.SUCCEEDED, status_code=code, latency_ms=latency_ms,
            response_excerpt=text, response_headers=head,
        )  # fmt: skip
    return AttemptOutcome(
        OutcomeKind.FAILED,
        status_code=code,
        reason="redirect" if 300 <= code < 400 else f"http_{code}",
        latency_ms=latency_ms,
        response_excerpt=text,
        retry_after_s=retry_after(retry_after_value, now) if code == 429 or code >= 500 else None,
        response_headers=head,
    )


def head_text(raw: Sequence[tuple[bytes, bytes]]) -> str:
    """A response head as ``name: value`` lines, at most ``HEADERS_BYTES`` characters."""
    text = "\n".join(f"{k.decode('latin-1')}: {v.decode('latin-1')}" for k, v in raw)
    return text[:HEADERS_BYTES]


class _Progress:
    """How far an attempt got, from httpcore's ``trace`` extension and the guard's
    events: a timeout before the request started going out is not indeterminate."""

    __slots__ = ("last", "sending")

    def __init__(self) -> None:
        self.last: str | None = None
        self.sending = False

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        self.last = name
        if ".send_request" in name:
            self.sending = True


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
        timer = self.timer
        start = timer()

        def ms() -> float:
            return (timer() - start) * 1000

        def failed(reason: str, text: str, final: bool = False) -> AttemptOutcome:
            return AttemptOutcome(
                OutcomeKind.FAILED, reason=reason, latency_ms=ms(), response_excerpt=text,
                final=final,
            )  # fmt: skip

        progress = _Progress()
        # identity: the excerpt is the body as sent, and no decompression bomb is inflated
        headers = {"accept-encoding": "identity", **request.headers}
        body = bytearray()
        try:
            async with asyncio.timeout(min(request.timeout_s, MAX_TIMEOUT_S)):
                async with self.client.stream(
                    "POST", request.url, content=request.body, headers=headers,
                    follow_redirects=False, extensions={"trace": progress},
                ) as resp:  # fmt: skip
                    if resp.is_stream_consumed:  # a transport that answered with content=
                        body += resp.content[: EXCERPT_BYTES + 1]
                    else:
                        try:
                            async for chunk in resp.aiter_raw():
                                body += chunk
                                if len(body) > EXCERPT_BYTES:
                                    break
                        except CaptureLimitReached:
                            pass  # chunked framing counts too: the excerpt is what we have
        except TimeoutError:
            if not progress.sending and progress.last == "guard.resolve.started":
                return failed("dns", "resolution timed out")
            if not progress.sending and progress.last is not None:
                return failed("connect", "timed out before the request was sent")
            return AttemptOutcome(OutcomeKind.INDETERMINATE, reason="timeout", latency_ms=ms())
        except DestinationRefused as exc:
            return failed("ssrf", str(exc), final=True)
        except ResolutionFailed as exc:
            return failed("dns", str(exc))
        except ResponseHeadTooLarge as exc:
            return failed("bad_response", str(exc))
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            return failed("connect", str(exc))
        except httpx.HTTPError as exc:
            return AttemptOutcome(
                OutcomeKind.INDETERMINATE, reason="network", latency_ms=ms(),
                response_excerpt=f"{type(exc).__name__}: {exc}",
            )  # fmt: skip
        except (httpx.InvalidURL, ValueError, TypeError) as exc:  # httpx cannot encode it
            return failed("bad_request", f"{type(exc).__name__}: {exc}", final=True)
        return response_outcome(
            resp.status_code, ms(), body, head_text(resp.headers.raw),
            resp.headers.get("retry-after"), self.wall(),
        )  # fmt: skip
