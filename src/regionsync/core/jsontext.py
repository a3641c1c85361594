"""The one JSON policy of every path: publish, inbound sources, read-back, delivery.

Decides whether request text is JSON this node accepts and returns it parsed, together
with the exact source text of values, so that what is delivered and read back is what the
sender wrote (numbers keep their digits: ``1.10``, ``1E2``, ``-0``, 17+ significant
digits). Rules, after RFC 8259:

- the text is UTF-8 (section 8.1) and JSON (no ``NaN``/``Infinity``, section 6): else 400
  ``bad_json`` (``bad_encoding`` for bytes that are not UTF-8);
- numbers, integers too, must fit a finite double (section 6 lets implementations set
  the range; the receivers' parsers mostly use doubles): else 422 ``number_range``;
- member names of an object are unique (section 4 says SHOULD; a repeated name is read
  differently by different parsers): else 422 ``duplicate_key``;
- nesting at most ``MAX_DEPTH`` arrays/objects deep: else 422 ``too_deep``;
- the escape of a lone surrogate (``"\\ud83d"``) is legal JSON text (section 8.2): it is
  accepted where the text is kept as written (event payloads), and refused (400) where
  the parsed string must be stored or encoded (``surrogates=False``, registry bodies).

Pure: no I/O; stdlib ``json`` does the parsing (its hooks, ``scan_once`` for spans).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any

from ..errors import BadRequest, ClientError, Unprocessable

__all__ = ["MAX_DEPTH", "decode_utf8", "embed", "loads", "loads_members"]

MAX_DEPTH = 64  # arrays/objects nested in one value; a scalar is depth 0, {} depth 1

_WS = re.compile(r"[ \t\n\r]*")  # RFC 8259 section 2
_WS_CHARS = " \t\n\r"
# a string token (skipped whole) or a bracket; unrolled so it never backtracks
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)
_ESCAPES = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.S)


class _Refused(Exception):
    """Raised inside the json hooks; turned into a ClientError naming the field."""

    def __init__(self, error: type[ClientError], detail: str, code: str):
        super().__init__(detail)
        self.error, self.detail, self.code = error, detail, code


def _constant(name: str) -> Any:
    raise _Refused(BadRequest, f"{name} is not JSON (RFC 8259 section 6)", "bad_json")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(
            Unprocessable, f"number {text[:40]} is out of the range of a double", "number_range"
        )
    return value


def _int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:  # more digits than sys.get_int_max_str_digits()
        raise _Refused(Unprocessable, "integer has too many digits", "number_range") from None
    if abs(value) > sys.float_info.max:  # exact: an int compares with a float exactly
        raise _Refused(
            Unprocessable, f"number {text[:40]}... is out of the range of a double",
            "number_range",
        )  # fmt: skip
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise _Refused(Unprocessable, f"member name {name!r} is repeated", "duplicate_key")
            seen.add(name)
    return out


# every integer goes through _int, which checks its range (the C scanner reading them
# itself would need a search for long digit runs, which costs more than the hook saves)
_DECODER = json.JSONDecoder(
    object_pairs_hook=_object, parse_float=_float, parse_int=_int, parse_constant=_constant
)


def decode_utf8(raw: bytes, field: str = "body") -> str:
    """``raw`` as text; BadRequest (400, ``bad_encoding``) if it is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("body is not valid UTF-8", field=field, code="bad_encoding") from None


def _too_deep_at(text: str, max_depth: int) -> int | None:
    """Index of the first bracket nesting deeper than ``max_depth``, or None."""
    if text.count("[") + text.count("{") <= max_depth:  # brackets in strings count too
        return None
    depth = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c == "[" or c == "{":
            depth += 1
            if depth > max_depth:
                return m.start()
        elif c == "]" or c == "}":
            depth -= 1
    return None


def _lone_surrogate(text: str) -> str | None:
    """The first escape of a lone surrogate in JSON ``text`` (e.g. ``\\ud800``), or None."""
    if "\\u" not in text:
        return None
    high: re.Match[str] | None = None
    for m in _ESCAPES.finditer(text):
        unit = int(m.group(1), 16) if m.group(1) else -1
        if high is not None:
            if m.start() == high.end() and 0xDC00 <= unit <= 0xDFFF:
                high = None
                continue
            return high.group()
        if 0xD800 <= unit <= 0xDBFF:
            high = m
        elif 0xDC00 <= unit <= 0xDFFF:
            return m.group()
    return high.group() if high is not None else None


def _bad_json(detail: str) -> BadRequest:
    return BadRequest(f"body is not valid JSON: {detail}", field="body", code="bad_json")


