"""Request bodies of the API, read with limits before parsing.

Bodies are read with a size limit before parsing (413), decoded from gzip or deflate
(another content coding: 415), must be JSON (415), and must parse (400) under the JSON
policy of core.jsontext (422 for what it refuses); numbers from request text go through
core.numtext (ASCII digits, range-checked).
"""

from __future__ import annotations

import zlib
from typing import Any

from fastapi import Request

from ...core.jsontext import decode_utf8, loads_members
from ...core.numtext import parse_uint
from ...errors import BadRequest, PayloadTooLarge, Unprocessable, UnsupportedMediaType

__all__ = ["ACCEPT_ENCODING", "read_body", "read_no_body", "read_object"]


# content codings a request body may carry (RFC 9110 section 8.4.1) and zlib's window bits
# for each: gzip (RFC 1952) and deflate, which HTTP defines as the zlib format (RFC 1950)
_GZIP = 16 + zlib.MAX_WBITS
_CODINGS = {"gzip": _GZIP, "x-gzip": _GZIP, "deflate": zlib.MAX_WBITS}
ACCEPT_ENCODING = "gzip, deflate"  # what a 415 for a content coding names
_MAX_MEMBERS = 16  # gzip members in one body (each costs a new decoder: about 7 us)


def _coding(request: Request) -> str | None:
    """The content coding of the body: None for none (or ``identity``); 415 naming
    ``content-encoding``, with Accept-Encoding, for one this node does not decode or for
    more than one (every Content-Encoding field line counts, RFC 9110 section 5.3)."""
    codings = [
        c
        for name, value in request.scope["headers"]
        if name.lower() == b"content-encoding"
        for part in value.decode("latin-1").split(",")
        if (c := part.strip().lower()) not in ("", "identity")
    ]
    if not codings:
        return None
    if len(codings) > 1 or codings[0] not in _CODINGS:
        raise UnsupportedMediaType(
            f"content coding {', '.join(codings)!r} is not accepted: send {ACCEPT_ENCODING} "
            "or none (one coding at most)",
            field="content-encoding",
            accept_encoding=ACCEPT_ENCODING,
        )
    return codings[0]


class _Inflater:
    """Incremental decoding of a gzip or deflate body bounded by ``limit`` decoded bytes:
    no chunk is decoded past the limit (a decompression bomb stops at ``limit + 1``
    bytes: 413), and data that does not decode or ends early is 400 naming
    ``content-encoding``. A gzip body may hold several members (RFC 1952 section 2.2), up
    to ``_MAX_MEMBERS``."""

    def __init__(self, coding: str, limit: int):
        self.coding, self.limit, self.left = coding, limit, limit
        self._z = zlib.decompressobj(_CODINGS[coding])
        self._members = 1

    def _bad(self, why: str) -> BadRequest:
        return BadRequest(f"body is not {self.coding} data: {why}", field="content-encoding")

    def feed(self, data: bytes) -> bytes:
        out = []
        while data:
            if self._z.eof:
                if _CODINGS[self.coding] != _GZIP or self._members == _MAX_MEMBERS:
                    raise self._bad("data after the end of the stream")
                self._z = zlib.decompressobj(_GZIP)  # the next member
                self._members += 1
            try:
                part = self._z.decompress(data, self.left + 1)
            except zlib.error as exc:
                raise self._bad(str(exc)) from None
            self.left -= len(part)
            if self.left < 0:
                raise PayloadTooLarge(f"decoded body is over {self.limit} bytes", field="body")
            out.append(part)
            # all of ``data`` was read unless the stream ended (the rest is a next member)
            data = self._z.unused_data if self._z.eof else b""
        return b"".join(out)

    def end(self) -> None:
        if not self._z.eof:
            raise self._bad("it ends before the end of the compressed stream")


async def read_body(request: Request, max_bytes: int, also: tuple[str, ...] = ()) -> bytes:
    """The raw body of a JSON request (or of a content type in ``also``), decoded from its
    content coding (gzip or deflate; 415 for another, ``_coding``): 415 for another
    content type, 413 as soon as it is known to exceed ``max_bytes`` as sent (from
    Content-Length, or while streaming) or decoded (``_Inflater``), 400 for a
    Content-Length that is not ASCII digits or a body that does not decode."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json" and not ctype.endswith("+json") and ctype not in also:
        raise UnsupportedMediaType("content type must be application/json", field="content-type")
    coding = _coding(request)
    declared = request.headers.get("content-length")
    if declared is not None:
        if parse_uint(declared.strip(), "content-length") > max_bytes:
            raise PayloadTooLarge(f"body is over {max_bytes} bytes", field="body")
    inflater = _Inflater(coding, max_bytes) if coding is not None else None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"body is over {max_bytes} bytes", field="body")
        chunks.append(chunk if inflater is None else inflater.feed(chunk))
    if inflater is not None and size:  # no bytes at all: an empty body, whatever its label
        inflater.end()
    return b"".join(chunks)


async def read_object(request: Request, max_bytes: int, surrogates: bool = False) -> dict[str, Any]:
    """The request body as a parsed JSON object; 415, 413 (before reading past the
    limit), 400, 422 naming the member (core.jsontext); lone surrogates refused unless
    ``surrogates`` (registry fields are stored as strings, which cannot hold them)."""
    raw = await read_body(request, max_bytes)
    return loads_members(decode_utf8(raw), surrogates=surrogates)[0]


async def read_no_body(request: Request, max_bytes: int) -> None:
    """For a route that takes no body (an action such as retry or rotate-secret, or a
    DELETE): no body or ``{}`` is accepted; anything else is refused before the route acts,
    as a body route would refuse it: 415 for another content type, 413, 400 ``bad_json``
    (field ``body``) for text that is not JSON, 422 naming the first member (``unknown
    field``) or ``body`` for a JSON value that is not an object."""
    if not _has_body(request):
        return
    raw = await read_body(request, max_bytes)
    if not raw:  # a chunked body of no bytes
        return
    members = loads_members(decode_utf8(raw))[0]
    if members:
        raise Unprocessable("unknown field (this route takes no body)", field=sorted(members)[0])


def _has_body(request: Request) -> bool:
    """Whether the request declares a body (a non-zero Content-Length or chunked)."""
    return request.headers.get("content-length", "0") != "0" or (
        "transfer-encoding" in request.headers
    )
