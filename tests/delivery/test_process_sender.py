"""ProcessSender (issue 17): attempts made by an AiohttpSender in a real child process,
over real loopback sockets. The outcomes equal the in-process sender's, the SSRF guard
and the redirect refusal hold in the child, signatures arrive verifiable, many attempts
share the pipes, and a child that dies turns its attempts into indeterminate outcomes and
is replaced."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import time

import pytest
from standardwebhooks import Webhook
from test_delivery_sender import Receiver, canned, post

from regionsync.adapters.aiohttp_sender import AiohttpSender
from regionsync.adapters.process_sender import RESPAWN_MIN_S, ProcessSender
from regionsync.adapters.system import SystemResolver
from regionsync.core.envelope import delivery_headers
from regionsync.core.retry import OutcomeKind
from regionsync.core.signing import make_secret
from regionsync.core.urlguard import parse_networks
from regionsync.runtime.ports import OutboundRequest

ALLOW = ["127.0.0.0/8"]


def _same(a: object, b: object) -> bool:
    """Equal outcomes but for the measured latency."""
    return dataclasses.replace(a, latency_ms=0.0) == dataclasses.replace(b, latency_ms=0.0)  # type: ignore[type-var]


@pytest.mark.parametrize(
    ("status", "headers", "body"),
    [
        ("200 OK", "", b"thanks"),
        ("503 Service Unavailable", "Retry-After: 3\r\n", b"later"),
        ("301 Moved Permanently", "Location: http://127.0.0.1:1/x\r\n", b""),
        ("200 OK", "", b"x" * 100_000),  # the capture bound applies in the child
    ],
)
async def test_outcomes_equal_the_in_process_senders(
    status: str, headers: str, body: bytes
) -> None:
    async with Receiver(canned(status, headers, body)) as rcv:
        url = f"http://127.0.0.1:{rcv.port}/hook"
        local = AiohttpSender(SystemResolver(), parse_networks(ALLOW))
        child = ProcessSender(ALLOW)
        try:
            mine, theirs = await local.send(post(url)), await child.send(post(url))
        finally:
            await local.aclose()
            await child.aclose()
    assert _same(mine, theirs), (mine, theirs)
    assert theirs.latency_ms > 0


async def test_the_ssrf_guard_refuses_in_the_child() -> None:
    async with Receiver(canned("200 OK")) as rcv:
        child = ProcessSender()  # loopback not allowed
        try:
            outcome = await child.send(post(f"http://127.0.0.1:{rcv.port}/"))
        finally:
            await child.aclose()
    assert (outcome.kind, outcome.reason, outcome.final) == (OutcomeKind.FAILED, "ssrf", True)
    assert rcv.connections == 0


async def test_signed_requests_arrive_verifiable() -> None:
    secret = make_secret(os.urandom(32))
    body = b'{"type":"push","data":{"ref":"refs/heads/main","n":"\\u00e9"}}'
    headers = delivery_headers({"x-team": "a"}, "ua", "evt_1", "push", [secret],
                               int(time.time()), body)  # fmt: skip
    got: list[tuple[bytes, bytes]] = []

    async def capture(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))  # fmt: skip
        got.append((head, await reader.readexactly(length)))
        writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(capture, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    child = ProcessSender(ALLOW)
    try:
        outcome = await child.send(OutboundRequest(url, headers, body, 5.0))
    finally:
        await child.aclose()
        server.close()
    assert outcome.kind is OutcomeKind.SUCCEEDED
    head, received = got[0]
    assert received == body
    sent = {}
    for line in head.split(b"\r\n")[1:]:
        if b":" in line:
            name, value = line.decode().split(":", 1)
            sent[name.strip().lower()] = value.strip()
    Webhook(secret).verify(received, sent)  # raises if the signature does not hold
    assert sent["x-team"] == "a"


async def test_many_attempts_share_the_child_and_keep_their_answers() -> None:
    async def echo(writer: asyncio.StreamWriter, head: bytes) -> None:
        ident = next(line.split(b":")[1].strip() for line in head.split(b"\r\n")
                     if line.lower().startswith(b"webhook-id:"))  # fmt: skip
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                     % (len(ident), ident))  # fmt: skip

    async with Receiver(echo) as rcv:
        child = ProcessSender(ALLOW)
        url = f"http://127.0.0.1:{rcv.port}/"
        try:
            outcomes = await asyncio.gather(*(
                child.send(OutboundRequest(url, {"webhook-id": f"msg_{i}"}, b"{}", 5.0))
                for i in range(60)
            ))  # fmt: skip
        finally:
            await child.aclose()
    assert [o.response_excerpt for o in outcomes] == [f"msg_{i}" for i in range(60)]
    assert child.children == 1


async def test_a_dead_child_makes_its_attempts_indeterminate_and_is_replaced() -> None:
    hold = asyncio.Event()

    async def hang(writer: asyncio.StreamWriter, head: bytes) -> None:
        await hold.wait()

    async with Receiver(hang) as slow, Receiver(canned("200 OK", body=b"ok")) as fine:
        child = ProcessSender(ALLOW)
        try:
            pending = asyncio.create_task(child.send(post(f"http://127.0.0.1:{slow.port}/", 30)))
            for _ in range(500):  # until the child has the request open
                if slow.connections:
                    break
                await asyncio.sleep(0.01)
            assert slow.connections == 1
            pid = child.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            lost = await asyncio.wait_for(pending, 10)
            assert (lost.kind, lost.reason) == (OutcomeKind.INDETERMINATE, "network")
            assert "exited" in lost.response_excerpt
            await asyncio.sleep(RESPAWN_MIN_S)
            again = await child.send(post(f"http://127.0.0.1:{fine.port}/"))
            assert again.kind is OutcomeKind.SUCCEEDED
            assert child.children == 2 and child.pid != pid
        finally:
            hold.set()
            await child.aclose()


async def test_aclose_stops_the_child() -> None:
    async with Receiver(canned("204 No Content")) as rcv:
        child = ProcessSender(ALLOW)
        await child.send(post(f"http://127.0.0.1:{rcv.port}/"))
        pid = child.pid
        await child.aclose()
    assert pid is not None and child.pid is None
    with pytest.raises(ProcessLookupError):  # exited and reaped
        os.kill(pid, 0)


async def test_a_child_that_cannot_start_gives_an_indeterminate_outcome() -> None:
    child = ProcessSender(ALLOW, python="/nonexistent/python3")
    try:
        outcome = await child.send(post("http://127.0.0.1:9/"))
    finally:
        await child.aclose()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.INDETERMINATE, "network")
    assert child.children == 0


@pytest.mark.parametrize("log_format", ["json", "text"])
async def test_the_child_logs_as_the_node_does(
    log_format: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """The child's log lines take the node's ``log_format`` and region (before, it
    always wrote text lines tagged ``[sender]``, breaking a JSON log pipeline)."""
    async with Receiver(canned("204 No Content")) as rcv:
        child = ProcessSender(ALLOW, logs=(log_format, "info", "eu-west-1"))
        try:
            await child.send(post(f"http://127.0.0.1:{rcv.port}/"))
            pid = child.pid
        finally:
            await child.aclose()
    lines = [ln for ln in capfd.readouterr().err.splitlines() if f"process {pid} started" in ln]
    assert len(lines) == 1, capfd.readouterr().err
    if log_format == "json":
        line = json.loads(lines[0])
        assert (line["region"], line["level"], line["logger"]) == (
            "eu-west-1", "info", "regionsync.delivery"
        )  # fmt: skip
    else:
        assert " INFO regionsync.delivery [eu-west-1 sender] " in lines[0]
