"""The production Sender: httpx over a transport that refuses non-public destinations.

``GuardedTransport`` resolves the host once, refuses the request if any resolved address
is not allowed (``core.urlguard``), and connects to the address it checked (the URL host is
replaced by the IP; ``Host`` and TLS SNI keep the name), so DNS rebinding cannot switch
it. ``HttpxSender`` maps every failure to an ``AttemptOutcome``; it never raises for
network or HTTP failures.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import time
from collections.abc import Callable, Sequence

import httpx

from ..core.retry import AttemptOutcome, OutcomeKind
from ..core.urlguard import Network, address_allowed
from ..runtime.ports import OutboundRequest, Resolver

__all__ = ["EXCERPT_BYTES", "DestinationRefused", "GuardedTransport", "HttpxSender"]

EXCERPT_BYTES = 4096


class DestinationRefused(httpx.TransportError):
    """The destination resolves to an address deliveries may not reach (final)."""


class GuardedTransport(httpx.AsyncBaseTransport):
    """Wraps ``inner``; every request goes to a checked, pinned IP address."""

    def __init__(
        self,
        resolver: Resolver,
        allow: Sequence[Network] = (),
        inner: httpx.AsyncBaseTransport | None = None,
    ):
        self.resolver = resolver
        self.allow = tuple(allow)
        self.inner = inner or httpx.AsyncHTTPTransport(retries=0)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        try:
            addrs = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                addrs = [ipaddress.ip_address(a) for a in await self.resolver.resolve(host, port)]
            except OSError as exc:
                raise httpx.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
        bad = [str(a) for a in addrs if not address_allowed(a, self.allow)]
        if bad or not addrs:
            raise DestinationRefused(f"{host!r} resolves to non-public address {bad}")
        pinned = addrs[0]
        if str(pinned) != host:
            request.extensions = {**request.extensions, "sni_hostname": host}
            request.url = request.url.copy_with(
                host=str(pinned) if pinned.version == 4 else f"[{pinned}]"
            )
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


class HttpxSender:
    """One POST per attempt over ``client``; total deadline enforced around the whole call.

    ``timer`` is the monotonic clock (seconds) that attempt latency is measured with:
    ``time.perf_counter`` by default; the simulator passes its virtual clock.
    """

    def __init__(self, client: httpx.AsyncClient, *, timer: Callable[[], float] | None = None):
        self.client = client
        self.timer = timer or time.perf_counter

    @classmethod
    def guarded(cls, resolver: Resolver, allow: Sequence[Network] = ()) -> HttpxSender:
        transport = GuardedTransport(resolver, allow)
        return cls(httpx.AsyncClient(transport=transport, follow_redirects=False, timeout=None))

    async def aclose(self) -> None:
        await self.client.aclose()

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        timer = self.timer
        start = timer()

        def ms() -> float:
            return (timer() - start) * 1000

        try:
            async with asyncio.timeout(request.timeout_s):
                async with self.client.stream(
                    "POST", request.url, content=request.body, headers=dict(request.headers)
                ) as resp:
                    excerpt = b""
                    async for chunk in resp.aiter_raw():
                        excerpt += chunk
                        if len(excerpt) > EXCERPT_BYTES:
                            break
        except TimeoutError:
            return AttemptOutcome(OutcomeKind.INDETERMINATE, reason="timeout", latency_ms=ms())
        except DestinationRefused as exc:
            return AttemptOutcome(
                OutcomeKind.FAILED, reason="ssrf", latency_ms=ms(),
                response_excerpt=str(exc), final=True,
            )  # fmt: skip
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            return AttemptOutcome(
                OutcomeKind.FAILED, reason="connect", latency_ms=ms(), response_excerpt=str(exc)
            )
        except httpx.HTTPError as exc:
            return AttemptOutcome(
                OutcomeKind.INDETERMINATE, reason="network", latency_ms=ms(),
                response_excerpt=f"{type(exc).__name__}: {exc}",
            )  # fmt: skip
        except (ValueError, TypeError) as exc:  # a request httpx cannot even encode
            return AttemptOutcome(
                OutcomeKind.FAILED, reason="bad_request", latency_ms=ms(),
                response_excerpt=f"{type(exc).__name__}: {exc}", final=True,
            )  # fmt: skip
        text = excerpt[:EXCERPT_BYTES].decode("utf-8", "replace")
        code = resp.status_code
        if 200 <= code < 300:
            return AttemptOutcome(
                OutcomeKind.SUCCEEDED, status_code=code, latency_ms=ms(), response_excerpt=text
            )
        return AttemptOutcome(
            OutcomeKind.FAILED,
            status_code=code,
            reason="redirect" if 300 <= code < 400 else f"http_{code}",
            latency_ms=ms(),
            response_excerpt=text,
            retry_after_s=_retry_after(resp.headers.get("retry-after"))
            if code in (429, 503)
            else None,
        )
