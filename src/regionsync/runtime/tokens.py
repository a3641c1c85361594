"""API token operations: create (the secret is returned once), list, revoke.

Tokens are registry objects (core.tokens), committed on the local write path and
replicated like every registry change: a revocation stops the token in another region
once the record reaches it (the replication lag, ``records_behind`` in /v1/cluster).
"""

from __future__ import annotations

from typing import Any

from ..core.tokens import (
    SCOPE_RE,
    Caller,
    TokenView,
    create_token,
    hash_token,
    make_token,
    revoke_token,
    token,
)
from ..core.validate import check_text
from ..errors import NotFound, Unprocessable
from .audit import audit_section
from .ports import Clock, IdSource, Rng
from .state import Catalog
from .writepath import WritePath

__all__ = ["TokenOps"]


def _tenant_of(scope: str) -> str:
    """The tenant a scope belongs to (``tenant:<id>:<right>``), ``""`` for admin."""
    return scope.split(":")[1] if scope.startswith("tenant:") else ""


class TokenOps:
    """Create, list and revoke API tokens; raise ``regionsync.errors.ClientError``."""

    def __init__(
        self, catalog: Catalog, writer: WritePath, *, rng: Rng, ids: IdSource, clock: Clock
    ):
        self.catalog, self.writer, self.rng, self.ids, self.clock = catalog, writer, rng, ids, clock

    async def create(
        self, scope: Any, name: Any, expires_at_ms: int | None, caller: Caller
    ) -> tuple[TokenView, str]:
        """A new token: ``(view, secret)``; the secret is never stored or shown again.

        422 (field ``scope``, ``name``, ``expires_at``) for a scope outside
        ``admin | tenant:<id>:(manage|publish|read)`` or naming a tenant that does not
        exist, a name not 1..128 characters, or an expiry not in the future. Deleting the
        tenant revokes its tokens (``Registry.delete_tenant``).
        """
        if not isinstance(scope, str) or not SCOPE_RE.fullmatch(scope):
            raise Unprocessable("must be admin or tenant:<id>:manage|publish|read", field="scope")
        check_text(name, "name", 128, min_len=1)
        if expires_at_ms is not None and expires_at_ms <= self.clock.wall_ms():
            raise Unprocessable("must be in the future", field="expires_at")
        secret = make_token(self.rng.randbytes(32))
        async with self.writer.local_lock():
            tenant = _tenant_of(scope)
            if tenant and not self.catalog.registry.has_tenant(tenant):
                # a token for an id nobody holds yet would act on whoever creates it
                raise Unprocessable(f"no tenant {tenant!r}", field="scope")
            tid = self.ids.new("tok")
            stamp = self.writer.stamp()
            fields = {
                "hash": hash_token(secret),
                "scope": scope,
                "name": name,
                "expires_at": expires_at_ms,
                "created_at": stamp.wall_ms,
                "created_by": caller.name,
            }
            deltas = create_token(self.catalog.registry, tid, fields, self.writer.actor, stamp)
            note = audit_section("token.create", f"token/{tid}", tenant, f"scope={scope}")
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)
            view = self.get(tid)  # as committed, whatever lands during the commit
        await durable
        return view, secret

    def get(self, token_id: str) -> TokenView:
        """The live token; 404 (field ``token``) if unknown or revoked."""
        view = token(self.catalog.registry, token_id)
        if view is None:
            raise NotFound(f"no token {token_id!r}", field="token")
        return view

    def list(self) -> list[TokenView]:
        """Every live token (expired ones included, marked by their ``expires_at``)."""
        return sorted(self.catalog.token_hashes.values(), key=lambda t: t.id)

    async def revoke(self, token_id: str) -> None:
        """Revoke in every region (replicated); 404 if unknown or already revoked."""
        async with self.writer.local_lock():
            scope = self.get(token_id).scope
            stamp = self.writer.stamp()
            deltas = revoke_token(self.catalog.registry, token_id)
            note = audit_section("token.revoke", f"token/{token_id}", _tenant_of(scope))
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)
        await durable
