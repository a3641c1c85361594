"""Query parameters of the API: times, list pages and their cursors, and the app-wide
check that a route is sent only the query parameters it declares.

A cursor is opaque to clients: the text of the list's position, sealed with a checksum of
the request's path (``seal_cursor``), so a cursor from another list or a changed one is
422 naming ``cursor``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

from fastapi import Request

from ...core.envelope import RFC3339_MS_RANGE
from ...core.validate import check_id
from ...errors import Unprocessable

__all__ = [
    "decode_cursor",
    "encode_cursor",
    "open_cursor",
    "page_params",
    "parse_order",
    "parse_time",
    "seal_cursor",
    "strict_query",
]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time(value: str, field: str) -> int:
    """Milliseconds since the epoch of an RFC 3339 time with a zone, sub-millisecond
    digits cut (exact integer arithmetic; through a float, 9999-12-31T23:59:59.999999Z
    rounded up into year 10000, which no answer could then show); 422 naming ``field``,
    also for a time outside 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999Z."""
    try:
        # RFC 3339 section 5.6 allows a lower-case "t" and "z"
        dt = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        raise Unprocessable("must be an RFC 3339 time", field=field) from None
    if dt.tzinfo is None:
        raise Unprocessable("must carry a time zone (e.g. Z)", field=field)
    try:
        ms = (dt - _EPOCH) // timedelta(milliseconds=1)
    except OverflowError:  # an offset moved it out of datetime's years 1..9999
        ms = RFC3339_MS_RANGE[0] - 1
    if not RFC3339_MS_RANGE[0] <= ms <= RFC3339_MS_RANGE[1]:
        raise Unprocessable(
            "must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z", field=field
        )
    return ms


def page_params(limit: int, since: str | None) -> int | None:
    """Check a list's ``limit`` (1..1000) and parse its ``since``; 422 naming the field."""
    if not 1 <= limit <= 1000:
        raise Unprocessable("must be in [1, 1000]", field="limit")
    return parse_time(since, "since") if since is not None else None


def parse_order(order: str) -> bool:
    """An attempts list's ``order``: True for ``desc`` (newest first, the default), False
    for ``asc``; 422 naming ``order`` otherwise."""
    if order not in ("asc", "desc"):
        raise Unprocessable("must be asc or desc", field="order")
    return order == "desc"


# The path of the request being served (set by ``strict_query``, the app-wide
# dependency): cursors are bound to it, so one list's cursor is refused by another.
_ROUTE: ContextVar[str] = ContextVar("regionsync_route", default="")
_SEAL_BYTES = 9  # 72 bits of sha256: a checksum against corruption and cross-list use


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def seal_cursor(text: str, path: str | None = None) -> str:
    """The opaque ``next`` cursor carrying ``text``: ``base64url(text) "." base64url(
    sha256(path NUL text)[:9])`` with ``path`` the request's path. The checksum is not a
    secret (regions share no key and a cursor must work in any region): it makes a cursor
    from another list, or a changed one, fail ``open_cursor``; a crafted cursor can only
    position a list its caller may read anyway. ``path`` overrides the request's path."""
    where = _ROUTE.get() if path is None else path
    digest = hashlib.sha256(f"{where}\0{text}".encode()).digest()[:_SEAL_BYTES]
    return f"{_b64(text.encode())}.{_b64(digest)}"


_SEALED = re.compile(r"([A-Za-z0-9_\-]{1,1400})\.([A-Za-z0-9_\-]{12})")


def open_cursor(cursor: str | None) -> str | None:
    """The text ``seal_cursor`` sealed for this request's path; None stays None. 422
    naming ``cursor`` for anything else (another list's cursor, a changed character)."""
    if cursor is None:
        return None
    m = _SEALED.fullmatch(cursor)
    try:
        if m is None:
            raise ValueError
        text = base64.urlsafe_b64decode(m[1] + "=" * (-len(m[1]) % 4)).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise Unprocessable("not a cursor this API returned", field="cursor") from None
    if not hmac.compare_digest(seal_cursor(text), cursor):
        raise Unprocessable(
            "not a cursor of this list (from another list, or changed)", field="cursor"
        )
    return text


def encode_cursor(key: tuple[int, str] | None) -> str | None:
    """The ``next`` cursor of a newest-first list: ``"<ms>:<id>"`` sealed (seal_cursor)."""
    if key is None:
        return None
    return seal_cursor(f"{key[0]}:{key[1]}")


def decode_cursor(cursor: str | None) -> tuple[int, str] | None:
    """``(ms, id)`` of a cursor ``encode_cursor`` made for this list; None stays None. 422
    naming ``cursor`` for anything else."""
    text = open_cursor(cursor)
    if text is None:
        return None
    ms, sep, ident = text.partition(":")
    if not sep or not ident or not ms.isascii() or not ms.isdigit() or len(ms) > 18:
        raise Unprocessable("not a cursor this API returned", field="cursor")
    return int(ms), ident


def _query_names(dependant: Any) -> set[str]:
    """The query parameter names a FastAPI ``Dependant`` and its sub-dependencies take."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _int_names(dependant: Any) -> frozenset[str]:
    """Of ``dependant``'s query parameters, those declared ``int`` (or ``int | None``)."""
    return frozenset(
        p.alias
        for p in dependant.query_params
        if p.field_info.annotation is int or int in get_args(p.field_info.annotation)
    )


# query parameters that name an object by id: checked as ids are in paths and bodies
_ID_PARAMS = frozenset({"tenant", "endpoint"})


async def strict_query(request: Request) -> None:
    """The app-wide dependency of every route: under ``/v1/``, a query parameter the
    route does not declare, or one given twice, is 422 naming it (a misspelt filter such
    as ``statuss=dead`` would otherwise list everything), an ``int`` one that is not ASCII
    digits, and an id one (``tenant``, ``endpoint``) that is not an id are 422 naming it.
    Also records the request's path for the cursors (``seal_cursor``)."""
    _ROUTE.set(request.scope["path"])
    route = request.scope.get("route")
    if route is None or not request.scope["path"].startswith("/v1/"):
        return
    names = getattr(route, "_regionsync_query_names", None)  # computed once per route
    if names is None:
        names = frozenset(_query_names(route.dependant)), _int_names(route.dependant)
        route._regionsync_query_names = names
    declared, integers = names
    seen: set[str] = set()
    for name, value in request.query_params.multi_items():
        if name not in declared:
            raise Unprocessable(
                f"unknown query parameter (this route takes {sorted(declared) or 'none'})",
                field=name,
            )
        if name in seen:
            raise Unprocessable("given more than once", field=name)
        seen.add(name)
        # integers from request text are ASCII digits (pydantic would take " 1", "+1", "٣")
        if name in integers and not (value.isascii() and value.isdigit()):
            raise Unprocessable("must be an integer (ASCII digits)", field=name)
        if name in _ID_PARAMS:
            check_id(value, name)
