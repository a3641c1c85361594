"""The options of the commands that send a JSON body, declared once per body member:
``Member`` says the member's JSON name, its option and how the option's text becomes the
member's value. A command takes its options from a table (``options``) and builds its body
from what was given (``body_of``): a member whose option was not given is not sent, so the
node's defaults and rules apply. The node judges every value; its 422 names the member.

The tables mirror the API's declared bodies (``adapters/routes/bodies.py``: ``EndpointIn``,
``EndpointPatch``, ``SourceIn``, ``EventTypeIn``, ``EventTypePatch``, ``TenantIn``); this
package may not import them (it talks HTTP only), so ``tests/api/test_cli_bodies.py``
checks every member and choice here against those models.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

__all__ = [
    "ENDPOINT_CREATE",
    "ENDPOINT_UPDATE",
    "EVENT_TYPE_CREATE",
    "EVENT_TYPE_UPDATE",
    "SOURCE_CREATE",
    "TENANT_CREATE",
    "Member",
    "body_of",
    "json_arg",
    "options",
    "read_arg",
]


def read_arg(text: str, name: str) -> str:
    """``text``, or a file's text for ``@path``, or stdin's for ``-``; a
    ``click.BadParameter`` naming ``name`` for a file that cannot be read (exit 2)."""
    try:
        if text == "-":  # bytes: a text stdin may read them with surrogateescape
            return sys.stdin.buffer.read().decode("utf-8")
        if text.startswith("@"):
            return Path(text[1:]).read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"cannot read {text[1:]}: {exc.strerror}"
        raise click.BadParameter(msg, param_hint=name) from None
    except UnicodeDecodeError as exc:
        msg = f"{'stdin' if text == '-' else text[1:]} is not UTF-8 text (byte {exc.start})"
        raise click.BadParameter(msg, param_hint=name) from None
    return text


def json_arg(text: str, name: str) -> Any:
    """JSON from ``text`` as ``read_arg`` reads it; a ``click.BadParameter`` naming
    ``name`` for text that is not JSON (exit 2, nothing sent)."""
    return _json(read_arg(text, name), name)


def _json(text: str, name: str) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=name) from None


def _no_constant(word: str) -> Any:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's json reads them, JSON has none."""
    raise ValueError(f"{word} is not a JSON number")


class _Finite(click.ParamType):
    """A float option: a finite number (``nan`` and ``inf`` are not JSON numbers)."""

    name = "float"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


FINITE = _Finite()


def _headers(values: tuple[str, ...], name: str) -> dict[str, str]:
    """``Name: value`` options as a JSON object (the node judges names and values)."""
    out: dict[str, str] = {}
    for v in values:
        key, sep, value = v.partition(":")
        if not sep or not key.strip():
            raise click.BadParameter(f"{v!r} is not 'Name: value'", param_hint=name)
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Member:
    """One body member: ``name`` its JSON name; ``decls`` the option's names; ``kind``:
    str, int, float, flag (sends ``const`` when given), bool (``--x/--no-x``, sent when
    either is given), list (a repeated option), json (JSON text, ``@file`` or ``-``),
    headers (a repeated ``Name: value``); ``choices`` for a str member the API takes from
    a fixed set."""

    name: str
    decls: tuple[str, ...]
    kind: str = "str"
    help: str = ""
    choices: tuple[str, ...] = ()
    required: bool = False
    const: Any = True

    @property
    def dest(self) -> str:
        return "m_" + self.decls[0].lstrip("-").replace("-", "_")

    def option(self) -> Callable:
        decls = (*self.decls, self.dest)
        kw: dict[str, Any] = {"help": self.help, "required": self.required, "default": None}
        if self.kind == "flag":
            kw.update(is_flag=True, default=False)
        elif self.kind == "bool":
            decls = (f"{self.decls[0]}/--no-{self.decls[0][2:]}", self.dest)
        elif self.kind in ("list", "headers"):
            kw.update(multiple=True, default=())
        elif self.kind in ("int", "float"):
            kw["type"] = int if self.kind == "int" else FINITE
        if self.choices:
            kw["type"] = click.Choice(self.choices)
        return click.option(*decls, **kw)

    def value(self, given: Any) -> tuple[bool, Any]:
        """``(sent, value)`` of the option's value ``given``."""
        if self.kind == "flag":
            return bool(given), self.const
        if self.kind == "list":
            return bool(given), list(given)
        if self.kind == "headers":
            return bool(given), _headers(given, self.decls[0])
        if given is None:
            return False, None
        if self.kind == "json":
            return True, json_arg(given, self.decls[0])
        return True, given


def options(table: tuple[Member, ...]) -> Callable:
    """A decorator adding the options of ``table`` to a command."""

    def add(f: Callable) -> Callable:
        for m in reversed(table):
            f = m.option()(f)
        return f

    return add


