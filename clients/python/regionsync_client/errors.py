"""The clients' exceptions: ``ApiError`` (a region answered with a problem body: the
request was judged and refused, RFC 9457 members ``error``, ``detail``, ``field``) and
``RegionsUnavailable`` (no region answered within the attempts and the deadline)."""

from __future__ import annotations

from typing import Any

__all__ = ["ApiError", "RegionsUnavailable", "RegionsyncError"]


class RegionsyncError(Exception):
    """Base of the clients' exceptions."""


class ApiError(RegionsyncError):
    """A region refused the request: ``status``, ``error`` (the problem code),
    ``detail``, ``field`` (the member or parameter at fault, if any), ``region`` (the
    base URL that answered) and ``body`` (the whole problem body)."""

    def __init__(self, status: int, body: Any, region: str):
        body = body if isinstance(body, dict) else {"detail": str(body)}
        self.status, self.body, self.region = status, body, region
        self.error: str = str(body.get("error", "http_error"))
        self.detail: str = str(body.get("detail", ""))
        self.field: str | None = body.get("field")
        where = f" (field {self.field})" if self.field else ""
        super().__init__(f"{status} {self.error}: {self.detail}{where} [{region}]")


class RegionsUnavailable(RegionsyncError):
    """No region accepted the request within the attempts and the deadline. ``failures``:
    (region, what happened) of every attempt, in order; ``last``: the last exception or
    ApiError (a 429/5xx), if any."""

    def __init__(self, failures: list[tuple[str, str]], last: BaseException | None):
        self.failures, self.last = failures, last
        tried = "; ".join(f"{r}: {what}" for r, what in failures[-6:])
        super().__init__(f"no region answered after {len(failures)} attempts ({tried})")
