"""Destination checks: what counts as a public address, URL shapes."""

from __future__ import annotations

import ipaddress

import pytest

from regionsync.core.urlguard import address_allowed, parse_networks, validate_url

REFUSED = [
    "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "198.18.0.1", "224.0.0.1", "0.0.0.0", "::", "::1", "fe80::1", "fc00::1", "2001:db8::1",
    "::ffff:127.0.0.1", "64:ff9b::a00:1", "2002:a00:1::", "192.0.2.1",
]  # fmt: skip
ALLOWED = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize("addr", REFUSED)
def test_non_public_refused(addr: str) -> None:
    assert not address_allowed(ipaddress.ip_address(addr))


@pytest.mark.parametrize("addr", ALLOWED)
def test_public_allowed(addr: str) -> None:
    assert address_allowed(ipaddress.ip_address(addr))


def test_allow_list_exempts_a_range() -> None:
    allow = parse_networks(["127.0.0.0/8", "::1/128"])
    assert address_allowed(ipaddress.ip_address("127.0.0.5"), allow)
    assert address_allowed(ipaddress.ip_address("::1"), allow)
    assert address_allowed(ipaddress.ip_address("::ffff:127.0.0.1"), allow)
    assert not address_allowed(ipaddress.ip_address("10.0.0.1"), allow)


@pytest.mark.parametrize(
    "url",
    ["ftp://x.com/", "javascript:alert(1)", "http://", "http://u:p@x.com/", "http://x.com/#f",
     "http://x.com:99999/", 12, None, "x" * 3000],
)  # fmt: skip
def test_bad_urls(url: object) -> None:
    with pytest.raises(ValueError):
        validate_url(url)


def test_good_url() -> None:
    assert validate_url("https://hooks.example.com/a?b=1") == ("hooks.example.com", 443)
    assert validate_url("http://[::1]:8080/") == ("::1", 8080)
