"""The HTTP/1.1 server of a node: uvicorn with the httptools parser, plus what uvicorn
does not do on its own (settings ``[http]``, ``config.HttpSettings``):

- **Read deadline**: a request must arrive whole, head and body, within ``read_timeout_s``
  of its first byte (for a connection's first request: of the accept). A total deadline,
  not an idle timer, so dripping a byte a second holds nothing for long. On expiry the
  client gets 408 and the connection is closed (RFC 9110 §15.5.9: a server that times out
  a request should send ``Connection: close``). A connection that never sent a byte is
  closed without an answer, and so is one whose request was already answered.
- **Parser rejections as problem bodies**: what httptools refuses (bad request line,
  invalid header characters, a Content-Length that is not digits or comes with
  ``Transfer-Encoding``, RFC 9112 §6.3) gets 400 with the JSON problem body
  ``{"error", "detail", "field"}`` of every other error instead of uvicorn's plain text
  (an unrecognised method gets 501, RFC 9110 §9.1);
  a head (request line and headers) over ``max_header_bytes`` gets 431 (RFC 6585 §5),
  which httptools alone never sends. What it lets through and RFC 9112 refuses gets the
  same: 400 for an HTTP/1.1 request without ``Host`` or any with two (§3.2) and for a
  request line without a version (HTTP/0.9), 501 for a transfer coding other than
  chunked (§6.1: httptools would pass its coded bytes on as the body). Then the
  connection is closed.
- **Connection bound**: a request on a connection beyond ``max_connections`` open ones
  (or with as many requests in progress) gets 503 with ``Retry-After: 1`` and close
  (uvicorn's ``limit_concurrency``, with the problem body and without its off-by-one).

This subclasses uvicorn's ``HttpToolsProtocol`` and uses attributes uvicorn does not
document (``cycle``, ``flow``, ``connections``, ``tasks``, ``send_400_response`` called
from the parser's ``except`` block); pyproject pins the uvicorn range it was checked
against and ``tests/api/test_http_server.py`` checks them so a change fails loudly.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
import re
import sys
from typing import Any

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..config import HttpSettings

__all__ = ["ProblemHttpProtocol", "problem_bytes", "protocol_class", "server_config"]

log = logging.getLogger("regionsync.http")

LINGER_S = 2.0  # longest lingering close after an error answer (seconds)


def problem_bytes(
    status: int,
    code: str,
    detail: str,
    field: str | None = None,
    headers: list[tuple[bytes, bytes]] | tuple[()] = (),
) -> bytes:
    """A whole HTTP/1.1 response: ``status``, ``headers``, then the JSON problem body
    ``{"error": code, "detail": detail[, "field": field]}`` and ``Connection: close``."""
    body: dict[str, Any] = {"error": code, "detail": detail}
    if field is not None:
        body["field"] = field
    payload = json.dumps(body, separators=(",", ":")).encode()
    lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}".encode()]
    lines += [name + b": " + value for name, value in headers]
    lines += [
        b"content-type: application/json",
        b"content-length: " + str(len(payload)).encode(),
        b"connection: close",
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + payload


def _problem_app(
    status: int,
    code: str,
    detail: str,
    retry_after_s: int | None = None,
    field: str | None = None,
) -> Any:
    """An ASGI app answering every request with ``status`` and the problem body, then
    closing the connection (it reads no body)."""
    body = {"error": code, "detail": detail, **({"field": field} if field else {})}
    payload = json.dumps(body, separators=(",", ":")).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"connection", b"close"),
    ]
    if retry_after_s is not None:
        headers.append((b"retry-after", str(retry_after_s).encode()))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    return app


_OVERLOADED = _problem_app(503, "unavailable", "too many open connections; retry shortly", 1)
# what httptools lets through and RFC 9112 refuses (``on_headers_complete``): an HTTP/1.1
# request without a Host header or any with two (section 3.2), a transfer coding other
# than chunked (section 6.1), a request line without a version (HTTP/0.9)
_BAD_HOST = _problem_app(
    400, "bad_request", "needs exactly one Host header (RFC 9112, section 3.2)", field="Host"
)
# headers a request carries at most once: which of two would count is up to each reader
# (a proxy may check one and the node read the other), so two are refused, naming it
_SINGLE = {n.lower().encode(): n for n in ("Authorization", "Idempotency-Key", "Content-Type")}
_TWICE = {
    name: _problem_app(400, "bad_request", f"{title} is given more than once", field=title)
    for name, title in _SINGLE.items()
}
_CODING = _problem_app(
    501,
    "transfer_coding_not_implemented",
    "only the chunked transfer coding is understood",
    field="Transfer-Encoding",
)
_NO_VERSION = _problem_app(
    400, "bad_request", "the request line needs HTTP/1.1 or HTTP/1.0", field="version"
)


def _parser_field(detail: str) -> str:
    """The part of the request a parser rejection is about (its problem body's ``field``):
    ``content-length``/``transfer-encoding`` when named, else ``method``, ``path``
    (the request target), ``version``, ``headers``, or ``request`` (the framing)."""
    lowered = detail.lower()
    for name in ("content-length", "transfer-encoding"):
        if name in lowered:
            return name
    for words, name in ((("method",), "method"), (("url", "path", "uri"), "path"),
                        (("version",), "version"), (("header",), "headers")):  # fmt: skip
        if any(w in lowered for w in words):
            return name
    return "request"


# method SP request-target SP HTTP-version CRLF (RFC 9112 section 3), the method a token
_REQUEST_LINE = re.compile(rb"(?:^|\n)[!#$%&'*+.^_`|~0-9A-Za-z-]+ [^ \r\n]+ HTTP/\d\.\d\r\n")


class ProblemHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a read deadline, a head size bound, a connection
    bound and JSON problem bodies for what it rejects itself. Limits are class attributes:
    use ``protocol_class(settings)`` to get a subclass carrying them."""

    read_timeout_s: float = 30.0
    max_header_bytes: int = 16 * 1024
    max_connections: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limit_concurrency = None  # bounded by max_connections in on_headers_complete
        self._deadline: asyncio.TimerHandle | None = None
        self._begun = False  # the current request's first byte arrived
        self._head_done = False  # ... and its whole head
        self._head_bytes = 0  # head bytes counted so far (see data_received)
        self._completed_in_chunk = False
        self._lingering = False  # answered with an error: the rest is dropped
        self._chunk = b""
        # requests whose head was parsed / whose response is complete; an error found in
        # a later pipelined request waits (``_deferred``) until every earlier one is
        # answered, so each client request gets its own response, in order (RFC 9112
        # section 9.3.2)
        self._parsed = self._answered = 0
        self._deferred: tuple[int, str, str, str | None] | None = None
        self._head_refused = False  # the current request is answered by a problem app

    # -- the read deadline ---------------------------------------------------------------

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.read_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self._lingering:
            return
        if self.flow.read_paused:
            # the server stopped reading (pipelining, an app not reading yet): not the
            # client's delay, so wait again
            self._arm()
            return
        cycle = self.cycle  # this request's once its head is in, else the one before
        started = cycle is not None and cycle.response_started
        if not self._begun or (started and (self._head_done or not cycle.response_complete)):
            # nothing sent, this request already answered, or an earlier answer still
            # being written (a 408 cannot be interleaved): close without one
            self.transport.close()
            return
        if cycle is not None and not cycle.response_complete:
            # the app waiting for the body reads http.disconnect; its answer is dropped
            cycle.disconnected = True
            cycle.message_event.set()
        log.info("request from %s not received within %ss: 408", self.client, self.read_timeout_s)
        self._reject(
            408, "request_timeout", f"request not received within {self.read_timeout_s:g} s",
            "request", after_earlier=False,
        )  # fmt: skip

    def _reject(
        self,
        status: int,
        code: str,
        detail: str,
        field: str | None = None,
        after_earlier: bool = True,
    ) -> None:
        """Answer with the problem body and end the connection. A lingering close: the
        write side is shut and what the client still sends is read and dropped for up to
        ``LINGER_S``, since closing with unread data sends a TCP reset that can discard
        the answer before the client reads it. With ``after_earlier`` (a request that
        never got a head parsed) and an earlier pipelined request not answered yet, the
        problem waits for that response (``on_response_complete``):
        written now, it would be read as that request's answer (a committed publish
        answered 400, QA of 2026-12-02)."""
        self._disarm()
        self._lingering = True
        if after_earlier and self._parsed > self._answered and not self.transport.is_closing():
            self._deferred = (status, code, detail, field)
            self.flow.pause_reading()
            return
        headers = self.server_state.default_headers
        self.transport.write(problem_bytes(status, code, detail, field, headers))
        self._linger_close()

    def _linger_close(self) -> None:
        """Shut the write side and close after ``LINGER_S`` (see ``_reject``)."""
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._deadline = self.loop.call_later(
            min(LINGER_S, self.read_timeout_s), self.transport.close
        )

    # -- uvicorn hooks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        self._completed_in_chunk = False
        self._chunk = data  # what the parser is reading (send_400_response looks at it)
        super().data_received(data)
        if self.transport.is_closing() or not self._begun or self._head_done:
            return
        # count a chunk only if it is all head of this request: no request ended in it.
        # One that did may end with the start of this head: at most one chunk uncounted.
        if not self._completed_in_chunk:
            self._head_bytes += len(data)
        if self._head_bytes > self.max_header_bytes:
            detail = f"request line and headers exceed {self.max_header_bytes} bytes"
            self._reject(431, "headers_too_large", detail, "headers")

    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this from its ``except httptools.HttpParserError`` block only
        cycle = self.cycle
        if self._head_done and not self._head_refused and cycle and cycle.scope is self.scope:
            if not self._body_refused(cycle):
                return
        exc = sys.exc_info()[1]
        detail = msg
        if isinstance(exc, httptools.HttpParserError) and not isinstance(
            exc, httptools.HttpParserCallbackError
        ):
            detail = str(exc) or msg
        if detail == "Invalid method encountered" and _REQUEST_LINE.search(self._chunk):
            # a well-formed request line with a method the parser does not know: RFC 9110
            # section 9.1 answers 501 (a known method a route lacks is 405)
            self._reject(501, "method_not_implemented", "unrecognised request method",
                         "method")  # fmt: skip
            return
        self._reject(400, "bad_request", detail, _parser_field(detail))

    def _body_refused(self, cycle: Any) -> bool:
        """The parser refused the body (its framing: a chunk size, a chunk's end) of the
        request whose head it parsed (``cycle``'s), whose app now waits for the rest for
        ever (before: the problem waited for that app's answer, with no deadline, so the
        connection hung). That app reads ``http.disconnect`` and its answer is dropped;
        the problem answers the request (True). If the app had begun its answer, nothing
        can follow it on this connection: it closes once that answer is written (False)."""
        if cycle.response_started:
            self._disarm()
            self._lingering = True  # the rest is dropped
            if cycle.response_complete:
                self._linger_close()
            else:
                cycle.keep_alive = False
            return False
        cycle.disconnected = True
        cycle.message_event.set()
        self._parsed -= 1  # answered by the problem, not by its app
        return True

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begun, self._head_done, self._head_bytes = True, False, 0
        self._head_refused = False
        if self._deadline is None:
            self._arm()  # later requests of a keep-alive connection: from their first byte

    def on_headers_complete(self) -> None:
        self._head_done = True
        self._parsed += 1
        try:
            self._headers_complete()
        except BaseException:  # uvicorn's URL parse refused it: a head error, no request
            self._head_done = False
            self._parsed -= 1
            raise

    def _headers_complete(self) -> None:
        head, hosts, codings = len(self.url), 0, b""
        seen: set[bytes] = set()
        twice: bytes | None = None
        for n, v in self.headers:  # names lower-cased by uvicorn
            head += len(n) + len(v) + 4
            if n == b"host":
                hosts += 1
            elif n == b"transfer-encoding":
                codings += b"," + v
            elif n in _SINGLE:
                if n in seen:
                    twice = twice or n
                seen.add(n)
        limit = self.max_connections
        if head > self.max_header_bytes:
            detail = f"request line and headers exceed {self.max_header_bytes} bytes"
            app = _problem_app(431, "headers_too_large", detail, field="headers")
        elif (version := self.parser.get_http_version()) not in ("1.1", "1.0"):
            app = _NO_VERSION  # a request line without one: HTTP/0.9, not served
        elif hosts > 1 or (hosts == 0 and version == "1.1"):
            app = _BAD_HOST
        elif twice is not None:
            app = _TWICE[twice]
        elif codings and any(
            c.strip().lower() not in (b"", b"chunked") for c in codings.split(b",")
        ):
            app = _CODING
        elif limit is not None and (len(self.connections) > limit or len(self.tasks) >= limit):
            log.warning("over %d connections: 503", limit)
            app = _OVERLOADED
        else:
            super().on_headers_complete()
            return
        # uvicorn starts the request's task with self.app: swap it for this one request
        # (which answers without reading the body, so a body the parser refuses later
        # waits for that answer, as a later pipelined request's problem does)
        self._head_refused = True
        own, self.app = self.app, app
        try:
            super().on_headers_complete()
        finally:
            self.app = own

    def on_message_complete(self) -> None:
        self._disarm()
        self._begun = False
        self._completed_in_chunk = True
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._answered += 1
        super().on_response_complete()
        if self._deferred is not None and self._answered >= self._parsed:
            deferred, self._deferred = self._deferred, None
            self._reject(*deferred)


def protocol_class(settings: HttpSettings) -> type[ProblemHttpProtocol]:
    """A ``ProblemHttpProtocol`` subclass carrying ``settings``' limits (uvicorn builds
    protocols from ``Config.http``, a class, with no other arguments of ours)."""
    return type(
        "NodeHttpProtocol",
        (ProblemHttpProtocol,),
        {
            "read_timeout_s": settings.read_timeout_s,
            "max_header_bytes": settings.max_header_bytes,
            "max_connections": settings.max_connections,
        },
    )


def server_config(
    app: Any, host: str, port: int, settings: HttpSettings, log_level: str
) -> uvicorn.Config:
    """The uvicorn configuration of a node's HTTP API (what ``regionsync serve`` runs):
    ``app`` on ``host``:``port`` with ``ProblemHttpProtocol`` and ``settings``' limits, on
    the running loop, lifespan on (the app starts and stops the node)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_class(settings),
        loop="none",
        lifespan="on",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        log_level=log_level,
        timeout_keep_alive=settings.keep_alive_s,
        timeout_graceful_shutdown=5,
    )
