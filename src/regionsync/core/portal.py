"""Consumer portal sessions (issue 43): short-lived, tenant-scoped, signed, stateless.

A session is ``rsp_<claims>.<sig>``: ``claims`` the urlsafe base64 (no padding) of a
compact JSON object ``{"v": 1, "kid", "tenant", "gen", "iat", "exp", "sid", "origins"}``
(``gen``: the tenant's generation, ``Registry.tenant_gen``) and
``sig`` HMAC-SHA256 under the portal key ``kid`` (a region's key, replicated in the
registry under ``pk/<region>/secret``, so every region verifies what any region signed).
The frame grant ``<claims>.<fsig>`` signs the same claims under another label: it holds no
secret (it may travel in a URL query) and only lets the portal page be framed by the
session's ``origins`` (CSP ``frame-ancestors``). Expiring every session of a tenant sets
``pn/<tenant>`` (ms): sessions made before are refused. A portal caller may use only the routes
of ``PORTAL_ROUTES``, on its own tenant.

Pure: callers pass the time, the random session id and the key lookup. Rules: RFC 2104
(HMAC), RFC 4648 section 5 (base64url), CSP Level 3 ``frame-ancestors``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import Unprocessable
from .registry_keys import ID_RE

__all__ = [
    "DEFAULT_TTL_S",
    "MAX_ORIGINS",
    "MAX_TTL_S",
    "MIN_TTL_S",
    "ORIGIN_RE",
    "PORTAL_ROUTES",
    "PREFIX",
    "PortalClaims",
    "check_origins",
    "check_ttl",
    "frame_ancestors",
    "key_name",
    "not_before_name",
    "portal_allows",
    "sign_session",
    "verify_frame",
    "verify_session",
]

PREFIX = "rsp_"
MAX_ORIGINS = 10
MIN_TTL_S, MAX_TTL_S, DEFAULT_TTL_S = 60, 7 * 24 * 3600, 3600
# an origin a CSP source expression may name: scheme, host (a leading *. wildcard), port;
# nothing a policy could be broken out of (no space, quote, semicolon or comma)
ORIGIN_RE = re.compile(r"https?://(\*\.)?[a-z0-9]([a-z0-9\-.]{0,251}[a-z0-9])?(:[0-9]{1,5})?")
_SESSION, _FRAME = b"regionsync portal session\x00", b"regionsync portal frame\x00"
_SEG = r"[A-Za-z0-9_.\-]{1,128}"
# (method, path under /v1/tenants/<tenant>) a portal session may call: its tenant, its
# endpoints (create, edit, delete, rotate, test), the event types to subscribe to, its
# events and payloads, deliveries and attempts, retry and recovery jobs
PORTAL_ROUTES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (m, re.compile(p))
    for m, p in (
        ("GET", r""),
        ("GET", r"/endpoints"),
        ("POST", r"/endpoints"),
        ("GET", rf"/endpoints/{_SEG}(/deliveries|/attempts)?"),
        ("PATCH", rf"/endpoints/{_SEG}"),
        ("DELETE", rf"/endpoints/{_SEG}"),
        ("POST", rf"/endpoints/{_SEG}/(rotate-secret|test-filter|test|recover|replay-missing)"),
        ("GET", rf"/event-types(/{_SEG})?"),
        ("GET", rf"/events(/{_SEG}(/payload)?)?"),
        ("GET", rf"/deliveries(/{_SEG}(/attempts)?)?"),
        ("POST", rf"/deliveries/{_SEG}/retry"),
        ("GET", rf"/jobs(/{_SEG})?"),
    )
)


@dataclass(frozen=True, slots=True)
class PortalClaims:
    """A verified session: its tenant and the tenant's generation when it was made (a
    tenant deleted and created again under its id is another one), times (ms since the
    epoch), id and frame origins."""

    kid: str
    tenant: str
    gen: str
    iat_ms: int
    exp_ms: int
    sid: str
    origins: tuple[str, ...]


def check_ttl(ttl_s: object) -> int:
    """``ttl_s`` of a request (seconds, MIN_TTL_S..MAX_TTL_S; None: DEFAULT_TTL_S)."""
    if ttl_s is None:
        return DEFAULT_TTL_S
    if type(ttl_s) is not int or not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
        raise Unprocessable(f"must be an integer from {MIN_TTL_S} to {MAX_TTL_S} (seconds)",
                            field="ttl_s")  # fmt: skip
    return ttl_s


def check_origins(origins: object) -> tuple[str, ...]:
    """``allowed_origins`` of a request: up to MAX_ORIGINS origins (``https://app.example``,
    ``https://*.example.com``, ``http://localhost:8080``); 422 naming the field."""
    if origins is None:
        return ()
    if not isinstance(origins, list) or len(origins) > MAX_ORIGINS:
        raise Unprocessable(f"must be a list of at most {MAX_ORIGINS} origins",
                            field="allowed_origins")  # fmt: skip
    for i, o in enumerate(origins):
        m = ORIGIN_RE.fullmatch(o) if isinstance(o, str) else None
        if m is None or (m.group(3) is not None and not 1 <= int(m.group(3)[1:]) <= 65535):
            raise Unprocessable("must be an origin such as https://app.example.com (scheme, "
                                "lower-case host, optional port 1-65535; no path)",
                                field=f"allowed_origins[{i}]")  # fmt: skip
    return tuple(dict.fromkeys(origins))  # a repeated one once


def key_name(region: str) -> str:
    """The registry key of ``region``'s portal key (an LWW register of hex text)."""
    return f"pk/{region}/secret"


def not_before_name(tenant: str) -> str:
    """The registry key of the time (ms) before which ``tenant``'s sessions were made
    are refused (an LWW register; expire-all sets it)."""
    return f"pn/{tenant}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9_\-]*", text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, label: bytes, claims: str) -> str:
    return _b64(hmac.new(key, label + claims.encode(), hashlib.sha256).digest())


