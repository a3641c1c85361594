"""AiohttpSender (the production sender) over real loopback sockets: the same guarantees
as HttpxSender (test_delivery_sender.py, test_delivery_ssrf.py): pinning, SSRF refusals,
no redirects, the total deadline, bounded capture, status mapping, keep-alive reuse."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
from test_delivery_sender import LOOPBACK, Names, Receiver, canned, post
from test_delivery_ssrf import REFUSED, StubResolver

from regionsync.adapters.aiohttp_sender import RCVBUF_BYTES, AiohttpSender
from regionsync.core.retry import OutcomeKind
from regionsync.core.sending import EXCERPT_BYTES, HEADERS_BYTES


def make(resolver: Any = None, allow: Any = LOOPBACK, **kw: Any) -> tuple[AiohttpSender, list]:
    stats: list = []
    return AiohttpSender(resolver or Names(), allow, stats=stats, **kw), stats


def slack() -> int:
    """What one read past the bounds may bring: the socket's actual receive buffer."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        return s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)


async def test_connects_to_the_checked_address_and_keeps_the_host_name() -> None:
    async with Receiver(canned("200 OK", body=b"thanks")) as rcv:
        names = Names({"hooks.receiver.test": ["127.0.0.1"]})
        sender, stats = make(names)
        outcome = await sender.send(post(f"http://hooks.receiver.test:{rcv.port}/hook"))
        await sender.aclose()
    assert outcome.kind is OutcomeKind.SUCCEEDED and outcome.status_code == 200
    assert outcome.response_excerpt == "thanks"
    assert "content-length: 6" in outcome.response_headers.lower()
    assert rcv.host_header() == f"hooks.receiver.test:{rcv.port}"
    assert names.calls == ["hooks.receiver.test"]
    assert [h.peer for h in stats] == [("127.0.0.1", rcv.port)]


async def test_non_canonical_literal_connects_to_the_address_it_denotes() -> None:
    async with Receiver(canned("204 No Content")) as rcv:
        names = Names()
        sender, stats = make(names)
        outcome = await sender.send(post(f"http://0x7f000001:{rcv.port}/"))
        await sender.aclose()
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert names.calls == []
    assert [h.peer for h in stats] == [("127.0.0.1", rcv.port)]


async def test_dns_rebinding_over_loopback() -> None:
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
        sender, stats = make(names)
        outcome = await sender.send(post(f"http://rebind.test:{good.port}/"))
        await sender.aclose()
        trap.close()
        await trap.wait_closed()
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert names.calls == ["rebind.test"] and hits == []
    assert [h.peer for h in stats] == [("127.0.0.1", good.port)]


# httpx cannot send these; here dotted octal and 1.2.3.999 are judged as literals
# (127.0.0.1 refused, 1.2.3.999 invalid) and 010.010.010.010 is 8.8.8.8, a public address
# the drips below would hold an attempt 20 s or more past its 1 s deadline: anything under
# this shows the deadline held (a tight bound would only time the machine)
DRIP_BOUND_S = 5.0

REFUSED_HERE = [(u, r) for u, r in REFUSED if r == "ssrf"] + [
    ("http://0177.0.0.1/", "ssrf"),
    ("http://1.2.3.999/", "ssrf"),
]


@pytest.mark.parametrize(("url", "reason"), REFUSED_HERE)
async def test_refused_forms_never_connect(url: str, reason: str) -> None:
    sender, stats = make(StubResolver(), allow=())
    outcome = await sender.send(post(url))
    await sender.aclose()
    assert (outcome.kind, outcome.reason, outcome.final) == (OutcomeKind.FAILED, reason, True)
    assert stats == []


async def test_a_name_resolving_to_a_private_address_is_refused() -> None:
    for host in ("localhost.test", "meta.test", "mixed.test", "mapped.test", "nat64.test"):
        sender, stats = make(StubResolver(), allow=())
        outcome = await sender.send(post(f"http://{host}/"))
        await sender.aclose()
        assert (outcome.reason, outcome.final) == ("ssrf", True), host
        assert stats == []


async def test_redirect_is_a_failure_and_location_is_never_contacted() -> None:
    async with Receiver(canned("200 OK")) as trap:
        for status in ("301 Moved Permanently", "302 Found", "307 Temporary Redirect",
                       "308 Permanent Redirect"):  # fmt: skip
            location = f"Location: http://127.0.0.1:{trap.port}/stolen\r\n"
            async with Receiver(canned(status, location)) as rcv:
                sender, _ = make()
                outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
                await sender.aclose()
            assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "redirect")
            assert outcome.status_code == int(status[:3])
    assert trap.connections == 0


@pytest.mark.parametrize("head_only", [False, True])
async def test_slow_drip_cannot_extend_the_deadline(head_only: bool) -> None:
    async def drip(writer: asyncio.StreamWriter, head: bytes) -> None:
        if not head_only:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 100 if head_only else b"x" * 100:
            writer.write(bytes([byte]) if head_only else b"x")
            await writer.drain()
            await asyncio.sleep(0.2)

    async with Receiver(drip) as rcv:
        sender, _ = make()
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

    sender, stats = make(Hanging())
    outcome = await sender.send(post("http://slow-dns.test/", timeout_s=0.3))
    await sender.aclose()
    assert (outcome.kind, outcome.reason, outcome.final) == (OutcomeKind.FAILED, "dns", False)
    assert stats == []


