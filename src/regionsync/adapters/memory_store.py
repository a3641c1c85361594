"""In-memory Store for unit tests and the simulator.

Same contract as SqliteStore (the shared contract suite runs against both). ``crash()``
models a process crash (the object survives, like a disk); ``wipe()`` models a lost disk.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Iterable, Mapping, Sequence

from ..core.model import (
    Attempt,
    AuditEntry,
    Delivery,
    DeliveryQuery,
    DeliveryStatus,
    Event,
    EventQuery,
    Record,
    WriteBatch,
    add_moves,
)  # fmt: skip
from ..runtime.ports import StoreInfo

__all__ = ["MemoryStore"]


class MemoryStore:
    """Store held in dicts; ``commit`` applies a whole WriteBatch at once."""

    def __init__(self) -> None:
        self.wipe()

    def wipe(self) -> None:
        """Forget everything, as a node whose disk was lost."""
        self._meta: dict[str, str] = {}
        self._registry: dict[str, bytes] = {}
        self._log: dict[str, dict[int, Record]] = {}
        self._vv: dict[str, int] = {}
        self._floor: dict[str, int] = {}
        self._events: dict[str, Event] = {}
        self._deliveries: dict[str, Delivery] = {}
        self._sorted_ids: dict[str, list[str]] = {}  # ``_ids_after``'s cache
        # pending deliveries by region, then endpoint (the per-endpoint due heads)
        self._pending: dict[str, dict[str, dict[str, Delivery]]] = {}
        # (kind, region, status) -> rows: events by origin region ("event", r, ""), deliveries
        # by owner region and status; kept by commit, so counts() costs no scan
        self._counts: dict[tuple[str, str, str], int] = {}
        self._attempts: dict[tuple[str, str, int, int], Attempt] = {}
        self._idem: dict[tuple[str, str], tuple[str, str, str, str, int, str]] = {}
        self._usage_carry: dict[tuple[str, str], int] = {}  # (WriteBatch.usage)
        self._audit: dict[tuple[str, int], AuditEntry] = {}
        self._open = False

    async def open(self, region: str, new_incarnation: int) -> StoreInfo:
        if "region" in self._meta:
            if self._meta["region"] != region:
                raise ValueError(f"store belongs to region {self._meta['region']!r}")
            self._open = True
            born = int(self._meta.get("born", "0"))
            return StoreInfo(region, int(self._meta["incarnation"]), fresh=False, born_ms=born)
        born = str(new_incarnation)
        self._meta = {"region": region, "incarnation": born, "born": born}
        self._open = True
        return StoreInfo(region, new_incarnation, fresh=True, born_ms=new_incarnation)

    async def renew_incarnation(self, incarnation: int) -> None:
        self._check()
        self._meta["incarnation"] = str(incarnation)

    async def close(self) -> None:
        self._open = False

    def _check(self) -> None:
        if not self._open:
            raise RuntimeError("store is not open")

    def _count(self, key: tuple[str, str, str], n: int) -> None:
        """Move the row count of ``(kind, region, status)`` by ``n`` (``counts`` reads it)."""
        self._counts[key] = self._counts.get(key, 0) + n

    async def commit(self, batch: WriteBatch) -> None:
        self._check()
        batch = copy.copy(batch)
        self._registry.update(batch.registry)
        for r in batch.records:
            self._log.setdefault(r.origin, {}).setdefault(r.seq, r)
        for origin, seq in batch.version_vector.items():
            self._vv[origin] = max(self._vv.get(origin, 0), seq)
        for e in batch.events:
            if e.id not in self._events:
                self._events[e.id] = e
                self._count(("event", e.region, ""), 1)
        for d in batch.deliveries:
            old = self._deliveries.get(d.id)
            if old is not None:
                self._count(("delivery", old.region, old.status.value), -1)
            self._count(("delivery", d.region, d.status.value), 1)
            if old is not None and old.status is DeliveryStatus.PENDING:
                eps = self._pending[old.region]
                eps[old.endpoint_id].pop(old.id, None)
                if not eps[old.endpoint_id]:
                    del eps[old.endpoint_id]
            self._deliveries[d.id] = d
            if d.status is DeliveryStatus.PENDING:
                eps = self._pending.setdefault(d.region, {})
                eps.setdefault(d.endpoint_id, {})[d.id] = d
        for a in batch.attempts:
            self._attempts.setdefault((a.delivery_id, a.region, a.generation, a.n), a)
        for entry in batch.audit:
            self._audit.setdefault((entry.origin, entry.seq), entry)
        for row in batch.idempotency:
            known = self._idem.get((row[0], row[1]))
            if known is None or (row[4], row[2]) < (known[4], known[2]):
                self._idem[(row[0], row[1])] = row  # the earliest acceptance wins
        if batch.usage_recorded:
            self._usage_carry.clear()
        else:
            add_moves(self._usage_carry, batch.usage)

    async def load_usage_carry(self) -> dict[tuple[str, str], int]:
        self._check()
        return {k: n for k, n in self._usage_carry.items() if n}

    async def load_registry(self) -> dict[str, bytes]:
        self._check()
        return dict(self._registry)

    async def load_version_vector(self) -> dict[str, int]:
        self._check()
        return dict(self._vv)

    async def records_after(self, after: Mapping[str, int], limit: int) -> list[Record]:
        self._check()
        out: list[Record] = []
        for origin in sorted(self._log):
            log = self._log[origin]
            start = after.get(origin, 0)
            for seq in sorted(s for s in log if s > start):
                if len(out) >= limit:
                    return out
                out.append(log[seq])
        return out

    async def truncate_log(self, upto: Mapping[str, int]) -> int:
        self._check()
        n = 0
        for origin, seq in upto.items():
            log = self._log.get(origin, {})
            for s in [s for s in log if s <= seq]:
                del log[s]
                n += 1
            self._floor[origin] = max(self._floor.get(origin, 0), seq)
        return n

    async def forget_origins(self, origins: Iterable[str]) -> None:
        self._check()
        for origin in origins:
            self._vv.pop(origin, None)
            self._log.pop(origin, None)
            self._floor.pop(origin, None)

    async def load_log_floor(self) -> dict[str, int]:
        self._check()
        return dict(self._floor)

    def _ids_after(self, table: str, after: str, limit: int | None) -> list[str]:
        """Ids of ``table`` ("events" or "deliveries") above ``after``, in order, at most
        ``limit``: a bisect in its sorted ids, sorted again only once rows were added
        (or removed by ``purge_events``), so paging through N rows costs one sort, not one
        per page."""
        rows = self._events if table == "events" else self._deliveries
        ids = self._sorted_ids.get(table)
        if ids is None or len(ids) != len(rows):
            ids = self._sorted_ids[table] = sorted(rows)
        i = bisect.bisect_right(ids, after)
        return ids[i : None if limit is None else i + limit]

    async def list_event_ids(self, after: str = "", limit: int | None = None) -> list[str]:
        self._check()
        return self._ids_after("events", after, limit)

    async def load_deliveries(self, after: str = "", limit: int | None = None) -> list[Delivery]:
        self._check()
        return [self._deliveries[k] for k in self._ids_after("deliveries", after, limit)]

    async def get_event(self, event_id: str) -> Event | None:
        self._check()
        return self._events.get(event_id)

    async def get_events(self, event_ids: Sequence[str]) -> dict[str, Event]:
        self._check()
        return {i: self._events[i] for i in event_ids if i in self._events}

    async def load_idempotency(
        self, after: tuple[str, str] | None = None, limit: int | None = None
    ) -> list[tuple[str, str, str, str, int, str]]:
        self._check()
        keys = sorted(k for k in self._idem if after is None or k > after)[:limit]
        return [self._idem[k] for k in keys]

    async def get_idempotency(
        self, tenant: str, key: str
    ) -> tuple[str, str, str, str, int, str] | None:
        self._check()
        return self._idem.get((tenant, key))

    async def idempotency_of_events(
        self, event_ids: Sequence[str]
    ) -> list[tuple[str, str, str, str, int, str]]:
        self._check()
        wanted = set(event_ids)
        return sorted(row for row in self._idem.values() if row[2] in wanted)

    async def purge_idempotency(self, before_ms: int, limit: int) -> int:
        self._check()
        old = [k for k, row in self._idem.items() if row[4] < before_ms][:limit]
        for k in old:
            del self._idem[k]
        return len(old)

    async def get_deliveries(self, delivery_ids: Sequence[str]) -> dict[str, Delivery]:
        self._check()
        return {i: self._deliveries[i] for i in delivery_ids if i in self._deliveries}

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        self._check()
        return self._deliveries.get(delivery_id)

    async def deliveries_of_event(self, event_id: str) -> list[Delivery]:
        self._check()
        return sorted(
            (d for d in self._deliveries.values() if d.event_id == event_id), key=lambda d: d.id
        )

    async def list_deliveries(
        self,
        endpoint_id: str,
        status: DeliveryStatus | None,
        since_ms: int | None,
        after_id: str | None,
        limit: int,
    ) -> list[Delivery]:
        self._check()
        rows = sorted(
            (
                d
                for d in self._deliveries.values()
                if d.endpoint_id == endpoint_id
                and (status is None or d.status is status)
                and (since_ms is None or d.created_at_ms >= since_ms)
                and (after_id is None or d.id > after_id)
            ),
            key=lambda d: d.id,
        )
        return rows[:limit]

    async def list_events(
        self, q: EventQuery, before: tuple[int, str] | None, limit: int
    ) -> list[Event]:
        self._check()
        by_event: dict[str, list[Delivery]] = {}
        if q.endpoint_id is not None or q.status is not None:
            for d in self._deliveries.values():
                by_event.setdefault(d.event_id, []).append(d)
        rows = sorted(
            (
                e
                for e in self._events.values()
                if (before is None or (e.received_at_ms, e.id) < before)
                and q.matches(e, by_event.get(e.id, []))
            ),
            key=lambda e: (e.received_at_ms, e.id),
            reverse=True,
        )
        return rows[:limit]

    async def list_tenant_deliveries(
        self, q: DeliveryQuery, before: tuple[int, str] | None, limit: int
    ) -> list[Delivery]:
        self._check()
        rows = sorted(
            (
                d
                for d in self._deliveries.values()
                if (before is None or (d.created_at_ms, d.id) < before) and q.matches(d)
            ),
            key=lambda d: (d.created_at_ms, d.id),
            reverse=True,
        )
        return rows[:limit]

    async def deliveries_of_events(self, event_ids: Sequence[str]) -> list[Delivery]:
        self._check()
        ids = set(event_ids)
        return sorted(
            (d for d in self._deliveries.values() if d.event_id in ids), key=lambda d: d.id
        )

    async def due_deliveries(
        self,
        region: str,
        now_ms: int,
        limit: int,
        exclude: Sequence[str],
        exclude_endpoints: Sequence[str] = (),
        per_endpoint: int | None = None,
    ) -> list[Delivery]:
        # as the SQL stores: the due heads of the endpoints not excluded, never those of
        # an excluded endpoint's backlog; with per_endpoint, merged round-robin
        self._check()
        skip = set(exclude)
        skip_eps = set(exclude_endpoints)
        ranked: list[tuple[int, int, str, Delivery]] = []
        for eid, rows in self._pending.get(region, {}).items():
            if eid in skip_eps:
                continue
            head = sorted(
                (
                    d
                    for d in rows.values()
                    if d.next_attempt_at_ms is not None
                    and d.next_attempt_at_ms <= now_ms
                    and d.id not in skip
                ),
                key=lambda d: (d.next_attempt_at_ms, d.id),
            )[: limit if per_endpoint is None else per_endpoint]
            for rank, d in enumerate(head):
                turn = 0 if per_endpoint is None else rank
                ranked.append((turn, d.next_attempt_at_ms or 0, d.id, d))
        ranked.sort(key=lambda r: r[:3])
        return [r[3] for r in ranked[:limit]]

    async def next_due_ms(self, region: str) -> int | None:
        self._check()
        times = [
            d.next_attempt_at_ms
            for rows in self._pending.get(region, {}).values()
            for d in rows.values()
            if d.next_attempt_at_ms is not None
        ]
        return min(times) if times else None

    async def attempts_of(self, delivery_id: str) -> list[Attempt]:
        self._check()
        return sorted(
            (a for a in self._attempts.values() if a.delivery_id == delivery_id),
            key=lambda a: (a.at_ms, a.generation, a.n),
        )

    async def list_attempts(
        self,
        endpoint_id: str,
        succeeded: bool | None,
        since_ms: int | None,
        after: tuple[int, str, int] | None,
        limit: int,
        descending: bool = False,
    ) -> list[Attempt]:
        self._check()

        def beyond(a: Attempt) -> bool:
            if after is None:
                return True
            at = (a.at_ms, a.delivery_id, a.n)
            return at < after if descending else at > after

        rows = sorted(
            (
                a
                for a in self._attempts.values()
                if a.endpoint_id == endpoint_id
                and (succeeded is None or (a.error is None) == succeeded)
                and (since_ms is None or a.at_ms >= since_ms)
                and beyond(a)
            ),
            key=lambda a: (a.at_ms, a.delivery_id, a.n),
            reverse=descending,
        )
        return rows[:limit]

    async def purge_attempts(self, before_ms: int, limit: int) -> int:
        self._check()
        old = [k for k, a in self._attempts.items() if a.at_ms < before_ms][:limit]
        for k in old:
            del self._attempts[k]
        return len(old)

    async def purge_events(
        self, before_ms: int, limit: int, tenant: str | None = None, skip: Sequence[str] = ()
    ) -> tuple[list[str], list[str], int]:
        self._check()
        by_event: dict[str, list[Delivery]] = {}
        for d in self._deliveries.values():
            by_event.setdefault(d.event_id, []).append(d)
        old = sorted(
            (e for e in self._events.values() if e.received_at_ms < before_ms
             and (tenant is None or e.tenant == tenant) and e.tenant not in skip
             and all(d.status.final for d in by_event.get(e.id, ()))),
            key=lambda e: (e.received_at_ms, e.id),
        )[:limit]  # fmt: skip
        dids = [d.id for e in old for d in by_event.get(e.id, ())]
        gone = set(dids)
        keys = [k for k in self._attempts if k[0] in gone]
        for k in keys:
            del self._attempts[k]
        for did in dids:
            d = self._deliveries.pop(did)
            self._count(("delivery", d.region, d.status.value), -1)
        for e in old:
            del self._events[e.id]
            self._count(("event", e.region, ""), -1)
        self._sorted_ids.clear()
        return [e.id for e in old], dids, len(keys)

    async def list_audit(
        self,
        tenant: str | None,
        since_ms: int | None,
        before: tuple[int, int, str, int] | None,
        limit: int,
    ) -> list[AuditEntry]:
        self._check()

        def key(a: AuditEntry) -> tuple[int, int, str, int]:
            return (a.hlc_wall_ms, a.hlc_logical, a.origin, a.seq)

        rows = sorted(
            (
                a
                for a in self._audit.values()
                if (tenant is None or a.tenant == tenant)
                and (since_ms is None or a.hlc_wall_ms >= since_ms)
                and (before is None or key(a) < before)
            ),
            key=key,
            reverse=True,
        )
        return rows[:limit]

    async def pending_count(self, region: str) -> int:
        self._check()
        return self._counts.get(("delivery", region, DeliveryStatus.PENDING.value), 0)

    async def pending_by_tenant(self, region: str) -> dict[str, int]:
        self._check()
        out: dict[str, int] = {}
        for rows in self._pending.get(region, {}).values():
            for d in rows.values():
                out[d.tenant] = out.get(d.tenant, 0) + 1
        return out

    async def counts(self, region: str) -> dict[str, int]:
        self._check()
        c = self._counts
        out = {
            "events": len(self._events),
            "events_accepted": c.get(("event", region, ""), 0),
        }
        for s in DeliveryStatus:
            out[f"deliveries_{s.value}"] = c.get(("delivery", region, s.value), 0)
        return out
