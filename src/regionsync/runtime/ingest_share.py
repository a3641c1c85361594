"""The asyncio side of ``core.ingest_share``: a publish holds a slot of its tenant's share
of the write path from admission until it is durable (``ingest.tenant_publishes_in_flight``)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable

from ..core.ingest_share import IngestShare

__all__ = ["ShareGate", "ShareSlot"]


class ShareSlot:
    """One publish's place in its tenant's share; ``release`` (idempotent) gives it back,
    or once the commit it waits for (``hold_until``) is done."""

    __slots__ = ("_gate", "_tenant", "_until", "waited")

    def __init__(self, gate: ShareGate | None, tenant: str, waited: bool = False):
        self._gate, self._tenant = gate, tenant
        self._until: asyncio.Future[None] | None = None
        self.waited = waited  # it waited for its tenant's share (admission is checked again)

    def hold_until(self, commit: asyncio.Future[None]) -> None:
        """Keep the slot until ``commit`` is done, even if its publish is cancelled first
        (a client that hangs up does not take its event out of the share)."""
        self._until = commit

    def release(self) -> None:
        until = self._until
        if until is not None and not until.done():
            until.add_done_callback(lambda _f: self.release())
            return
        gate, self._gate = self._gate, None
        if gate is not None:
            gate._done(self._tenant)


class ShareGate:
    """Publishes wait here for their tenant's share (``core.ingest_share.IngestShare``);
    ``cap`` < 1: nobody waits."""

    def __init__(self, cap: int, monotonic: Callable[[], float]):
        self.share = IngestShare(cap)
        self.monotonic = monotonic
        self.waited = 0  # publishes that waited for their tenant's share (a metric)
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._tickets = itertools.count()

    @property
    def waiting(self) -> int:
        """Publishes waiting for their tenant's share now."""
        return len(self._waiters)

    @contextlib.asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[ShareSlot]:
        """Hold a slot of ``tenant``'s share for the block (released at its end at the
        latest). A cancelled waiter leaves the queue and takes no slot."""
        if self.share.cap < 1:
            yield ShareSlot(None, tenant)
            return
        held = await self._take(tenant)
        try:
            yield held
        finally:
            held.release()

    async def _take(self, tenant: str) -> ShareSlot:
        ticket = next(self._tickets)
        if self.share.ask(tenant, ticket, self.monotonic()):
            return ShareSlot(self, tenant)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[ticket] = fut
        self.waited += 1
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # started as it was cancelled
                self._done(tenant)
            else:
                self.share.withdraw(tenant, ticket)
            raise
        finally:
            self._waiters.pop(ticket, None)
        return ShareSlot(self, tenant, waited=True)

    def _done(self, tenant: str) -> None:
        ended = [tenant]
        while ended:
            for t, ticket in self.share.done(ended.pop(), self.monotonic()):
                fut = self._waiters.get(ticket)
                if fut is None or fut.done():  # its waiter was cancelled: give it back
                    ended.append(t)
                else:
                    fut.set_result(None)