def _refusal(exc: _Refused, field: str) -> ClientError:
    # syntax refusals (NaN, Infinity) name the body, range and shape refusals the value
    return exc.error(exc.detail, field="body" if exc.error is BadRequest else field,
                     code=exc.code)  # fmt: skip


def _check_surrogates(text: str) -> None:
    lone = _lone_surrogate(text)
    if lone is not None:
        raise _bad_json(f"{lone} is a lone surrogate, which cannot be stored here")


def loads(
    text: str, *, field: str = "body", surrogates: bool = True, max_depth: int = MAX_DEPTH
) -> Any:
    """Parse JSON ``text`` under the policy of the module docstring.

    Raises BadRequest (400: not JSON, NaN/Infinity, a lone surrogate when ``surrogates``
    is False; field ``body``) or Unprocessable (422: number out of range, repeated member
    name, deeper than ``max_depth``; field ``field``).
    """
    if _too_deep_at(text, max_depth) is not None:
        raise Unprocessable(f"nests deeper than {max_depth} levels", field=field,
                            code="too_deep")  # fmt: skip
    try:
        value = _DECODER.decode(text)
    except _Refused as exc:
        raise _refusal(exc, field) from None
    except (ValueError, RecursionError) as exc:
        raise _bad_json(str(exc)) from None
    if not surrogates:
        _check_surrogates(text)
    return value


def _ws(text: str, i: int) -> int:
    if text[i : i + 1] not in _WS_CHARS:  # compact JSON: no regex call ('' is in any str)
        return i
    m = _WS.match(text, i)
    assert m is not None  # * matches the empty string
    return m.end()


def loads_members(
    text: str, *, field: str = "body", surrogates: bool = True, max_depth: int = MAX_DEPTH
) -> tuple[dict[str, Any], dict[str, str]]:
    """Parse JSON ``text`` that must be an object: ``(members, texts)`` where ``texts``
    maps each member name to the exact source text of its value (no surrounding space).

    Each member's value may nest ``max_depth`` levels. Errors as ``loads``, naming the
    member for its value's 422s; Unprocessable naming ``field`` if ``text`` is JSON but
    not an object.
    """
    i = _ws(text, 0)
    if text[i : i + 1] != "{":
        loads(text, field=field, surrogates=surrogates, max_depth=max_depth)
        raise Unprocessable("body must be a JSON object", field=field)
    deep_at = _too_deep_at(text, max_depth + 1)
    values: dict[str, Any] = {}
    texts: dict[str, str] = {}
    i = _ws(text, i + 1)
    if text[i : i + 1] == "}":
        i += 1
    else:
        while True:
            if text[i : i + 1] != '"':
                raise _bad_json(f"expected a member name at char {i}")
            try:
                name, i = scanstring(text, i + 1)
            except ValueError as exc:
                raise _bad_json(str(exc)) from None
            i = _ws(text, i)
            if text[i : i + 1] != ":":
                raise _bad_json(f"expected ':' at char {i}")
            start = _ws(text, i + 1)
            try:
                value, end = _DECODER.scan_once(text, start)
            except StopIteration:
                raise _bad_json(f"expected a value at char {start}") from None
            except _Refused as exc:
                raise _refusal(exc, name) from None
            except RecursionError:  # only ever this deep past the limit
                end = len(text)
            except ValueError as exc:
                raise _bad_json(str(exc)) from None
            if deep_at is not None and start <= deep_at < end:
                raise Unprocessable(f"nests deeper than {max_depth} levels", field=name,
                                    code="too_deep")  # fmt: skip
            if name in values:
                raise Unprocessable(f"member name {name!r} is repeated", field=name,
                                    code="duplicate_key")  # fmt: skip
            values[name], texts[name] = value, text[start:end]
            i = _ws(text, end)
            c = text[i : i + 1]
            i += 1
            if c == "}":
                break
            if c != ",":
                raise _bad_json(f"expected ',' or '}}' at char {i - 1}")
            i = _ws(text, i)
    if _ws(text, i) != len(text):
        raise _bad_json(f"extra data at char {i}")
    if not surrogates:
        _check_surrogates(text)
    return values, texts


def embed(obj: Mapping[str, Any], name: str, text: str) -> str:
    """``obj`` serialised as a JSON object with member ``name`` set to the JSON ``text``
    verbatim (so a stored payload is read back with its numbers as written). ``text``
    must be JSON accepted by ``loads``; ``obj`` must not hold ``name``."""
    head = json.dumps(dict(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    member = json.dumps(name) + ":" + text.strip(" \t\n\r")
    return "{" + member + ("," + head[1:] if len(head) > 2 else "}")
