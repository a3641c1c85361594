"""Building a request from an operation of the table and reading its answer; shared by
the sync and async clients (no I/O here)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from ._operations import OPERATIONS, Op
from .errors import ApiError

__all__ = ["BY_NAME", "Request", "answer", "build"]

BY_NAME: dict[str, Op] = {op.name: op for op in OPERATIONS}
_PARAM = re.compile(r"\{([a-z_]+)\}")


@dataclass(frozen=True, slots=True)
class Request:
    """What to send to whichever region: the method, the path below the base URL, the
    query, the body bytes and extra headers (identical in every attempt)."""

    op: Op
    path: str
    params: dict[str, str]
    content: bytes | None = None
    headers: Mapping[str, str] | None = None


def path_params(op: Op) -> list[str]:
    """The names of ``op``'s path parameters, in path order."""
    return _PARAM.findall(op.path)


def build(op: Op, args: tuple[str, ...], kwargs: dict[str, Any]) -> Request:
    """The request of ``op`` called with positional path arguments ``args`` and keyword
    arguments ``kwargs`` (the body's members with ``op.body``, else query parameters; a
    None value is left out). TypeError for a wrong count or an unknown parameter."""
    names = path_params(op)
    if len(args) != len(names):
        raise TypeError(f"{op.name}() takes {len(names)} path arguments ({', '.join(names)})")
    values = iter(args)
    path = _PARAM.sub(lambda _m: quote(str(next(values)), safe=""), op.path)
    if op.body:
        body = json.dumps(kwargs, separators=(",", ":"), ensure_ascii=False).encode()
        return Request(op, path, {}, body, {"content-type": "application/json"})
    unknown = sorted(set(kwargs) - set(op.query))
    if unknown:
        raise TypeError(f"{op.name}() got unknown parameters {unknown}; takes {op.query}")
    params = {k: _query_value(v) for k, v in kwargs.items() if v is not None}
    return Request(op, path, params)


def _query_value(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def answer(op: Op, resp: httpx.Response, region: str) -> Any:
    """The decoded answer of a final response: JSON (or text for a text answer, None
    for 204); ApiError for any status outside 2xx."""
    if not 200 <= resp.status_code < 300:
        try:
            body: Any = resp.json()
        except ValueError:
            body = {"error": "http_error", "detail": resp.text[:500]}
        raise ApiError(resp.status_code, body, region)
    if resp.status_code == 204 or not resp.content:
        return None
    if resp.headers.get("content-type", "").startswith("application/json"):
        return resp.json()
    return resp.text


def publish_request(
    tenant: str,
    event_type: str,
    payload: Any,
    idempotency_key: str | None,
    event_id: str,
) -> Request:
    """The publish of one event with its id (and key): sent unchanged by every attempt,
    so retries in any region are one event."""
    req = build(BY_NAME["publish_event"], (tenant,),
                {"id": event_id, "event_type": event_type, "payload": payload})  # fmt: skip
    headers = dict(req.headers or {})
    if idempotency_key is not None:
        headers["idempotency-key"] = idempotency_key
    return Request(req.op, req.path, {}, req.content, headers)


def inbound_request(source: str, body: bytes, headers: Mapping[str, str]) -> Request:
    """A sender's webhook to ``POST /in/{source}``: its raw body and headers."""
    path = "/in/" + quote(source, safe="")
    return Request(BY_NAME["inbound"], path, {}, body, dict(headers))
