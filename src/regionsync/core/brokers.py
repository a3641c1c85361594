"""Endpoint destinations beyond HTTP (issue 46): what a broker destination is and which
are acceptable. Decides the shape of ``destination`` bodies, the broker URL's host and
port for the address guard, the URL shown without its password, and the message a
broker gets; never connects (adapters/broker_sender.py does).

Rules: ``type`` is ``http`` (the endpoint's ``url``, as before) or a broker type of
``BROKERS``; a broker URL's scheme belongs to its type (AMQP 0-9-1 URI spec, NATS and
Redis URL forms), has a host, no fragment or query, and may carry credentials (a secret:
the registry seals the whole destination at rest, ``core.registry_keys.is_secret_key``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ..errors import Unprocessable
from .envelope import MASK
from .urlguard import URL_MAX, parse_host_literal

__all__ = [
    "BROKERS",
    "DESTINATION_TYPES",
    "UNREADABLE",
    "BrokerDestination",
    "broker_headers",
    "check_destination_body",
    "destination_json",
    "destination_of",
]

NAME_MAX = 255  # exchange, routing key, subject, stream: at most this many characters

# type -> (schemes, default port per scheme, its required members, optional members)
BROKERS: dict[str, tuple[dict[str, int], tuple[str, ...], tuple[str, ...]]] = {
    "rabbitmq": ({"amqp": 5672, "amqps": 5671}, ("routing_key",), ("exchange",)),
    "nats": ({"nats": 4222, "tls": 4222}, ("subject",), ("stream",)),
    "redis": ({"redis": 6379, "rediss": 6379}, ("stream",), ()),
}
DESTINATION_TYPES = ("http", *BROKERS)
_NAME_RE = {
    # AMQP 0-9-1 shortstr names; "" is the default exchange
    "exchange": re.compile(r"[A-Za-z0-9_.:\-]{0,255}"),
    "routing_key": re.compile(r"[\x21-\x7e]{1,255}"),
    # NATS subjects: tokens split by dots, no wildcards when publishing
    "subject": re.compile(r"[^\s.*>]+(\.[^\s.*>]+)*"),
    "stream": re.compile(r"[A-Za-z0-9_\-:.]{1,255}"),
}
_NATS_STREAM_RE = re.compile(r"[A-Za-z0-9_\-]{1,255}")  # JetStream stream names


@dataclass(frozen=True, slots=True)
class BrokerDestination:
    """Where a broker endpoint's deliveries go: ``type`` (a key of ``BROKERS``), ``url``
    (with its credentials), and the type's names (unused ones are "")."""

    type: str
    url: str
    exchange: str = ""
    routing_key: str = ""
    subject: str = ""
    stream: str = ""

    @property
    def host_port(self) -> tuple[str, int]:
        """The broker's host and port (the scheme's default port when none is given)."""
        parts = urlsplit(self.url)
        return parts.hostname or "", parts.port or BROKERS[self.type][0][parts.scheme]

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme in ("amqps", "tls", "rediss")

    def public_url(self) -> str:
        """The URL with its password replaced by ``…`` (the user name stays): what lists,
        read tokens, the console and the endpoint's ``url`` show."""
        parts = urlsplit(self.url)
        if parts.password is None:
            return self.url
        host = parts.netloc.rpartition("@")[2]
        user = quote(unquote(parts.username or ""), safe="")
        return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))

    def with_host(self, address: str) -> str:
        """The URL with its host replaced by ``address`` (the address the guard checked:
        the connection is pinned to it; the port and credentials stay)."""
        parts = urlsplit(self.url)
        host, port = self.host_port
        userinfo = parts.netloc.rpartition("@")[0]
        literal = f"[{address}]" if ":" in address else address
        netloc = f"{userinfo + '@' if userinfo else ''}{literal}:{port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def value(self) -> dict[str, str]:
        """The registry value (``e/<id>/secret_destination``): the members that are set."""
        out = {"type": self.type, "url": self.url}
        for name in ("exchange", "routing_key", "subject", "stream"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out


def destination_of(value: Any) -> BrokerDestination | None:
    """The destination a registry value holds: None for none, ``UNREADABLE`` for a value
    this release cannot read (a peer's bug, or a type of a later release): such an
    endpoint is never sent to as HTTP, its attempts fail (``bad_destination``)."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in BROKERS:
        return UNREADABLE
    names = ("exchange", "routing_key", "subject", "stream")
    if not isinstance(value.get("url"), str) or any(
        not isinstance(value.get(n, ""), str) for n in names
    ):
        return UNREADABLE
    return BrokerDestination(value["type"], value["url"], *(value.get(n, "") for n in names))


UNREADABLE = BrokerDestination("unreadable", "")


def destination_json(d: BrokerDestination | None, secrets: bool = True) -> dict[str, str]:
    """The API's ``destination`` member; without ``secrets`` the URL's password is ``…``."""
    if d is None:
        return {"type": "http"}
    out = d.value()
    if not secrets:
        out["url"] = d.public_url()
    return out


def _broker_url(url: Any, kind: str, field: str) -> str:
    schemes = BROKERS[kind][0]
    if not isinstance(url, str) or not url or len(url) > URL_MAX:
        raise Unprocessable(f"must be a string of at most {URL_MAX} characters", field=field,
                            code="invalid_url")  # fmt: skip
    if not url.isascii() or not url.isprintable() or " " in url:
        raise Unprocessable("must be printable ASCII without spaces", field=field,
                            code="invalid_url")  # fmt: skip
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        raise Unprocessable(f"a {kind} url's scheme is {' or '.join(schemes)}", field=field,
                            code="invalid_url")  # fmt: skip
    if not parts.hostname:
        raise Unprocessable("url has no host", field=field, code="invalid_url")
    if parts.fragment or parts.query:
        raise Unprocessable("url must have no query or fragment", field=field,
                            code="invalid_url")  # fmt: skip
    try:
        parse_host_literal(parts.hostname)
        port = parts.port
    except ValueError as exc:
        raise Unprocessable(f"url host or port: {exc}", field=field, code="invalid_url") from None
    if port == 0:
        raise Unprocessable("url has a bad port", field=field, code="invalid_url")
    path = parts.path.lstrip("/")
    if kind == "redis" and path and not path.isdigit():
        raise Unprocessable("a redis url's path is a database number", field=field,
                            code="invalid_url")  # fmt: skip
    if kind == "nats" and path:
        raise Unprocessable("a nats url has no path", field=field, code="invalid_url")
    return url


def check_destination_body(body: Any, field: str = "destination") -> BrokerDestination | None:
    """A ``destination`` member judged: None for ``{"type": "http"}`` (or null), else the
    broker destination. 422 naming the member at fault (``destination.url``, ...)."""
    if body is None:
        return None
    if not isinstance(body, Mapping):
        raise Unprocessable("must be an object with a type", field=field)
    kind = body.get("type")
    if kind not in DESTINATION_TYPES:
        raise Unprocessable(f"must be one of {', '.join(DESTINATION_TYPES)}", field=f"{field}.type")
    if kind == "http":
        extra = sorted(set(body) - {"type"})
        if extra:
            raise Unprocessable(
                "an http destination is the endpoint's url", field=f"{field}.{extra[0]}"
            )
        return None
    _, required, optional = BROKERS[kind]
    known = {"type", "url", *required, *optional}
    extra = sorted(set(body) - known)
    if extra:
        raise Unprocessable(f"not a member of a {kind} destination", field=f"{field}.{extra[0]}")
    for name in ("url", *required):
        if name not in body:
            raise Unprocessable("is required", field=f"{field}.{name}")
    url = _broker_url(body["url"], kind, f"{field}.url")
    names: dict[str, str] = {}
    for name in (*required, *optional):
        if name in optional and name not in body:
            names[name] = ""
            continue
        value = body[name]
        pattern = _NATS_STREAM_RE if (kind, name) == ("nats", "stream") else _NAME_RE[name]
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise Unprocessable(f"must be a {name.replace('_', ' ')} of at most {NAME_MAX} "
                                "characters", field=f"{field}.{name}")  # fmt: skip
        names[name] = value
    return BrokerDestination(kind, url, **names)


def broker_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The message headers of a broker attempt: the HTTP attempt's headers (the Standard
    Webhooks ``webhook-id``/``-timestamp``/``-signature``, the event type, ``content-type``
    and the endpoint's own headers) without ``user-agent``, which names an HTTP client."""
    return {k: v for k, v in headers.items() if k != "user-agent"}