async def test_connection_refused_is_a_connect_failure() -> None:
    async with Receiver(canned("200 OK")) as rcv:
        port = rcv.port
    sender, _ = make()
    outcome = await sender.send(post(f"http://127.0.0.1:{port}/"))
    await sender.aclose()
    assert (outcome.kind, outcome.reason, outcome.final) == (OutcomeKind.FAILED, "connect", False)


@pytest.mark.parametrize("size", [EXCERPT_BYTES - 1, EXCERPT_BYTES, 64 * 1024, 4 * 1024 * 1024])
async def test_big_bodies_are_truncated_and_not_read(size: int) -> None:
    async with Receiver(canned("200 OK", body=b"a" * size)) as rcv:
        sender, stats = make()
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
        await sender.aclose()
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert outcome.response_excerpt == "a" * min(size, EXCERPT_BYTES)
    head = len(outcome.response_headers) + 100
    (conn,) = stats
    assert conn.received <= head + min(size, EXCERPT_BYTES + 1 + slack())


async def test_big_chunked_body_is_truncated_and_not_read() -> None:
    async def chunked(writer: asyncio.StreamWriter, head: bytes) -> None:
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(20000):
            writer.write(b"10\r\n" + b"b" * 16 + b"\r\n")
        writer.write(b"0\r\n\r\n")

    async with Receiver(chunked) as rcv:
        sender, stats = make()
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
        await sender.aclose()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "http_500")
    assert 0 < len(outcome.response_excerpt) <= EXCERPT_BYTES
    assert set(outcome.response_excerpt) == {"b"}
    (conn,) = stats
    assert conn.received <= 200 + EXCERPT_BYTES + 1 + slack()


async def test_response_head_over_8_kib_is_refused_unread() -> None:
    huge = "".join(f"X-Pad-{i}: {'p' * 100}\r\n" for i in range(2000))  # ~220 KiB
    async with Receiver(canned("200 OK", huge, b"ok")) as rcv:
        sender, stats = make()
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
        await sender.aclose()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "bad_response")
    (conn,) = stats
    assert conn.received <= HEADERS_BYTES + slack()


async def test_head_of_7_kib_is_kept() -> None:
    pad = "".join(f"X-Pad-{i}: {'p' * 100}\r\n" for i in range(60))
    async with Receiver(canned("202 Accepted", pad, b"ok")) as rcv:
        sender, _ = make()
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
        await sender.aclose()
    assert outcome.kind is OutcomeKind.SUCCEEDED and outcome.response_excerpt == "ok"
    assert "x-pad-59" in outcome.response_headers.lower()


@pytest.mark.parametrize(
    ("status", "headers", "reason", "retry_after"),
    [
        ("204 No Content", "", None, None),
        ("304 Not Modified", "", "redirect", None),
        ("400 Bad Request", "Retry-After: 5\r\n", "http_400", None),
        ("410 Gone", "", "http_410", None),
        ("429 Too Many Requests", "Retry-After: 120\r\n", "http_429", 120.0),
        ("503 Service Unavailable", "Retry-After: 3\r\n", "http_503", 3.0),
    ],
)
async def test_status_mapping(
    status: str, headers: str, reason: str | None, retry_after: float | None
) -> None:
    body = b"" if status[:3] in ("204", "304") else b"body"  # no body allowed (RFC 9110)
    async with Receiver(canned(status, headers, body)) as rcv:
        sender, _ = make()
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
        await sender.aclose()
    assert outcome.reason == reason and outcome.final is False
    assert outcome.status_code == int(status[:3])
    assert outcome.retry_after_s == retry_after


async def test_keep_alive_connections_are_reused_and_new_ones_judged_again() -> None:
    async def keep(writer: asyncio.StreamWriter, head: bytes) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    served = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                (n,) = [int(x.split(b":", 1)[1]) for x in head.split(b"\r\n")
                        if x.lower().startswith(b"content-length:")]  # fmt: skip
                await reader.readexactly(n)
                served += 1
                await keep(writer, head)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://kept.test:{server.sockets[0].getsockname()[1]}/"
    names = Names()
    sender, stats = make(names)
    try:
        for _ in range(3):
            assert (await sender.send(post(url))).response_excerpt == "ok"
        assert served == 3 and len(stats) == 1
        assert names.calls == ["kept.test"]  # judged at the connect, not per request
        both = await asyncio.gather(*(sender.send(post(url)) for _ in range(2)))
        assert {o.response_excerpt for o in both} == {"ok"} and len(stats) == 2
        assert names.calls == ["kept.test"] * 2  # a new connection is judged again
    finally:
        await sender.aclose()
        server.close()
        await server.wait_closed()


async def test_many_small_headers_within_8_kib_are_kept() -> None:
    many = "".join(f"X-{i}: y\r\n" for i in range(600))  # ~5.6 KiB in 600 lines
    async with Receiver(canned("200 OK", many, b"ok")) as rcv:
        sender, _ = make()
        outcome = await sender.send(post(f"http://127.0.0.1:{rcv.port}/"))
        await sender.aclose()
    assert (outcome.kind, outcome.response_excerpt) == (OutcomeKind.SUCCEEDED, "ok")
    assert "x-599: y" in outcome.response_headers.lower()