def sign_session(key: bytes, claims: PortalClaims) -> tuple[str, str]:
    """``(session, frame grant)`` of ``claims`` signed with ``key`` (the key ``kid``)."""
    body = {
        "v": 1,
        "kid": claims.kid,
        "tenant": claims.tenant,
        "gen": claims.gen,
        "iat": claims.iat_ms,
        "exp": claims.exp_ms,
        "sid": claims.sid,
        "origins": list(claims.origins),
    }
    text = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
    return f"{PREFIX}{text}.{_mac(key, _SESSION, text)}", f"{text}.{_mac(key, _FRAME, text)}"


def _claims(text: str) -> PortalClaims | None:
    """The claims object, or None for anything this module did not write."""
    try:
        body = json.loads(_unb64(text))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    if not isinstance(body, dict) or body.get("v") != 1:
        return None
    kid, tenant, sid = body.get("kid"), body.get("tenant"), body.get("sid")
    iat, exp, origins = body.get("iat"), body.get("exp"), body.get("origins")
    gen = body.get("gen")
    if not all(isinstance(s, str) and ID_RE.fullmatch(s) for s in (kid, tenant, sid)):
        return None
    if not isinstance(gen, str) or len(gen) > 4096:
        return None
    if not all(type(t) is int for t in (iat, exp)) or not isinstance(origins, list):
        return None
    if not all(isinstance(o, str) and ORIGIN_RE.fullmatch(o) for o in origins):
        return None
    return PortalClaims(kid, tenant, gen, iat, exp, sid, tuple(origins))  # type: ignore[arg-type]


def _verify(
    text: str, label: bytes, keys: Callable[[str], bytes | None], now_ms: int
) -> PortalClaims | None:
    claims_text, dot, sig = text.partition(".")
    claims = _claims(claims_text) if dot else None
    key = keys(claims.kid) if claims is not None else None
    if claims is None or key is None:
        return None
    if not hmac.compare_digest(sig.encode(), _mac(key, label, claims_text).encode()):
        return None
    return claims if now_ms < claims.exp_ms else None


def verify_session(
    token: str, keys: Callable[[str], bytes | None], now_ms: int
) -> PortalClaims | None:
    """The claims of a session signed by a known key and not expired at ``now_ms``;
    None for anything else (a bad signature, an unknown key, an expired session)."""
    if not token.startswith(PREFIX):
        return None
    return _verify(token[len(PREFIX) :], _SESSION, keys, now_ms)


def verify_frame(
    grant: str, keys: Callable[[str], bytes | None], now_ms: int
) -> PortalClaims | None:
    """The claims of a frame grant (as ``verify_session``): whose origins may frame."""
    return _verify(grant, _FRAME, keys, now_ms)


def frame_ancestors(claims: PortalClaims | None) -> str:
    """The CSP ``frame-ancestors`` value: the grant's origins, ``'none'`` without one."""
    if claims is None or not claims.origins:
        return "'none'"
    return " ".join(claims.origins)


def portal_allows(method: str, path: str, tenant: str) -> bool:
    """Whether a portal session of ``tenant`` may call ``method path`` (``PORTAL_ROUTES``;
    ``/v1/whoami`` too). HEAD is GET."""
    method = "GET" if method == "HEAD" else method
    if path == "/v1/whoami":
        return method == "GET"
    prefix = f"/v1/tenants/{tenant}"
    if not path.startswith(prefix):
        return False
    rest = path[len(prefix) :]
    return any(m == method and p.fullmatch(rest) for m, p in PORTAL_ROUTES)
