"""Consumer portal sessions (issue 43): create one for a tenant, verify one in any region.

Each region signs with its own portal key (``pk/<region>/secret`` in the registry, made
at the first session it creates, 32 random bytes): one writer per key, so no concurrent
write can replace a key sessions were signed with. The key replicates like every registry
change, so a session works in every region that has received its key (the replication
lag, ``records_behind`` in /v1/cluster); nothing is stored per session. The key is
written only once every region reads it (capability ``portal-sessions``). A session ends
at its expiry (cluster clock), when its tenant is deleted, or when every session of its
tenant is expired (``pn/<tenant>``, Svix's expire-all); it cannot be revoked alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from crdt import LWWRegister

from ..core.generations import gen_live
from ..core.portal import (
    PortalClaims,
    key_name,
    not_before_name,
    sign_session,
    verify_frame,
    verify_session,
)
from ..errors import Conflict, NotFound
from .audit import audit_section
from .ports import Clock, IdSource, Rng
from .state import Catalog
from .writepath import WritePath

__all__ = ["FEATURE", "PortalOps"]

FEATURE = "portal-sessions"


class PortalOps:
    """Create and verify portal sessions; raise ``regionsync.errors.ClientError``."""

    def __init__(
        self, region: str, catalog: Catalog, writer: WritePath, *, rng: Rng, ids: IdSource,
        clock: Clock,
    ):  # fmt: skip
        self.region, self.catalog, self.writer = region, catalog, writer
        self.rng, self.ids, self.clock = rng, ids, clock

    def key(self, kid: str) -> bytes | None:
        """The portal key of region ``kid`` as this region holds it, or None."""
        value = self.catalog.registry.get(key_name(kid), LWWRegister).value()
        if not isinstance(value, str) or len(value) != 64:
            return None
        try:
            return bytes.fromhex(value)
        except ValueError:
            return None

    async def _own_key(self) -> bytes:
        """This region's key, made (and committed) if it has none; 409 while a region of
        the cluster cannot read portal keys."""
        key = self.key(self.region)
        if key is not None:
            return key
        self._gate()
        async with self.writer.local_lock():
            key = self.key(self.region)
            if key is not None:
                return key
            stamp = self.writer.stamp()
            name = key_name(self.region)
            reg = self.catalog.registry.get(name, LWWRegister)
            deltas = {name: reg.set(self.rng.randbytes(32).hex(), actor=self.writer.actor,
                                    stamp=stamp)}  # fmt: skip
            note = audit_section("portal.key", f"portal-key/{self.region}")
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)
        await durable
        key = self.key(self.region)
        assert key is not None  # committed above
        return key

    async def create(
        self, tenant: str, ttl_s: int, origins: Sequence[str]
    ) -> tuple[PortalClaims, str, str]:
        """A session of ``tenant``: ``(claims, session, frame grant)``. 404 (``tenant``)
        for an unknown tenant; ttl_s and origins are checked by the caller
        (core.portal.check_ttl, check_origins)."""
        gen = self.catalog.registry.tenant_gen(tenant)
        if gen is None:
            raise NotFound(f"no tenant {tenant!r}", field="tenant")
        key = await self._own_key()
        now = self.clock.wall_ms()
        sid = self.ids.new("pss")
        claims = PortalClaims(
            self.region, tenant, gen, now, now + ttl_s * 1000, sid, tuple(origins)
        )
        session, frame = sign_session(key, claims)
        return claims, session, frame

    def verify(self, session: str) -> PortalClaims | None:
        """The claims of a live session of an existing tenant, or None."""
        claims = verify_session(session, self.key, self.clock.wall_ms())
        if claims is None:
            return None
        # a tenant deleted and created again under the id is another tenant: the sessions
        # of the first end with it
        registry = self.catalog.registry
        if not gen_live(claims.gen, registry.tenant_gen(claims.tenant)):
            return None
        not_before = registry.get(not_before_name(claims.tenant), LWWRegister).value()
        if isinstance(not_before, int) and claims.iat_ms < not_before:
            return None  # expire-all
        return claims

    async def expire_all(self, tenant: str) -> None:
        """End every session of ``tenant`` made until now, in every region once the change
        replicates (like a token revocation). 404 (``tenant``) for an unknown tenant, 409
        while a region of the cluster cannot read it."""
        if not self.catalog.registry.has_tenant(tenant):
            raise NotFound(f"no tenant {tenant!r}", field="tenant")
        self._gate()
        async with self.writer.local_lock():
            stamp = self.writer.stamp()
            name = not_before_name(tenant)
            reg = self.catalog.registry.get(name, LWWRegister)
            now = max(self.clock.wall_ms(), reg.value() or 0)  # not back from what we hold
            deltas = {name: reg.set(now, actor=self.writer.actor, stamp=stamp)}
            note = audit_section("portal.expire_all", f"tenant/{tenant}", tenant)
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)
        await durable

    def _gate(self) -> None:
        """409 while a region of the cluster cannot read portal keys."""
        removed = self.catalog.registry.removals()
        if not self.writer.capabilities.enabled_without(FEATURE, removed):
            raise Conflict(f"a region does not support {FEATURE} yet (upgrade it first)",
                           field="tenant", code="capability_missing")  # fmt: skip

    def frame(self, grant: str | None) -> PortalClaims | None:
        """The claims of a live frame grant, or None (the page may then not be framed)."""
        return None if not grant else verify_frame(grant, self.key, self.clock.wall_ms())
