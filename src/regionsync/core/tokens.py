"""API tokens as replicated registry objects (issue 14).

A token is ``rs_`` + 32 random bytes (urlsafe base64, no padding); the registry keeps only
``sha256(token)`` as hex, never the token. Keys (core.registry):

    tokens              ORSet of token ids; removing an id revokes the token everywhere
    k/<id>/hash         LWWRegister: sha256 hex of the token
    k/<id>/scope        admin | tenant:<id>:manage | tenant:<id>:publish | tenant:<id>:read
    k/<id>/name         free text (1..128 characters), shown in audit entries
    k/<id>/expires_at   ms since the epoch, or None (never expires)
    k/<id>/created_at   ms since the epoch
    k/<id>/created_by   who created it (the caller's name, see ``Caller``)

Pure: callers pass time, randomness, actor and stamp.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from crdt import LWWRegister, ORSet, Timestamp

from .registry import Deltas, Registry

__all__ = [
    "SCOPE_RE",
    "TOKEN_FIELDS",
    "Caller",
    "TokenView",
    "config_caller",
    "create_token",
    "hash_token",
    "make_token",
    "registry_caller",
    "revoke_token",
    "token",
    "tokens",
]

SCOPE_RE = re.compile(r"admin|tenant:[A-Za-z0-9_.\-]{1,64}:(manage|publish|read)")
TOKEN_FIELDS = ("hash", "scope", "name", "expires_at", "created_at", "created_by")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made a request: ``scope`` as above, ``name`` for audit: unambiguous (two
    tokens of one name are two callers) as ``registry_caller`` and ``config_caller`` make
    it, or ``anonymous`` on an open loopback node. Audit entries written before name a
    registry token ``token:<name>`` and a static one ``config:<scope>``."""

    scope: str
    name: str


@dataclass(frozen=True, slots=True)
class TokenView:
    """A live token without its secret; times in ms since the epoch."""

    id: str
    hash: str
    scope: str
    name: str
    expires_at_ms: int | None
    created_at_ms: int
    created_by: str

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms


def registry_caller(view: TokenView) -> Caller:
    """A registry token's caller: ``token:<id>:<name>`` (ids hold no ``:``)."""
    return Caller(view.scope, f"token:{view.id}:{view.name}")


def config_caller(index: int, scope: str) -> Caller:
    """The caller of the static token of ``[[tokens]]`` entry ``index`` (from 0, as a
    configuration error names it): ``config:tokens[<index>]:<scope>``. Never derived
    from the token itself, which an audit reader must not learn anything of."""
    return Caller(scope, f"config:tokens[{index}]:{scope}")


def make_token(random32: bytes) -> str:
    """``rs_`` + urlsafe base64 (no padding) of 32 random bytes; ValueError otherwise."""
    if len(random32) != 32:
        raise ValueError("a token takes 32 random bytes")
    return "rs_" + base64.urlsafe_b64encode(random32).rstrip(b"=").decode()


def hash_token(secret: str) -> str:
    """sha256 hex of the token text (what the registry stores and Auth looks up)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def token(registry: Registry, token_id: str) -> TokenView | None:
    """The live (not revoked) token ``token_id``, or None. Expiry is not checked here."""
    if token_id not in registry.get("tokens", ORSet):
        return None
    p = f"k/{token_id}/"
    f: dict[str, Any] = {n: registry.get(p + n, LWWRegister).value() for n in TOKEN_FIELDS}
    if not isinstance(f["hash"], str) or not isinstance(f["scope"], str):
        return None
    return TokenView(
        id=token_id,
        hash=f["hash"],
        scope=f["scope"],
        name=f["name"] or "",
        expires_at_ms=f["expires_at"],
        created_at_ms=f["created_at"] or 0,
        created_by=f["created_by"] or "",
    )


def tokens(registry: Registry) -> list[TokenView]:
    """Every live token, in id order (ids are time-ordered)."""
    ids = sorted(registry.get("tokens", ORSet).value())
    views = (token(registry, t) for t in ids)
    return [v for v in views if v is not None]


def create_token(
    registry: Registry,
    token_id: str,
    fields: dict[str, Any],
    actor: str,
    stamp: Timestamp,
) -> Deltas:
    """Deltas adding a token; ``fields`` are TOKEN_FIELDS values (validated by caller)."""
    p = f"k/{token_id}/"
    deltas: Deltas = {
        p + n: registry.get(p + n, LWWRegister).set(fields.get(n), actor=actor, stamp=stamp)
        for n in TOKEN_FIELDS
    }
    deltas["tokens"] = registry.get("tokens", ORSet).add(token_id, actor=actor)
    return deltas


def revoke_token(registry: Registry, token_id: str) -> Deltas:
    """Delta removing the token id (its fields stay, unreachable)."""
    return {"tokens": registry.get("tokens", ORSet).remove(token_id)}
