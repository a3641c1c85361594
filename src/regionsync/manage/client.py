"""The HTTP client of the management commands and what every command shares: path
building with checked, percent-encoded ids, the error type and the output helpers.

Exit codes (README, "Management CLI"): 0 done; 1 the API refused the request (its
problem body's ``detail`` and ``field`` are printed); 2 the token was refused (401/403),
the node could not be reached, or an argument was refused before any request was sent.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import click
import httpx

__all__ = [
    "DEFAULT_URL",
    "ApiClient",
    "ManageError",
    "api_path",
    "client_of",
    "deleted",
    "json_mode",
    "out",
    "table",
]

DEFAULT_URL = "http://127.0.0.1:8080"

# The node's id pattern (core.registry.ID_RE; this package talks HTTP only and may not
# import it): every id the API answers with matches it, so an id outside it can only name
# nothing, and sending it as a path segment could name another route ("../x", "a/b", "?").
_ID_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


class ManageError(click.ClickException):
    """A failed management command; ``exit_code`` 2 for auth, connection and argument
    failures, 1 for a request the API refused."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def api_path(template: str, **ids: str) -> str:
    """``template`` (e.g. ``"/v1/tenants/{tenant}/endpoints/{endpoint}"``) with each
    ``{name}`` replaced by the id ``ids[name]``, checked and percent-encoded as one path
    segment (``urllib.parse.quote(id, safe="")``). Raises ManageError (exit 2, naming the
    argument) for an id outside ``[A-Za-z0-9_.-]{1,64}`` or made only of dots (``.`` and
    ``..`` are path navigation, never ids), before anything is sent."""
    segments = {}
    for name, value in ids.items():
        if not _ID_RE.fullmatch(value) or set(value) == {"."}:
            raise ManageError(
                f"{name} {value!r} is not an id: ids match [A-Za-z0-9_.-]{{1,64}} "
                "and are not '.' or '..'",
                exit_code=2,
            )
        segments[name] = quote(value, safe="")
    return template.format(**segments)


class ApiClient:
    """A blocking client of one node: ``call(method, path, ...)`` -> the decoded JSON
    body (None for 204); ``path`` comes from ``api_path``. Raises ManageError (see the
    module docstring)."""

    def __init__(self, url: str, token: str | None, timeout_s: float = 10.0):
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.token = token
        try:
            self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)
        except (httpx.InvalidURL, ValueError) as exc:
            raise ManageError(f"--url {url!r}: not a usable URL: {exc}", exit_code=2) from None

    def close(self) -> None:
        self.http.close()

    def call(
        self, method: str, path: str, *, json_body: Any = None, params: dict | None = None
    ) -> Any:
        """Send one request; the decoded JSON answer (None for 204)."""
        return self.send(method, path, json_body=json_body, params=params).json_body

    def send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict | None = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """Send one request (a JSON body, or ``content`` sent as JSON byte for byte); the
        answer's text and decoded JSON (``Response``)."""
        params = {k: v for k, v in (params or {}).items() if v is not None}
        headers = dict(headers or {})
        if content is not None:
            headers["content-type"] = "application/json"
        try:
            resp = self.http.request(
                method, path, json=json_body, params=params, content=content, headers=headers
            )
        except (httpx.TransportError, httpx.InvalidURL) as exc:
            raise ManageError(
                f"cannot reach {self.url}: {exc or type(exc).__name__}", exit_code=2
            ) from None
        try:
            body = resp.json() if resp.status_code != 204 else None
        except ValueError:
            body = None
        # the API answers a DELETE 204, anything else it does with JSON, a refusal with a
        # problem body: another answer is not a node's
        if resp.status_code == 204 if method == "DELETE" else resp.is_success and body is not None:
            return Response(resp.text, body)
        if resp.is_success or not (isinstance(body, dict) and "error" in body):
            raise self.not_a_node(f"{resp.status_code} {resp.reason_phrase}", resp.text)
        problem = body
        detail = problem.get("detail") or resp.text[:200] or resp.reason_phrase
        where = f" (field: {problem['field']})" if problem.get("field") else ""
        if resp.status_code in (401, 403):
            raise ManageError(
                f"{resp.status_code} {problem.get('error', 'unauthorized')}: {detail}{where}; "
                "check --token / REGIONSYNC_TOKEN",
                exit_code=2,
            )
        raise ManageError(f"{resp.status_code} {problem.get('error', 'error')}: {detail}{where}")

    def not_a_node(self, answer: str, text: str = "") -> ManageError:
        """The error (exit 2) for an answer no regionsync node gives."""
        text = " ".join(text.split())[:120]
        return ManageError(
            f"{self.url} answered {answer}, not as a regionsync node does: not a node's "
            f"HTTP address?{f' ({text!r})' if text else ''}",
            exit_code=2,
        )

    def pages(self, path: str, params: dict | None = None, limit: int | None = None) -> list:
        """Every item of a list route (following ``next``), at most ``limit`` items."""
        items: list = []
        cursor = None
        while True:
            page = self.call("GET", path, params={**(params or {}), "cursor": cursor,
                                                  "limit": 1000 if limit is None else
                                                  min(limit - len(items), 1000)})  # fmt: skip
            if not (isinstance(page, dict) and isinstance(page.get("items"), list)):
                raise self.not_a_node("a list without items")
            items.extend(page["items"])
            cursor = page["next"]
            if cursor is None or (limit is not None and len(items) >= limit):
                return items


class Response:
    """A successful answer: ``text`` as received, ``json_body`` decoded (None for 204)."""

    def __init__(self, text: str, json_body: Any):
        self.text = text
        self.json_body = json_body


def client_of(ctx: click.Context) -> ApiClient:
    """The client the main group built from ``--url``/``--token`` (or their env vars)."""
    return ctx.find_root().obj["client"]()


def json_mode(ctx: click.Context) -> bool:
    return bool(ctx.find_root().obj["json"])


def deleted(ctx: click.Context, kind: str, object_id: str) -> None:
    """What a DELETE answered (204, no body): ``deleted <kind> <id>``, or with ``--json``
    the object ``{"deleted": <kind>, "id": <id>}``."""
    if json_mode(ctx):
        click.echo(json.dumps({"deleted": kind, "id": object_id}, sort_keys=True))
    else:
        click.echo(f"deleted {kind} {object_id}")


def _printable(value: str) -> str:
    """``value`` with control and bidi-override characters shown as ``\\uXXXX`` escapes,
    so a stored name cannot write raw bytes or reorder a terminal line."""
    return "".join(
        c if c.isprintable() and not ("\u202a" <= c <= "\u202e" or "\u2066" <= c <= "\u2069")
        else f"\\u{ord(c):04x}"
        for c in value
    )  # fmt: skip


def _cell(value: Any) -> str:
    """A value as text for people: ``-`` for null or missing, a list's items joined by
    commas, ``true``/``false``, an object as JSON (never a Python repr)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return _printable(", ".join(str(v) for v in value))
    if isinstance(value, dict | list):
        return _printable(json.dumps(value, ensure_ascii=False))
    return _printable(str(value))


def table(rows: list[dict], cols: list[str]) -> str:
    """Aligned text columns ``cols`` of ``rows`` (``_cell``: missing values print as ``-``)."""
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def out(ctx: click.Context, data: Any, cols: list[str] | None = None) -> None:
    """Print ``data``: JSON with ``--json``; else a table of a list, or ``key: value``."""
    if json_mode(ctx) or cols is None and not isinstance(data, dict):
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    elif cols is not None:
        click.echo(table(data, cols))
    else:
        for k, v in data.items():
            click.echo(f"{k}: {_cell(v)}")
