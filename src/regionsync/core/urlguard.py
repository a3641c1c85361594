"""Which destination URLs and addresses deliveries may go to (SSRF guard, decision half).

Decides whether a URL is acceptable and whether a resolved address is allowed; never
resolves names or opens connections (the adapters do, and pass the addresses in). Rules:
IANA special-purpose registries (RFC 6890) via ``ipaddress.is_global``, plus the IPv4
embedded in IPv4-mapped (RFC 4291), NAT64 (RFC 6052) and 6to4 (RFC 3056) addresses.

A host written as an address literal is judged by the address it denotes, whatever its
spelling: ``parse_host_literal`` reads the loose IPv4 forms of inet_aton(3) and the WHATWG
URL Standard (``0x7f000001``, ``2130706433``, ``017700000001``, ``127.1``, ``0177.0.0.1``)
and IPv6 literals, so ``http://0x7f.1/`` is refused like ``http://127.0.0.1/`` without
asking a resolver (which might pass the text to DNS, or to inet_aton, or to neither).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from urllib.parse import unquote_to_bytes, urlsplit

__all__ = ["URL_MAX", "address_allowed", "parse_host_literal", "parse_networks", "validate_url"]

URL_MAX = 2048  # characters of an endpoint URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_6TO4 = ipaddress.ip_network("2002::/16")
# Not globally reachable per the IANA registries, but ``is_global`` says otherwise on some
# Python versions (3.11.7 among them): refused whatever the interpreter thinks.
_NOT_GLOBAL: tuple[Network, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "192.0.0.0/24",  # IETF protocol assignments (RFC 6890), but for the two below
        "192.88.99.0/24",  # deprecated 6to4 relay anycast (RFC 7526)
        "64:ff9b:1::/48",  # local-use NAT64 (RFC 8215)
        "3fff::/20",  # documentation (RFC 9637)
        "5f00::/16",  # SRv6 SIDs (RFC 9602)
        "fec0::/10",  # deprecated site-local (RFC 3879)
    )
)
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")  # all else is reserved or special
_GLOBAL_EXCEPTIONS = (ipaddress.ip_address("192.0.0.9"), ipaddress.ip_address("192.0.0.10"))


_IPV4_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")
_ENDS_IN_NUMBER = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")


def parse_host_literal(host: str) -> IPAddress | None:
    """The address a URL host denotes if it is an IP literal; None if it is a name.

    Raises ValueError for a host that must be a literal but is not a valid one; callers
    refuse such a host (it never goes to a resolver).

    IPv6 (RFC 3986 ``IP-literal``, WHATWG "IPv6 parser"): ``[...]`` with or without the
    brackets (``urlsplit(...).hostname`` and ``httpx.URL.host`` strip them; a name never
    contains ``:``). A zone id (``fe80::1%eth0``, ``%25eth0`` in URLs, RFC 6874) is refused:
    it names a local interface, which a delivery has no business choosing.

    IPv4 (WHATWG URL Standard, "host parser" / "IPv4 parser", which follows inet_aton(3)):
    the host is percent-decoded and lowercased, one trailing ``.`` is dropped, and if its
    last dot-separated part is a number (ASCII digits, or ``0x`` and hex digits) the host
    *is* an IPv4 literal and must parse as one, else ValueError (``1.2.3.999``,
    ``foo.0x10``). Parsing: 1 to 4 parts; each part is ``0x``/``0X`` followed by hex
    digits (``0x`` alone is 0), or ``0`` followed by octal digits, or decimal; every part
    but the last is one byte, the last fills the remaining bytes (``127.1`` is 127.0.0.1,
    ``10.1.513`` is 10.1.2.1, ``2130706433`` is 127.0.0.1). glibc's inet_aton and
    getaddrinfo accept the same forms, so this is what a resolver would have connected to.
    """
    if not host:
        raise ValueError("empty host")
    if host.startswith("[") or host.endswith("]"):
        if not (host.startswith("[") and host.endswith("]")):
            raise ValueError(f"unbalanced brackets in host {host!r}")
        return _parse_ipv6(host[1:-1])
    if ":" in host:
        return _parse_ipv6(host)
    raw = unquote_to_bytes(host)
    if not raw.isascii():
        return None  # an internationalised name: the resolver's business
    text = raw.decode("ascii").lower()
    parts = text.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if not _ENDS_IN_NUMBER.fullmatch(parts[-1]):
        return None
    if len(parts) > 4:
        raise ValueError(f"host {host!r} ends in a number but has more than 4 parts")
    values = []
    for part in parts:
        if not _IPV4_PART.fullmatch(part):
            raise ValueError(f"host {host!r} is not a valid IPv4 address")
        if part[:2] == "0x":
            values.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part[0] == "0":
            values.append(int(part, 8))
        else:
            values.append(int(part))
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        raise ValueError(f"host {host!r} is out of range for an IPv4 address")
    number = last
    for i, v in enumerate(head):
        number += v << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def _parse_ipv6(text: str) -> ipaddress.IPv6Address:
    if "%" in text:
        raise ValueError("IPv6 zone ids are not allowed in a destination")
    try:
        return ipaddress.IPv6Address(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a valid IPv6 address") from None


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

    An IPv6 address embedding an IPv4 one is judged by the embedded address; any other
    IPv6 address must be global unicast (2000::/3) too (``::2``, IPv4-compatible
    ``::a.b.c.d`` and the rest of the reserved space are refused).
    """
    if any(addr.version == n.version and addr in n for n in allow):
        return True
    if isinstance(addr, ipaddress.IPv6Address):
        v4 = _embedded_v4(addr)
        if v4 is not None:
            return address_allowed(v4, allow)
        if addr not in _GLOBAL_UNICAST_V6:
            return False
    if not addr.is_global or addr.is_multicast:
        return False
    if addr in _GLOBAL_EXCEPTIONS:
        return True
    return not any(addr.version == n.version and addr in n for n in _NOT_GLOBAL)


def validate_url(url: object) -> tuple[str, int]:
    """Check an endpoint URL's shape; returns ``(host, port)`` for the caller to resolve.

    Raises ValueError: not a string, not printable ASCII, scheme not http(s), no host,
    credentials in the URL, a fragment, a bad port, or a host that must be an address
    literal but is not a valid one (``parse_host_literal``). Callers judge the host with
    ``parse_host_literal`` first and resolve only names.
    """
    if not isinstance(url, str) or len(url) > URL_MAX:
        raise ValueError(f"url must be a string of at most {URL_MAX} characters")
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
        parse_host_literal(parts.hostname)
    except ValueError as exc:
        raise ValueError(f"url host: {exc}") from None
    try:
        port = parts.port
    except ValueError:
        raise ValueError("url has a bad port") from None
    if port == 0:
        raise ValueError("url has a bad port")
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)