def body_of(table: tuple[Member, ...], given: dict[str, Any]) -> dict[str, Any]:
    """The JSON body of the options ``given`` (the command's keyword arguments): the
    members whose option was given; the keys of ``given`` it used are removed."""
    body: dict[str, Any] = {}
    for m in table:
        sent, value = m.value(given.pop(m.dest))
        if sent:
            if m.name in body:  # two options of one member (e.g. --secret, --new-secret)
                raise click.UsageError(f"{m.decls[0]}: {m.name} is given twice")
            body[m.name] = value
    return body


_FILTER = Member("filter", ("--filter",), "json", "Payload filter, JSON ($eq, $in, ...); "
                 "@file or - for stdin.")  # fmt: skip
_FORMATS = ("raw", "standard-webhooks")
_ENDPOINT_COMMON = (
    _FILTER,
    Member("description", ("--description",)),
    Member("rate_limit_per_s", ("--rate-limit",), "float", "Attempts per second (lane)."),
    Member("max_in_flight", ("--max-in-flight",), "int", "Attempts in flight at once."),
    Member("headers", ("--header",), "headers", "Extra request header 'Name: value' (repeat)."),
    Member("payload_format", ("--payload-format",), "str", "What is sent.", _FORMATS),
)
ENDPOINT_CREATE = (
    Member("url", ("--url",), help="Receiver URL (http or https); none for a broker."),
    Member(
        "event_types", ("--event-type",), "list", "Exact, prefix.* or * (repeat); none: every type."
    ),  # fmt: skip
    *_ENDPOINT_COMMON,
    Member("secret", ("--secret",), help="whsec_...; default: generated."),
    Member("paused", ("--paused",), "flag", "Create it paused."),
)
ENDPOINT_UPDATE = (
    Member("url", ("--url",), help="Receiver URL."),
    Member("event_types", ("--event-type",), "list", "Replaces the whole set (repeat)."),
    Member("event_types_add", ("--add-event-type",), "list", "Add a type (repeat)."),
    Member("event_types_remove", ("--remove-event-type",), "list", "Remove a type (repeat)."),
    *_ENDPOINT_COMMON,
    Member("filter", ("--no-filter",), "flag", "Remove the filter.", const=None),
    Member("disabled", ("--enable",), "flag", "Re-enable a disabled endpoint.", const=False),
)
_ACK = ("local", "one-remote")
SOURCE_CREATE = (
    Member("tenant", ("--tenant",), required=True, help="Tenant id."),
    Member(
        "kind",
        ("--kind",),
        required=True,
        help="How requests are verified.",
        choices=("github", "stripe", "standard-webhooks", "hmac"),
    ),  # fmt: skip
    Member("secret", ("--secret",), required=True, help="The sender's signing secret."),
    Member(
        "ack_policy",
        ("--ack-policy",),
        choices=_ACK,
        help="When the sender gets its "
        "2xx: local (stored here) or one-remote (also in another region; GitHub).",
    ),  # fmt: skip
    Member(
        "priority",
        ("--priority",),
        choices=("critical", "high", "normal", "low"),
        help="Publish lane of its events.",
    ),  # fmt: skip
    Member("header", ("--header",), help="hmac: the signature header."),
    Member("algorithm", ("--algorithm",), choices=("sha1", "sha256", "sha512"), help="hmac."),
    Member("encoding", ("--encoding",), choices=("hex", "base64"), help="hmac."),
    Member("prefix", ("--prefix",), help="hmac: signature prefix, e.g. sha256=."),
    Member("event_type_from", ("--event-type-from",), help="header:<name> or payload:<path>."),
    Member("id_from", ("--id-from",), help="header:<name> or payload:<path>; none: body hash."),
    Member("default_event_type", ("--default-event-type",), help="When none is found."),
)
EVENT_TYPE_CREATE = (
    Member("name", ("--name",), required=True, help="e.g. invoice.paid"),
    Member("description", ("--description",)),
    Member("schema", ("--schema",), "json", "JSON Schema (2020-12) of the payload; @file, -."),
    Member("deprecated", ("--deprecated",), "flag", "Mark it deprecated."),
)
EVENT_TYPE_UPDATE = (
    Member("description", ("--description",)),
    Member("schema", ("--schema",), "json", "New JSON Schema; @file, -."),
    Member("schema", ("--no-schema",), "flag", "Remove the schema.", const=None),
    Member("deprecated", ("--deprecated",), "bool", "Deprecated or not."),
)
TENANT_CREATE = (
    Member("id", ("--id",), help="Default: generated."),
    Member("name", ("--name",), required=True),
    Member("ack_policy", ("--ack-policy",), choices=_ACK, help="Default: local."),
    Member("publish_rate_per_s", ("--publish-rate",), "float", "Events/s per region."),
    Member("delivery_max_in_flight", ("--max-in-flight",), "int", "Attempts in flight."),
    Member(
        "strict_event_types",
        ("--strict-event-types",),
        "flag",
        "Only catalog types may be published.",
    ),  # fmt: skip
)
