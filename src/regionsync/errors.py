"""Error hierarchy of regionsync.

RegionsyncError
├── ClientError            the caller's fault; the HTTP adapter maps ``status`` to the
│   ├── BadRequest   400    JSON problem body ``{error, detail, field}`` of docs/api.md
│   ├── Unauthorized 401
│   ├── Forbidden    403
│   ├── NotFound     404
│   ├── Conflict     409
│   ├── PayloadTooLarge 413
│   ├── UnsupportedMediaType 415
│   ├── Unprocessable 422
│   ├── TooManyRequests 429 (load shedding; carries retry_after_s)
│   └── Unavailable  503    (overload, not ready; carries retry_after_s)
├── CannotStart            this process cannot run as configured (one line for the operator)
└── RemoteError            a peer region misbehaved
    └── MalformedRecord     a replication record that failed to decode or validate;
                            rejected and logged, never merged
"""

from __future__ import annotations

__all__ = [
    "BadRequest",
    "CannotStart",
    "ClientError",
    "Conflict",
    "Forbidden",
    "MalformedRecord",
    "NotFound",
    "PayloadTooLarge",
    "RegionsyncError",
    "RemoteError",
    "TooManyRequests",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "Unprocessable",
]


class RegionsyncError(Exception):
    """Base of every error this package raises on purpose."""


class ClientError(RegionsyncError):
    """A request the caller must fix. ``code`` is the machine code of the problem body."""

    status = 400
    code = "bad_request"

    def __init__(self, detail: str, *, field: str | None = None, code: str | None = None):
        super().__init__(detail)
        self.detail = detail
        self.field = field
        if code is not None:
            self.code = code


class BadRequest(ClientError):
    status, code = 400, "bad_request"


class Unauthorized(ClientError):
    status, code = 401, "unauthorized"


class Forbidden(ClientError):
    status, code = 403, "forbidden"


class NotFound(ClientError):
    status, code = 404, "not_found"


class Conflict(ClientError):
    status, code = 409, "conflict"


class PayloadTooLarge(ClientError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(ClientError):
    status, code = 415, "unsupported_media_type"

    def __init__(self, detail: str, *, accept_encoding: str | None = None, **kw: str | None):
        super().__init__(detail, **kw)
        # for a content coding refused: the Accept-Encoding of the answer (RFC 9110 12.5.3)
        self.accept_encoding = accept_encoding


class Unprocessable(ClientError):
    status, code = 422, "invalid"


class Unavailable(ClientError):
    status, code = 503, "unavailable"

    def __init__(self, detail: str, *, retry_after_s: int = 1, **kw: str | None):
        super().__init__(detail, **kw)
        self.retry_after_s = retry_after_s


class TooManyRequests(Unavailable):
    status, code = 429, "too_many_requests"


class CannotStart(RegionsyncError):
    """This process cannot run as configured (e.g. its key ring cannot open what the
    region's other processes sealed); the message is one line naming the setting."""


class RemoteError(RegionsyncError):
    """Another region sent something this node cannot accept."""


class MalformedRecord(RemoteError):
    """A delta record failed to decode or validate; ``reason`` is logged and acked back."""

    def __init__(self, origin: str, seq: int, reason: str):
        super().__init__(f"malformed record {origin}#{seq}: {reason}")
        self.origin, self.seq, self.reason = origin, seq, reason
