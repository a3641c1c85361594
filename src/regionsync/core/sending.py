"""One delivery attempt's decisions, for every Sender adapter (sans-I/O).

The adapters (``adapters/aiohttp_sender.py`` in production, ``adapters/sender.py`` for
tests and the simulator) do the I/O and ask this module three things:

- The destination guard: which address an attempt may connect to, from the URL host and,
  for a name, the resolver's answers (``literal_destination``, ``resolved_destination``;
  the address rules are ``core.urlguard``'s). A refusal is ``DestinationRefused`` (final),
  a name without addresses ``ResolutionFailed`` (retryable).
- The capture bounds: ``ResponseBudget`` counts the bytes read for one response and says
  how many to read and keep: a head over ``HEADERS_BYTES`` fails the attempt, at most
  ``EXCERPT_BYTES`` + 1 body bytes are read; ``head_text`` bounds the kept head.
- The outcome: ``response_outcome`` for an HTTP answer (status, excerpt, ``Retry-After``),
  ``failure_outcome`` for an error the adapter classified as a ``Failure``,
  ``timeout_outcome`` for the deadline by how far the attempt got (``Stage``).
"""

from __future__ import annotations

import email.utils
import functools
import ipaddress
import re
from collections.abc import Sequence
from enum import Enum, StrEnum
from typing import ClassVar

from .retry import AttemptOutcome, OutcomeKind
from .urlguard import IPAddress, Network, address_allowed, parse_host_literal

__all__ = [
    "EXCERPT_BYTES",
    "HEADERS_BYTES",
    "MAX_TIMEOUT_S",
    "CaptureLimitReached",
    "DestinationRefused",
    "Failure",
    "ResolutionFailed",
    "ResponseBudget",
    "ResponseHeadTooLarge",
    "SendError",
    "Stage",
    "attempt_deadline",
    "failure_outcome",
    "head_text",
    "host_literal",
    "literal_destination",
    "resolved_destination",
    "response_outcome",
    "retry_after",
    "timeout_outcome",
]

EXCERPT_BYTES = 4096  # response body kept per attempt
HEADERS_BYTES = 8192  # response head kept (and read) per attempt
MAX_TIMEOUT_S = 60.0  # an attempt's total deadline never exceeds this


class Failure(StrEnum):
    """Why an attempt ended without an HTTP answer: the outcome's ``reason``."""

    SSRF = "ssrf"  # the destination is not allowed (final)
    DNS = "dns"  # the name did not resolve
    CONNECT = "connect"  # no connection, or none before the request went out
    BAD_RESPONSE = "bad_response"  # the answer broke the capture bounds
    BAD_REQUEST = "bad_request"  # the request cannot be sent as it is (final)
    NETWORK = "network"  # broke after the request may have gone out (indeterminate)


# failure -> (outcome kind, final, the error text names the exception's type)
_FAILURES: dict[Failure, tuple[OutcomeKind, bool, bool]] = {
    Failure.SSRF: (OutcomeKind.FAILED, True, False),
    Failure.DNS: (OutcomeKind.FAILED, False, False),
    Failure.CONNECT: (OutcomeKind.FAILED, False, False),
    Failure.BAD_RESPONSE: (OutcomeKind.FAILED, False, False),
    Failure.BAD_REQUEST: (OutcomeKind.FAILED, True, True),
    Failure.NETWORK: (OutcomeKind.INDETERMINATE, False, True),
}


class SendError(Exception):
    """An attempt ended for the reason ``failure``; raised by this module's decisions."""

    failure: ClassVar[Failure]


class DestinationRefused(SendError):
    """The destination is, or resolves to, an address deliveries may not reach (final)."""

    failure = Failure.SSRF


class ResolutionFailed(SendError):
    """The destination's name did not resolve (retryable: DNS failures are often brief)."""

    failure = Failure.DNS


class ResponseHeadTooLarge(SendError):
    """The receiver's response head exceeded ``HEADERS_BYTES``."""

    failure = Failure.BAD_RESPONSE


class CaptureLimitReached(Exception):
    """The capture bound was reached before the response ended; the rest is not read."""


# -- the destination guard ---------------------------------------------------------------


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


def _judge(host: str, addrs: Sequence[IPAddress], allow: Sequence[Network]) -> IPAddress:
    bad = [str(a) for a in addrs if not _allowed(a, tuple(allow))]
    if bad:
        raise DestinationRefused(
            f"{host!r} is or resolves to a non-public address ({', '.join(bad)}); list "
            "its network in delivery.allow_private_networks to allow it"
        )
    return addrs[0]


def literal_destination(host: str, allow: Sequence[Network] = ()) -> IPAddress | None:
    """The address a URL host that is an address literal (in any spelling
    ``parse_host_literal`` reads) denotes, if it is allowed; None for a name (resolve it,
    then ask ``resolved_destination``). Raises ``DestinationRefused``."""
    try:
        literal = host_literal(host)
    except ValueError as exc:
        raise DestinationRefused(str(exc)) from None
    return None if literal is None else _judge(host, [literal], allow)


