"""One delivery attempt over real loopback sockets: pinning, redirects, deadlines, capture.

Receivers are raw asyncio servers on 127.0.0.1 (so a test controls every byte on the
wire); names resolve through a stub resolver; ``delivery.allow_private_networks`` is
``127.0.0.0/8``. Nothing connects anywhere but loopback.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpcore
import httpx
import pytest

from regionsync.adapters.sender import GuardedTransport, HttpxSender, PinnedHTTPTransport
from regionsync.core.retry import OutcomeKind
from regionsync.core.sending import EXCERPT_BYTES
from regionsync.core.urlguard import parse_networks
from regionsync.runtime.ports import OutboundRequest

LOOPBACK = parse_networks(["127.0.0.0/8"])
# the drips below would hold an attempt 20 s or more past its 1 s deadline: anything under
# this shows the deadline held (a tight bound would only time the machine)
DRIP_BOUND_S = 5.0

Respond = Callable[[asyncio.StreamWriter, bytes], Awaitable[None]]


class Receiver:
    """An HTTP/1.1 receiver on 127.0.0.1 that answers every request with ``respond``."""

    def __init__(self, respond: Respond):
        self.respond = respond
        self.heads: list[bytes] = []
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0
        self.tasks: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> Receiver:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            self.heads.append(head)
            await self.respond(writer, head)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def host_header(self, i: int = 0) -> str:
        for line in self.heads[i].split(b"\r\n"):
            if line.lower().startswith(b"host:"):
                return line.split(b":", 1)[1].strip().decode()
        raise AssertionError("no Host header")


def canned(status: str, headers: str = "", body: bytes = b"") -> Respond:
    async def respond(writer: asyncio.StreamWriter, head: bytes) -> None:
        writer.write(
            f"HTTP/1.1 {status}\r\n{headers}Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )

    return respond


class Names:
    """Stub resolver: every name is 127.0.0.1 unless mapped; counts lookups."""

    def __init__(self, names: dict[str, list[str]] | None = None):
        self.names = names or {}
        self.calls: list[str] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        return list(self.names.get(host, ["127.0.0.1"]))


class CountingBackend(httpcore.AsyncNetworkBackend):
    """The real socket backend, counting what is read from each socket and how."""

    def __init__(self) -> None:
        self.inner = httpcore.AnyIOBackend()
        self.streams: list[CountingStream] = []

    async def connect_tcp(self, host: str, port: int, *args: Any, **kw: Any) -> Any:
        stream = CountingStream(await self.inner.connect_tcp(host, port, *args, **kw))
        self.streams.append(stream)
        return stream

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class CountingStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream):
        self.inner = inner
        self.received = 0
        self.peer = inner.get_extra_info("server_addr")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        data = await self.inner.read(max_bytes, timeout)
        self.received += len(data)
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self.inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


def make_sender(
    resolver: Names | None = None, wall: Callable[[], float] | None = None
) -> tuple[HttpxSender, CountingBackend]:
    backend = CountingBackend()
    inner = PinnedHTTPTransport(LOOPBACK, network_backend=backend)
    transport = GuardedTransport(resolver or Names(), LOOPBACK, inner=inner)
    client = httpx.AsyncClient(transport=transport, timeout=None, trust_env=False)
    return HttpxSender(client, wall=wall), backend


def post(url: str, timeout_s: float = 5.0) -> OutboundRequest:
    return OutboundRequest(url, {"content-type": "application/json"}, b'{"a":1}', timeout_s)


async def test_connects_to_the_checked_address_and_keeps_the_host_name() -> None:
    async with Receiver(canned("200 OK", body=b"thanks")) as rcv:
        names = Names({"hooks.receiver.test": ["127.0.0.1"]})
        sender, backend = make_sender(names)
        outcome = await sender.send(post(f"http://hooks.receiver.test:{rcv.port}/hook"))
        await sender.aclose()
    assert outcome.kind is OutcomeKind.SUCCEEDED and outcome.status_code == 200
    assert outcome.response_excerpt == "thanks"
    assert "content-length: 6" in outcome.response_headers.lower()
    assert rcv.host_header() == f"hooks.receiver.test:{rcv.port}"
    assert names.calls == ["hooks.receiver.test"]
    assert [s.peer for s in backend.streams] == [("127.0.0.1", rcv.port)]


async def test_non_canonical_literal_connects_to_the_address_it_denotes() -> None:
    async with Receiver(canned("204 No Content")) as rcv:
        names = Names()
        sender, backend = make_sender(names)
        outcome = await sender.send(post(f"http://0x7f000001:{rcv.port}/"))
        await sender.aclose()
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert names.calls == []  # a literal never goes to the resolver
    assert [s.peer for s in backend.streams] == [("127.0.0.1", rcv.port)]


async def test_dns_rebinding_over_loopback() -> None:
    """First lookup 127.0.0.1 (allowed), any later one 127.0.0.2, where a trap listens."""
    async with Receiver(canned("200 OK")) as good:
        hits: list[int] = []

        async def on_trap(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            hits.append(1)
            w.close()

        trap = await asyncio.start_server(on_trap, "127.0.0.2", good.port)

        class Rebinding(Names):
            async def resolve(self, host: str, port: int) -> list[str]:
                self.calls.append(host)
                return ["127.0.0.1"] if len(self.calls) == 1 else ["127.0.0.2"]

        names = Rebinding()
        sender, backend = make_sender(names)
        outcome = await sender.send(post(f"http://rebind.test:{good.port}/"))
        await sender.aclose()
        trap.close()
        await trap.wait_closed()
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert names.calls == ["rebind.test"] and hits == []
    assert [s.peer for s in backend.streams] == [("127.0.0.1", good.port)]


async def test_redirect_is_a_failure_and_location_is_never_contacted() -> None:
    async with Receiver(canned("200 OK")) as trap:
        for status in ("301 Moved Permanently", "302 Found", "307 Temporary Redirect",
                       "308 Permanent Redirect"):  # fmt: skip
            location = f"Location: http://127.0.0.1:{trap.port}/stolen\r\n"
            async with Receiver(canned(status, location)) as rcv:
                sender, _ = make_sender()
                outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
                await sender.aclose()
            assert outcome.kind is OutcomeKind.FAILED
            assert (outcome.reason, outcome.final) == ("redirect", False)
            assert outcome.status_code == int(status[:3])
        # a client configured to follow redirects is overridden per request
        async with Receiver(canned("302 Found", location)) as rcv:
            transport = GuardedTransport(Names(), LOOPBACK)
            client = httpx.AsyncClient(transport=transport, follow_redirects=True)
            outcome = await HttpxSender(client).send(post(f"http://127.0.0.1:{rcv.port}/"))
            await client.aclose()
        assert outcome.reason == "redirect"
    assert trap.connections == 0


async def test_slow_drip_body_cannot_extend_the_deadline() -> None:
    async def drip(writer: asyncio.StreamWriter, head: bytes) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        for _ in range(100):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.2)

    async with Receiver(drip) as rcv:
        sender, _ = make_sender()
        started = time.perf_counter()
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/", timeout_s=1.0))
        elapsed = time.perf_counter() - started
        await sender.aclose()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.INDETERMINATE, "timeout")
    assert 0.9 <= elapsed < DRIP_BOUND_S, elapsed


async def test_slow_drip_head_cannot_extend_the_deadline() -> None:
    async def drip(writer: asyncio.StreamWriter, head: bytes) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 100:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.2)

    async with Receiver(drip) as rcv:
        sender, _ = make_sender()
        started = time.perf_counter()
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/", timeout_s=1.0))
        elapsed = time.perf_counter() - started
        await sender.aclose()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.INDETERMINATE, "timeout")
    assert 0.9 <= elapsed < DRIP_BOUND_S, elapsed


async def test_resolution_that_hangs_is_a_dns_failure_within_the_deadline() -> None:
    class Hanging(Names):
        async def resolve(self, host: str, port: int) -> list[str]:
            await asyncio.sleep(30)
            return []

    sender, backend = make_sender(Hanging())
    outcome = await sender.send(post("http://slow-dns.test/", timeout_s=0.3))
    await sender.aclose()
    assert (outcome.kind, outcome.reason, outcome.final) == (OutcomeKind.FAILED, "dns", False)
    assert backend.streams == []


async def test_connection_refused_is_a_connect_failure() -> None:
    async with Receiver(canned("200 OK")) as rcv:
        port = rcv.port
    sender, _ = make_sender()
    outcome = await sender.send(post(f"http://127.0.0.1:{port}/"))
    await sender.aclose()
    assert (outcome.kind, outcome.reason, outcome.final) == (OutcomeKind.FAILED, "connect", False)


@pytest.mark.parametrize("size", [EXCERPT_BYTES - 1, EXCERPT_BYTES, 64 * 1024, 4 * 1024 * 1024])
async def test_big_bodies_are_truncated_and_not_read(size: int) -> None:
    async with Receiver(canned("200 OK", body=b"a" * size)) as rcv:
        sender, backend = make_sender()
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
        await sender.aclose()
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert outcome.response_excerpt == "a" * min(size, EXCERPT_BYTES)
    head = len(outcome.response_headers) + 100  # status line and CRLFs
    (stream,) = backend.streams
    assert stream.received <= head + min(size, EXCERPT_BYTES + 1)


async def test_big_chunked_body_is_truncated_and_not_read() -> None:
    async def chunked(writer: asyncio.StreamWriter, head: bytes) -> None:
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(2000):
            writer.write(b"10\r\n" + b"b" * 16 + b"\r\n")
        writer.write(b"0\r\n\r\n")

    async with Receiver(chunked) as rcv:
        sender, backend = make_sender()
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
        await sender.aclose()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "http_500")
    assert 0 < len(outcome.response_excerpt) <= EXCERPT_BYTES
    assert set(outcome.response_excerpt) == {"b"}
    (stream,) = backend.streams
    assert stream.received <= 200 + EXCERPT_BYTES + 1


async def test_response_head_over_8_kib_is_refused_unread() -> None:
    huge = "".join(f"X-Pad-{i}: {'p' * 100}\r\n" for i in range(200))  # ~22 KiB
    async with Receiver(canned("200 OK", huge, b"ok")) as rcv:
        sender, backend = make_sender()
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
        await sender.aclose()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "bad_response")
    (stream,) = backend.streams
    assert stream.received <= 8192 + EXCERPT_BYTES + 1


async def test_head_of_7_kib_is_kept() -> None:
    pad = "".join(f"X-Pad-{i}: {'p' * 100}\r\n" for i in range(60))  # ~6.7 KiB
    async with Receiver(canned("202 Accepted", pad, b"ok")) as rcv:
        sender, _ = make_sender()
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
        await sender.aclose()
    assert outcome.kind is OutcomeKind.SUCCEEDED and outcome.response_excerpt == "ok"
    assert "x-pad-59" in outcome.response_headers.lower()
    assert len(outcome.response_headers) <= 8192


NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("status", "headers", "kind", "reason", "retry_after"),
    [
        ("200 OK", "", OutcomeKind.SUCCEEDED, None, None),
        ("204 No Content", "", OutcomeKind.SUCCEEDED, None, None),
        ("299 Whatever", "", OutcomeKind.SUCCEEDED, None, None),
        ("304 Not Modified", "", OutcomeKind.FAILED, "redirect", None),
        ("400 Bad Request", "Retry-After: 5\r\n", OutcomeKind.FAILED, "http_400", None),
        ("401 Unauthorized", "", OutcomeKind.FAILED, "http_401", None),
        ("404 Not Found", "", OutcomeKind.FAILED, "http_404", None),
        ("410 Gone", "", OutcomeKind.FAILED, "http_410", None),
        ("413 Content Too Large", "", OutcomeKind.FAILED, "http_413", None),
        ("429 Too Many Requests", "Retry-After: 120\r\n", OutcomeKind.FAILED, "http_429", 120.0),
        ("429 Too Many Requests",
         f"Retry-After: {email.utils.formatdate(NOW + 90, usegmt=True)}\r\n",
         OutcomeKind.FAILED, "http_429", 90.0),
        ("429 Too Many Requests",
         f"Retry-After: {email.utils.formatdate(NOW - 90, usegmt=True)}\r\n",
         OutcomeKind.FAILED, "http_429", 0.0),
        ("429 Too Many Requests", "Retry-After: soon\r\n", OutcomeKind.FAILED, "http_429", None),
        ("429 Too Many Requests", "Retry-After: -5\r\n", OutcomeKind.FAILED, "http_429", None),
        ("429 Too Many Requests", "", OutcomeKind.FAILED, "http_429", None),
        ("500 Internal Server Error", "", OutcomeKind.FAILED, "http_500", None),
        ("502 Bad Gateway", "Retry-After: 3\r\n", OutcomeKind.FAILED, "http_502", 3.0),
        ("503 Service Unavailable",
         f"Retry-After: {email.utils.formatdate(NOW + 3600, usegmt=True)}\r\n",
         OutcomeKind.FAILED, "http_503", 3600.0),
    ],
)  # fmt: skip
async def test_status_mapping(
    status: str, headers: str, kind: OutcomeKind, reason: str | None, retry_after: float | None
) -> None:
    async with Receiver(canned(status, headers, b"body")) as rcv:
        sender, _ = make_sender(wall=lambda: NOW)
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
        await sender.aclose()
    assert (outcome.kind, outcome.reason, outcome.final) == (kind, reason, False)
    assert outcome.status_code == int(status[:3])
    assert outcome.retry_after_s == retry_after
    assert outcome.latency_ms > 0


async def test_guarded_constructor_keeps_the_timer() -> None:
    ticks = iter([10.0, 10.25])
    sender = HttpxSender.guarded(Names(), (), timer=lambda: next(ticks))
    outcome = await sender.send(post("http://127.0.0.1:9/"))  # refused before any connect
    await sender.aclose()
    assert (outcome.reason, outcome.final) == ("ssrf", True)
    assert outcome.latency_ms == pytest.approx(250.0)
    assert sender.client._trust_env is False  # no proxy from the environment


async def test_keep_alive_connections_are_reused_and_a_closed_one_is_not() -> None:
    """LifoPool: sequential attempts share one connection, concurrent ones get one each,
    and a connection the receiver closed is replaced, not written to."""
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                (length,) = [
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ]
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    sender, backend = make_sender()
    try:
        for _ in range(3):
            assert (await sender.send(post(url))).kind is OutcomeKind.SUCCEEDED
        assert len(writers) == 1
        outcomes = await asyncio.gather(*(sender.send(post(url)) for _ in range(4)))
        assert {o.kind for o in outcomes} == {OutcomeKind.SUCCEEDED}
        assert len(writers) == 4  # the idle one reused, three opened
        for w in writers:
            w.close()
            await w.wait_closed()
        again = await sender.send(post(url))
        assert again.kind is OutcomeKind.SUCCEEDED and again.response_excerpt == "ok"
        assert len(writers) == 5 and len(backend.streams) == 5
    finally:
        await sender.aclose()
        server.close()
        await server.wait_closed()
