"""Endpoint health events for the cluster: once per transition of the replicated health
state, by one region (issue 43).

Watches every registry change (``Catalog.watchers``: local, replicated, another
process's) and keeps each endpoint's ``HealthMark`` (core.operational); a change of mark
that is a transition (``health_report``) is emitted by this region only when it is the
endpoint's reporter (``core.operational.reporter`` over the regions it does not suspect),
and only by the process holding the replication role. A transition seen while another
region reports it is kept ``window_s``: if this region becomes the reporter meanwhile (the
old one suspected), it emits it then; the event id derives from the transition id, so
``Ingest.publish_internal`` skips it when the old reporter's event arrived. Never decides
health (core.health, the delivery worker) and never publishes (runtime/operational.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from crdt import CRDT, LWWRegister

from ..core.operational import HealthMark, HealthReport, Write, health_report, reporter
from .operational import OperationalEvents
from .ports import Clock
from .state import Catalog

__all__ = ["HealthReports"]

log = logging.getLogger("regionsync.operational")

_MANUAL = ("url", "paused", "disabled")  # registers an API change writes with failing_since


class HealthReports:
    """The reporter half of endpoint health events. ``live()`` names the regions this one
    does not suspect (itself included); ``reporting()`` says whether this process reports
    (a single process, or the one holding its region's replication role). ``hint`` takes
    the health input of a transition this region writes (the event's ``trigger``)."""

    def __init__(
        self,
        region: str,
        catalog: Catalog,
        ops: OperationalEvents,
        clock: Clock,
        live: Callable[[], Iterable[str]],
        reporting: Callable[[], bool],
        window_s: float,
    ):
        self.region, self.catalog, self.ops, self.clock = region, catalog, ops, clock
        self.live, self.reporting, self.window_ms = live, reporting, int(window_s * 1000)
        self.marks: dict[str, HealthMark] = {}
        self._hints: dict[tuple[str, str], str] = {}  # (endpoint, event type) -> input
        # transition id -> (tenant, endpoint, report, previous state, seen at ms), seen
        # while another region was the reporter
        self.unreported: dict[str, tuple[str, str, HealthReport, str, int]] = {}
        self._registry: object = None

    def load(self) -> None:
        """Take every endpoint's mark as it is now, reporting nothing (at start, and after
        the registry was replaced: what changed meanwhile was another region's to report)."""
        reg = self.catalog.registry
        self._registry = reg
        self.marks = {}
        for tenant in reg.tenant_ids():
            for eid in reg.endpoint_ids(tenant):
                self.marks[eid] = self._mark(eid)

    def hint(self, endpoint_id: str, event_type: str, trigger: str) -> None:
        """This region is writing ``endpoint_id``'s transition ``event_type`` because of
        the health input ``trigger`` (before the write is applied; runtime/outcomes.py)."""
        self._hints[(endpoint_id, event_type)] = trigger

    def changed(self, changed: Mapping[str, CRDT]) -> None:
        """``Catalog`` watcher: compare the mark of every endpoint a change touched."""
        if self.catalog.registry is not self._registry:
            log.warning("registry replaced: health transitions meanwhile are not reported here")
            self.load()
            return
        ids = {k.split("/", 2)[1] for k in changed if k.startswith("e/") and k.count("/") == 2}
        for eid in sorted(ids):
            self._observe(eid)
        self._hints.clear()

    def _mark(self, eid: str) -> HealthMark:
        reg = self.catalog.registry
        view = reg.endpoint(eid)
        state = "active" if view is None else view.state

        def write(field: str) -> Write | None:
            s = reg.state(f"e/{eid}/{field}")
            if not isinstance(s, LWWRegister) or s.stamp is None or s.actor is None:
                return None
            return (s.stamp.wall_ms, s.stamp.logical, s.actor)

        manual = frozenset(w for w in map(write, _MANUAL) if w is not None)
        return HealthMark(state, write("failing_since"), write("disabled"), manual)

    def _observe(self, eid: str) -> None:
        view = self.catalog.registry.endpoint(eid)
        if view is None:  # deleted (or not yet whole): a later change starts it again
            self.marks.pop(eid, None)
            return
        mark, before = self._mark(eid), self.marks.get(eid)
        self.marks[eid] = mark
        if before is None:  # created: nothing to report yet
            return
        report = health_report(eid, before, mark)
        if report is None or view.tenant == self.ops.tenant:
            return
        trigger = self._hints.get((eid, report.event_type))
        if report.event_type == "endpoint.recovered":
            trigger = "success"  # health_report: only a success clears failing_since so
        entry = (view.tenant, eid, report, before.state, self.clock.wall_ms())
        if self._reports(eid):
            self._emit(entry, trigger)
        else:
            self.unreported[report.transition] = entry

    def _reports(self, eid: str) -> bool:
        return self.reporting() and reporter(eid, self.live()) == self.region

    def _emit(self, entry: tuple[str, str, HealthReport, str, int], trigger: str | None) -> None:
        tenant, eid, report, before, _ = entry
        data: dict[str, Any] = {
            "tenant": tenant,
            "endpoint": eid,
            "trigger": trigger,
            "from": before,
            "transition": report.transition,
            "by": report.actor.split(":", 1)[0],
        }
        self.ops.emit(report.event_type, data, tenant, event_id=report.event_id,
                      at_ms=report.at_ms)  # fmt: skip

    def step(self) -> int:
        """Emit the transitions seen while another region reported them, for the endpoints
        this region reports now (that region suspected); forget those older than the
        window. Returns how many were emitted."""
        now, n = self.clock.wall_ms(), 0
        for tid, entry in list(self.unreported.items()):
            if now - entry[4] > self.window_ms:
                del self.unreported[tid]
            elif self._reports(entry[1]):
                del self.unreported[tid]
                self._emit(entry, None)
                n += 1
        return n

    async def run(self, interval_s: float) -> None:
        while True:
            await self.clock.sleep(interval_s)
            try:
                self.step()
            except Exception:
                log.exception("health report step failed; retrying")
