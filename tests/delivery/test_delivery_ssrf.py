"""SSRF guard in the transport: every address form, judged with a stub resolver.

No test here opens a connection: ``GuardedTransport`` wraps a recording inner transport
that answers 204 and remembers which address it was asked to reach. Loopback tests of the
real connection path are in test_delivery_sender.py.
"""

from __future__ import annotations

import ipaddress
import socket

import httpx
import pytest

from regionsync.adapters.sender import GuardedTransport, HttpxSender, PinnedBackend
from regionsync.core.model import DeliveryStatus
from regionsync.core.retry import OutcomeKind, next_step
from regionsync.core.sending import DestinationRefused
from regionsync.core.urlguard import parse_host_literal, parse_networks, validate_url
from regionsync.runtime.ports import OutboundRequest

NAMES: dict[str, list[str]] = {
    "public.test": ["93.184.216.34"],
    "v6public.test": ["2606:4700:4700::1111"],
    "dual.test": ["93.184.216.34", "2606:4700:4700::1111"],
    "localhost.test": ["127.0.0.1"],
    "meta.test": ["169.254.169.254"],
    "mixed.test": ["93.184.216.34", "10.0.0.1"],  # one bad address refuses the name
    "mapped.test": ["::ffff:127.0.0.1"],
    "nat64.test": ["64:ff9b::7f00:1"],
    "sixtofour.test": ["2002:a9fe:a9fe::1"],
    "ula.test": ["fd00:ec2::254"],
    "cgnat.test": ["100.100.100.200"],
    "garbage.test": ["not-an-address"],
}


class StubResolver:
    """Answers from ``NAMES``; ``tempfail.test`` fails like EAI_AGAIN, others NXDOMAIN."""

    def __init__(self, names: dict[str, list[str]] | None = None):
        self.names = NAMES if names is None else names
        self.calls: list[str] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host == "tempfail.test":
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if host == "empty.test":
            return []
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(self.names[host])


