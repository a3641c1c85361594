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

    ``publish(tenant, event_type, payload)`` (Ingest.publish_internal, set by the node)
    accepts one event durably. ``counts`` maps event type -> events published here;
    ``dropped`` counts events lost to a full queue or a missing operations tenant.
    """

    def __init__(self, settings: Settings, clock: Clock):
        self.tenant = settings.operational_webhooks.tenant
        self.region, self.clock = settings.region, clock
        self.publish: Callable[[str, str, dict[str, Any]], Awaitable[Any]] | None = None
        self._queue: deque[tuple[str, dict[str, Any]]] = deque()
        self._wake = asyncio.Event()
        self.counts: dict[str, int] = {}
        self.dropped = 0

    @property
    def enabled(self) -> bool:
        return self.tenant is not None

    def emit(self, event_type: str, data: Mapping[str, Any], tenant: str | None = None) -> None:
        """Queue one operational event (``data``: its subject's fields). Nothing when
        off, and nothing about the operations tenant's own endpoints and deliveries
        (``tenant``), which would report their own failures to themselves."""
        if self.tenant is None or tenant == self.tenant:
            return
        payload = operational_payload(event_type, self.region, self.clock.wall_ms(), data)
        if len(self._queue) >= QUEUE_LIMIT:
            self._queue.popleft()
            self.dropped += 1
        self._queue.append((event_type, payload))
        self._wake.set()
        log.info("operational event %s %s", event_type, dict(data))

    async def run(self) -> None:
        """Publish queued events in order until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue and self.tenant is not None and self.publish is not None:
                event_type, payload = self._queue[0]
                try:
                    await self.publish(self.tenant, event_type, payload)
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
