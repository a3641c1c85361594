"""A tenant's share of a node's write path (issue 44, the fan-in case).

Every publish of a node shares its group commits: one tenant with many publishes in
flight fills every commit, and another tenant's publish waits for those long commits.
So while other tenants publish on the node, a publish of one tenant starts (from
admission to durability) only while that tenant has fewer than ``cap`` in flight; the
others wait, in arrival order, for one of its own to finish (publishes it started while
it was alone finish as they are). A tenant alone on the node (no other tenant's publish
in flight, arrived or finished within ``CONTENDED_S``) is not held back: the share
costs nothing when there is nobody to share with. Pure: the caller passes ``now``
(seconds, monotonic) and tickets (its own ids for waiters), and gets back the tickets
that may start.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["CONTENDED_S", "IngestShare"]

CONTENDED_S = 1.0  # another tenant's publish this recent makes the node shared


@dataclass(slots=True)
class IngestShare:
    """Publishes in flight and waiting, per tenant. ``cap`` < 1: no share (nobody waits).

    Invariant: a tenant with waiters has at least ``cap`` publishes in flight, so each of
    their ends (``done``) lets the next waiter start or keeps it waiting for the next.
    """

    cap: int
    inflight: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, deque[int]] = field(default_factory=dict)  # tenant -> tickets
    seen: dict[str, float] = field(default_factory=dict)  # tenant -> last arrival or end

    def contended(self, tenant: str, now: float) -> bool:
        """Does another tenant publish on this node: one in flight, or one that arrived
        or ended within ``CONTENDED_S``?"""
        self._forget(now)
        return len(self.inflight) > (tenant in self.inflight) or len(self.seen) > (
            tenant in self.seen
        )

    def may_start(self, tenant: str, now: float) -> bool:
        """May a publish of ``tenant`` start now (with no waiter of its own before it)?"""
        return (
            self.cap < 1
            or self.inflight.get(tenant, 0) < self.cap
            or not self.contended(tenant, now)
        )

    def ask(self, tenant: str, ticket: int, now: float) -> bool:
        """A publish of ``tenant`` wants to start: True if it starts now (counted in
        flight), False if ``ticket`` waits behind its tenant's earlier ones."""
        self._touch(tenant, now)
        if tenant not in self.waiting and self.may_start(tenant, now):
            self.inflight[tenant] = self.inflight.get(tenant, 0) + 1
            return True
        self.waiting.setdefault(tenant, deque()).append(ticket)
        return False

    def done(self, tenant: str, now: float) -> list[tuple[str, int]]:
        """A publish of ``tenant`` that started has finished (durable, refused or failed):
        returns the waiting ``(tenant, ticket)`` that start now, counted in flight."""
        n = self.inflight.get(tenant, 0) - 1
        if n > 0:
            self.inflight[tenant] = n
        else:
            self.inflight.pop(tenant, None)
        self._touch(tenant, now)
        return self._drain(now)

    def withdraw(self, tenant: str, ticket: int) -> None:
        """A waiting publish went away (its request was cancelled) before it started."""
        queue = self.waiting.get(tenant)
        if queue is not None and ticket in queue:
            queue.remove(ticket)
            if not queue:
                del self.waiting[tenant]

    def _drain(self, now: float) -> list[tuple[str, int]]:
        started: list[tuple[str, int]] = []
        for tenant in list(self.waiting):
            queue = self.waiting[tenant]
            while queue and self.may_start(tenant, now):
                started.append((tenant, queue.popleft()))
                self.inflight[tenant] = self.inflight.get(tenant, 0) + 1
            if not queue:
                del self.waiting[tenant]
        return started

    def _touch(self, tenant: str, now: float) -> None:
        self.seen.pop(tenant, None)
        self.seen[tenant] = now  # oldest first: _forget stops at the first recent one

    def _forget(self, now: float) -> None:
        horizon = now - CONTENDED_S
        while self.seen:
            tenant = next(iter(self.seen))
            if self.seen[tenant] >= horizon:
                break
            del self.seen[tenant]