class Recorder(httpx.AsyncBaseTransport):
    """Stands in for the network: records what it was asked to reach, answers 204."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []  # (url host, pinned address, Host header)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pinned = request.extensions.get("regionsync.pinned")
        self.seen.append((request.url.host, str(pinned), request.headers["host"]))
        return httpx.Response(204)


def _sender(allow: list[str] | None = None, resolver: StubResolver | None = None):
    recorder = Recorder()
    resolver = resolver or StubResolver()
    transport = GuardedTransport(resolver, parse_networks(allow or []), inner=recorder)
    client = httpx.AsyncClient(transport=transport, timeout=None, trust_env=False)
    return HttpxSender(client), recorder, resolver


def _req(url: str) -> OutboundRequest:
    return OutboundRequest(url, {"content-type": "application/json"}, b"{}", 5.0)


# (url, reason): every one is refused, final, and nothing is connected
REFUSED = [
    ("http://127.0.0.1/", "ssrf"),
    ("http://127.1/", "ssrf"),  # short form
    ("http://127.0.1/", "ssrf"),
    ("http://0x7f000001/", "ssrf"),  # hex integer
    ("http://0X7F000001/", "ssrf"),
    ("http://2130706433/", "ssrf"),  # decimal integer
    ("http://017700000001/", "ssrf"),  # octal integer
    ("http://0x7f.1/", "ssrf"),  # hex short form
    ("http://0x7f.0x0.0x0.0x1/", "ssrf"),
    ("http://127.0.0.1./", "ssrf"),  # trailing dot
    ("http://%31%32%37.0.0.1/", "ssrf"),  # percent-encoded
    ("https://127.0.0.1:8443/", "ssrf"),
    ("http://0.0.0.0/", "ssrf"),
    ("http://0/", "ssrf"),  # 0.0.0.0
    ("http://[::]/", "ssrf"),
    ("http://[::1]/", "ssrf"),
    ("http://10.0.0.1/", "ssrf"),
    ("http://012.1/", "ssrf"),  # octal 10.0.0.1
    ("http://167772161/", "ssrf"),  # 10.0.0.1
    ("http://172.16.0.1/", "ssrf"),
    ("http://172.31.255.255/", "ssrf"),
    ("http://192.168.0.1/", "ssrf"),
    ("http://3232235521/", "ssrf"),  # 192.168.0.1
    ("http://169.254.169.254/", "ssrf"),  # cloud metadata
    ("http://0xa9fea9fe/", "ssrf"),  # 169.254.169.254
    ("http://100.64.0.1/", "ssrf"),  # CGNAT
    ("http://100.127.255.254/", "ssrf"),
    ("http://198.18.0.1/", "ssrf"),  # benchmarking
    ("http://198.19.255.1/", "ssrf"),
    ("http://224.0.0.1/", "ssrf"),  # multicast
    ("http://239.255.255.250/", "ssrf"),
    ("http://255.255.255.255/", "ssrf"),  # broadcast
    ("http://240.0.0.1/", "ssrf"),  # reserved
    ("http://192.0.2.1/", "ssrf"),  # documentation (TEST-NET-1)
    ("http://198.51.100.7/", "ssrf"),  # TEST-NET-2
    ("http://203.0.113.9/", "ssrf"),  # TEST-NET-3
    ("http://192.0.0.8/", "ssrf"),  # IETF protocol assignments
    ("http://[3fff::1]/", "ssrf"),  # documentation (RFC 9637)
    ("http://[64:ff9b:1::a00:1]/", "ssrf"),  # local-use NAT64
    ("http://[2001:db8::1]/", "ssrf"),  # documentation
    ("http://[fe80::1]/", "ssrf"),  # link-local
    ("http://[fc00::1]/", "ssrf"),  # unique-local
    ("http://[fd12:3456::1]/", "ssrf"),
    ("http://[ff02::1]/", "ssrf"),  # multicast
    ("http://[100::1]/", "ssrf"),  # discard-only
    ("http://[::ffff:127.0.0.1]/", "ssrf"),  # IPv4-mapped
    ("http://[::ffff:7f00:1]/", "ssrf"),
    ("http://[::ffff:10.0.0.1]:8080/", "ssrf"),
    ("http://[::127.0.0.1]/", "ssrf"),  # IPv4-compatible (deprecated)
    ("http://[::2]/", "ssrf"),  # reserved, outside 2000::/3
    ("http://[64:ff9b::a9fe:a9fe]/", "ssrf"),  # NAT64 of 169.254.169.254
    ("http://[64:ff9b::7f00:1]/", "ssrf"),  # NAT64 of 127.0.0.1
    ("http://[2002:7f00:1::]/", "ssrf"),  # 6to4 of 127.0.0.1
    ("http://[2002:c0a8:1::1]/", "ssrf"),  # 6to4 of 192.168.0.1
    ("http://[fe80::1%25eth0]/", "ssrf"),  # zone id
    ("http://localhost.test/", "ssrf"),  # names: judged by what they resolve to
    ("http://meta.test/", "ssrf"),
    ("http://mixed.test/", "ssrf"),
    ("http://mapped.test/", "ssrf"),
    ("http://nat64.test/", "ssrf"),
    ("http://sixtofour.test/", "ssrf"),
    ("http://ula.test/", "ssrf"),
    ("http://cgnat.test/", "ssrf"),
    ("http://garbage.test/", "ssrf"),
    ("http://0177.0.0.1/", "bad_request"),  # httpx refuses dotted octal outright
    ("http://1.2.3.999/", "bad_request"),
    ("http://010.010.010.010/", "bad_request"),  # 8.8.8.8, but httpx cannot send it
]

# (url, the address the connection must be pinned to)
ALLOWED = [
    ("http://8.8.8.8/", "8.8.8.8"),
    ("http://0x08080808/", "8.8.8.8"),
    ("http://134744072/", "8.8.8.8"),
    ("http://8.8.2056/", "8.8.8.8"),
    ("http://[2606:4700:4700::1111]/", "2606:4700:4700::1111"),
    ("http://[::ffff:8.8.8.8]/", "::ffff:808:808"),
    ("http://[64:ff9b::808:808]/", "64:ff9b::808:808"),
    ("http://public.test/", "93.184.216.34"),
    ("https://public.test:8443/x?y=1", "93.184.216.34"),
    ("http://v6public.test/", "2606:4700:4700::1111"),
    ("http://dual.test/", "93.184.216.34"),
]


def test_table_is_big_enough() -> None:
    assert len(REFUSED) + len(ALLOWED) >= 40
    assert len(REFUSED) >= 40


@pytest.mark.parametrize(("url", "reason"), REFUSED)
async def test_refused_forms(url: str, reason: str) -> None:
    sender, recorder, _ = _sender()
    outcome = await sender.send(_req(url))
    assert outcome.kind is OutcomeKind.FAILED
    assert (outcome.reason, outcome.final) == (reason, True), outcome
    assert recorder.seen == []
    decision = next_step(outcome, 1, 0, 0, 0.0)
    assert decision.status is DeliveryStatus.DEAD


@pytest.mark.parametrize(("url", "pinned"), ALLOWED)
async def test_allowed_forms_are_pinned(url: str, pinned: str) -> None:
    sender, recorder, _ = _sender()
    outcome = await sender.send(_req(url))
    assert outcome.kind is OutcomeKind.SUCCEEDED, outcome
    ((host, seen_pin, host_header),) = recorder.seen
    assert seen_pin == pinned
    original = httpx.URL(url)
    assert host_header == original.netloc.decode()  # Host keeps what the URL said
    if parse_host_literal(original.host) is None:
        assert host == original.host  # names stay (Host, SNI, pool key); pin is separate
    else:
        assert ipaddress.ip_address(host) == ipaddress.ip_address(pinned)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("0x7f000001", "127.0.0.1"), ("2130706433", "127.0.0.1"),
        ("017700000001", "127.0.0.1"), ("127.1", "127.0.0.1"), ("0177.0.0.1", "127.0.0.1"),
        ("10.1.513", "10.1.2.1"), ("0x", "0.0.0.0"), ("4294967295", "255.255.255.255"),
        ("[::1]", "::1"), ("::ffff:7f00:1", "::ffff:7f00:1"), ("1.2.3.4", "1.2.3.4"),
        ("example.com", None), ("1.2.3.4x", None), ("xn--bcher-kva.de", None),
    ],
)  # fmt: skip
def test_parse_host_literal(host: str, expected: str | None) -> None:
    got = parse_host_literal(host)
    assert (None if got is None else str(got)) == expected


@pytest.mark.parametrize(
    "host",
    ["1.2.3.999", "4294967296", "1.2.3.4.5", "08", "foo.0x10", "1..2", "256.1",
     "[fe80::1%eth0]", "fe80::1%25eth0", "[::1", "[not:an:address]", ""],
)  # fmt: skip
def test_parse_host_literal_refuses_bad_literals(host: str) -> None:
    with pytest.raises(ValueError):
        parse_host_literal(host)


def test_registration_refuses_bad_literals() -> None:
    for url in ("http://[fe80::1%25eth0]/", "http://1.2.3.999/", "http://foo.0x10/"):
        with pytest.raises(ValueError):
            validate_url(url)
    assert validate_url("http://0x7f000001:8080/") == ("0x7f000001", 8080)


async def test_allow_private_networks_exempts_only_its_ranges() -> None:
    sender, recorder, _ = _sender(["127.0.0.0/8", "::1/128", "fd00:ec2::/32"])
    for url in ("http://127.1/", "http://0x7f000002/", "http://[::1]/", "http://ula.test/",
                "http://localhost.test/", "http://mapped.test/"):  # fmt: skip
        outcome = await sender.send(_req(url))
        assert outcome.kind is OutcomeKind.SUCCEEDED, (url, outcome)
    assert [pin for _, pin, _ in recorder.seen] == [
        "127.0.0.1", "127.0.0.2", "::1", "fd00:ec2::254", "127.0.0.1", "::ffff:7f00:1",
    ]  # fmt: skip
    for url in ("http://10.0.0.1/", "http://meta.test/", "http://[::2]/", "http://mixed.test/"):
        outcome = await sender.send(_req(url))
        assert (outcome.reason, outcome.final) == ("ssrf", True), url
    assert len(recorder.seen) == 6


async def test_dns_failures_are_retryable() -> None:
    sender, recorder, _ = _sender()
    for url in ("http://tempfail.test/", "http://nx.test/", "http://empty.test/"):
        outcome = await sender.send(_req(url))
        assert outcome.kind is OutcomeKind.FAILED
        assert (outcome.reason, outcome.final) == ("dns", False), url
        decision = next_step(outcome, 1, 0, 0, 0.0)
        assert decision.status is DeliveryStatus.PENDING
    assert recorder.seen == []


async def test_dns_rebinding_cannot_switch_the_address() -> None:
    class Rebinding(StubResolver):
        async def resolve(self, host: str, port: int) -> list[str]:
            self.calls.append(host)
            return ["93.184.216.34"] if len(self.calls) == 1 else ["127.0.0.1"]

    resolver = Rebinding()
    sender, recorder, _ = _sender(resolver=resolver)
    first = await sender.send(_req("http://rebind.test/"))
    assert first.kind is OutcomeKind.SUCCEEDED
    assert resolver.calls == ["rebind.test"]  # exactly one resolution per request
    assert recorder.seen == [("rebind.test", "93.184.216.34", "rebind.test")]
    second = await sender.send(_req("http://rebind.test/"))
    assert (second.reason, second.final) == ("ssrf", True)
    assert resolver.calls == ["rebind.test"] * 2 and len(recorder.seen) == 1


async def test_backend_never_connects_without_a_checked_address() -> None:
    backend = PinnedBackend(parse_networks(["127.0.0.0/8"]))
    with pytest.raises(DestinationRefused):
        await backend.connect_tcp("127.0.0.1", 9)  # no pin: refused, nothing connected
    with pytest.raises(DestinationRefused):
        await backend.connect_tcp("localhost", 9)
    with pytest.raises(DestinationRefused):
        await backend.connect_unix_socket("/tmp/x.sock")