def resolved_destination(
    host: str, found: Sequence[str], allow: Sequence[Network] = ()
) -> IPAddress:
    """The address a name that resolved to ``found`` may be connected to: the first, if
    every one is allowed. Raises ``DestinationRefused`` if any is not allowed (or is no
    address), ``ResolutionFailed`` if there is none."""
    if not found:
        raise ResolutionFailed(f"{host!r} resolves to no address")
    try:
        addrs = [_address(a) for a in found]
    except ValueError:
        raise DestinationRefused(f"{host!r} resolves to an unusable address {found}") from None
    return _judge(host, addrs, allow)


# -- the capture bounds ------------------------------------------------------------------

_BLANK_LINE = re.compile(rb"\n\r?\n")  # where a head ends, as h11 and llhttp find it


class ResponseBudget:
    """How much of one response is read and kept, from the bytes read so far.

    ``reset`` starts a response (HTTP/1.1 without pipelining: after its request is
    written). Head phase: reads of at most ``body_limit`` + 1 bytes until the head's blank
    line (``\\n\\r?\\n``); 1xx heads are skipped; a head over ``head_limit`` raises
    ``ResponseHeadTooLarge``. Body phase: at most ``body_limit`` + 1 bytes after the head,
    counting body bytes that arrived with it; then ``spent``.
    """

    __slots__ = ("_body_left", "_head", "_in_head", "body_limit", "head_limit")

    def __init__(self, head_limit: int = HEADERS_BYTES, body_limit: int = EXCERPT_BYTES):
        self.head_limit = head_limit
        self.body_limit = body_limit
        self.reset()

    def reset(self) -> None:
        self._head = bytearray()
        self._in_head = True
        self._body_left = self.body_limit + 1

    @property
    def spent(self) -> bool:
        """The body bound is reached: nothing more of this response is to be read."""
        return not self._in_head and self._body_left <= 0

    def want(self, n: int) -> int:
        """How many of ``n`` bytes the next read may ask for."""
        return min(n, self.body_limit + 1 if self._in_head else max(self._body_left, 0))

    def feed(self, data: bytes) -> int:
        """Counts ``data``, just read; returns how many of its leading bytes are within
        the bounds (the rest is dropped). Raises ``ResponseHeadTooLarge``."""
        if not self._in_head:
            keep = max(min(len(data), self._body_left), 0)
            self._body_left -= keep
            return keep
        self._head += data
        while True:
            match = _BLANK_LINE.search(self._head)
            end = len(self._head) if match is None else match.end()
            if end > self.head_limit:
                raise ResponseHeadTooLarge(f"response head exceeds {self.head_limit} bytes")
            if match is None:
                return len(data)
            if self._head[9:10] == b"1":  # "HTTP/1.1 1xx": an interim head, another follows
                del self._head[:end]
                continue
            body = len(self._head) - end  # all of it in ``data``: the head ended there
            self._in_head = False
            self._head = bytearray()
            keep = len(data) - max(body - self._body_left, 0)
            self._body_left = max(self._body_left - body, 0)
            return keep


def head_text(raw: Sequence[tuple[bytes, bytes]]) -> str:
    """A response head as ``name: value`` lines, at most ``HEADERS_BYTES`` characters."""
    text = "\n".join(f"{k.decode('latin-1')}: {v.decode('latin-1')}" for k, v in raw)
    return text[:HEADERS_BYTES]


# -- the outcome -------------------------------------------------------------------------


class Stage(Enum):
    """How far an attempt got, for a timeout: before the request went out it failed."""

    UNKNOWN = "unknown"  # the transport reports no progress: it may have gone out
    CONNECTING = "connecting"  # before the request is written (pool, connect, TLS)
    RESOLVING = "resolving"  # the guard's lookup of the name
    SENDING = "sending"  # the request is being (or was) written


def attempt_deadline(timeout_s: float) -> float:
    """An attempt's total deadline in seconds (resolution to the last body byte)."""
    return min(timeout_s, MAX_TIMEOUT_S)


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
    code: int,
    latency_ms: float,
    body: bytes | bytearray,
    head: str,
    retry_after_value: str | None,
    now: float,
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


def failure_outcome(
    failure: Failure, error: BaseException | str, latency_ms: float
) -> AttemptOutcome:
    """The outcome of an attempt that ended for ``failure``; ``error`` (an exception or
    text) becomes the excerpt."""
    kind, final, typed = _FAILURES[failure]
    if isinstance(error, BaseException):
        error = f"{type(error).__name__}: {error}" if typed else str(error)
    return AttemptOutcome(
        kind, reason=failure.value, latency_ms=latency_ms, response_excerpt=error, final=final
    )


def timeout_outcome(stage: Stage, latency_ms: float) -> AttemptOutcome:
    """The outcome of an attempt whose deadline passed at ``stage``: a failure before the
    request went out, else indeterminate (the receiver may have it)."""
    if stage is Stage.RESOLVING:
        return failure_outcome(Failure.DNS, "resolution timed out", latency_ms)
    if stage is Stage.CONNECTING:
        return failure_outcome(Failure.CONNECT, "timed out before the request was sent",
                               latency_ms)  # fmt: skip
    return AttemptOutcome(OutcomeKind.INDETERMINATE, reason="timeout", latency_ms=latency_ms)
