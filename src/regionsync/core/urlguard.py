"""Which destination URLs and addresses deliveries may go to (SSRF guard, decision half).

Decides whether a URL is acceptable and whether a resolved address is allowed; never
resolves names or opens connections (the adapters do, and pass the addresses in). Rules:
IANA special-purpose registries (RFC 6890) via ``ipaddress.is_global``, plus the IPv4
embedded in IPv4-mapped (RFC 4291), NAT64 (RFC 6052) and 6to4 (RFC 3056) addresses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

__all__ = ["address_allowed", "parse_networks", "validate_url"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_6TO4 = ipaddress.ip_network("2002::/16")


def parse_networks(cidrs: Sequence[str]) -> tuple[Network, ...]:
    """CIDR strings -> networks; raises ValueError for a malformed one."""
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def _embedded_v4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    if addr.sixtofour is not None:
        return addr.sixtofour
    return None


def address_allowed(addr: IPAddress, allow: Sequence[Network] = ()) -> bool:
    """True if deliveries may connect to ``addr``: globally routable, or inside ``allow``.

    An IPv6 address embedding an IPv4 one is judged by the embedded address too.
    """
    if any(addr.version == n.version and addr in n for n in allow):
        return True
    if isinstance(addr, ipaddress.IPv6Address):
        v4 = _embedded_v4(addr)
        if v4 is not None:
            return address_allowed(v4, allow)
    return addr.is_global and not addr.is_multicast


def validate_url(url: object) -> tuple[str, int]:
    """Check an endpoint URL's shape; returns ``(host, port)`` for the caller to resolve.

    Raises ValueError: not a string, not printable ASCII, scheme not http(s), no host,
    credentials in the URL, a fragment, or a bad port.
    """
    if not isinstance(url, str) or len(url) > 2048:
        raise ValueError("url must be a string of at most 2048 characters")
    if not url.isascii() or not url.isprintable() or " " in url:
        # urlsplit silently drops tabs and newlines; httpx refuses them when sending
        raise ValueError("url must be printable ASCII without spaces (punycode and "
                         "percent-encode the rest)")  # fmt: skip
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError("url must be http or https")
    if not parts.hostname:
        raise ValueError("url has no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("url must not carry credentials")
    if parts.fragment:
        raise ValueError("url must not have a fragment")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("url has a bad port") from None
    if port == 0:
        raise ValueError("url has a bad port")
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)
