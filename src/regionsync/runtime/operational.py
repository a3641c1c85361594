"""Operational webhooks at run time: queue the events core.operational decides and
publish them into the operations tenant, whose endpoints get them like any event
(signed, retried, lanes, SSRF guard, replicated, failover).

Owns a bounded queue and one task (only when ``[operational_webhooks] tenant`` is set);
never decides a transition itself (the delivery worker, custody and ingest call ``emit``
once per transition they see) and never sends a request.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..config import Settings
from ..core.operational import operational_payload
from ..errors import NotFound
from .ports import Clock

__all__ = ["OperationalEvents"]

log = logging.getLogger("regionsync.operational")

QUEUE_LIMIT = 10_000  # events waiting to be published; the oldest are dropped beyond it


class OperationalEvents:
    """Operational events of this region, published as events of the operations tenant.

    ``publish(tenant, event_type, payload, event_id)`` (Ingest.publish_internal, set by
    the node) accepts one event durably, or returns None when an event of that id (a
    transition another region reported too) is held already. ``counts`` maps event type
    -> events published here; ``dropped`` counts events lost to a full queue or a missing
    operations tenant; ``duplicates`` those found held already.
    """

    def __init__(self, settings: Settings, clock: Clock):
        self.tenant = settings.operational_webhooks.tenant
        self.region, self.clock = settings.region, clock
        self.publish: Callable[[str, str, dict[str, Any], str | None], Awaitable[Any]] | None
        self.publish = None
        self._queue: deque[tuple[str, dict[str, Any], str | None]] = deque()
        self._wake = asyncio.Event()
        self.counts: dict[str, int] = {}
        self.dropped = 0
        self.duplicates = 0

    @property
    def enabled(self) -> bool:
        return self.tenant is not None

    def emit(
        self,
        event_type: str,
        data: Mapping[str, Any],
        tenant: str | None = None,
        *,
        event_id: str | None = None,
        at_ms: int | None = None,
    ) -> None:
        """Queue one operational event (``data``: its subject's fields; ``event_id``: an
        id every region derives alike, else a new one; ``at_ms``: when it happened, else
        now). Nothing when off, and nothing about the operations tenant's own endpoints
        and deliveries (``tenant``), which would report their own failures to themselves."""
        if self.tenant is None or tenant == self.tenant:
            return
        at = self.clock.wall_ms() if at_ms is None else at_ms
        payload = operational_payload(event_type, self.region, at, data)
        if len(self._queue) >= QUEUE_LIMIT:
            self._queue.popleft()
            self.dropped += 1
        self._queue.append((event_type, payload, event_id))
        self._wake.set()
        log.info("operational event %s %s", event_type, dict(data))

    async def run(self) -> None:
        """Publish queued events in order until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue and self.tenant is not None and self.publish is not None:
                event_type, payload, event_id = self._queue[0]
                try:
                    if await self.publish(self.tenant, event_type, payload, event_id) is None:
                        self.duplicates += 1
                        log.info("operational event %s %s held already", event_type, event_id)
                    else:
                        self.counts[event_type] = self.counts.get(event_type, 0) + 1
                except NotFound:
                    self.dropped += 1
                    log.warning("operational event %s dropped: no tenant %r (create it and "
                                "its endpoints)", event_type, self.tenant)  # fmt: skip
                except asyncio.CancelledError:
                    raise
                except Exception:
                    self.dropped += 1
                    log.exception("operational event %s could not be published", event_type)
                self._queue.popleft()
