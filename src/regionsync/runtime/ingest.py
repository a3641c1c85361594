"""Ingest: publish and inbound webhooks, Idempotency-Keys, admission and ack policies.

Decides the fan-out snapshot of each accepted event (its deliveries, from the catalog's
subscription index) and answers only once the event is durable (``local``) or also held
by a peer (``one-remote``). Reads the registry, never changes it except for usage
counters; never sends a delivery or touches the replication log's links.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..core.backpressure import Admission, Pressure, admit, observe, priority_for
from ..core.event_types import ValidatorCache, validate_payload
from ..core.filters import Predicate
from ..core.lanes import TokenBucket
from ..core.model import Delivery, DeliveryStatus, Event, WriteBatch
from ..core.operational import pressure_transition
from ..core.sources import Inbound, SourceConfig, event_id_for, verify
from ..core.validate import check_event_type
from ..errors import Conflict, NotFound, TooManyRequests, Unavailable, Unprocessable
from .ingest_share import ShareGate, ShareSlot
from .offload import Offload
from .operational import OperationalEvents
from .ports import Clock, IdSource, Rng, Store
from .state import Catalog, DeliveryQueue, IdempotencyKeys, PeerStatus, tenant_backlog_full
from .writepath import WritePath

__all__ = ["Ingest"]

_CLIENT_IDS_KEPT = 10_000  # longer than any store read before the lock takes

SOURCE_CONFIG_FIELDS = (
    "id", "tenant", "kind", "secret", "priority", "ack_policy", "header", "algorithm",
    "encoding", "prefix", "event_type_from", "id_from", "default_event_type",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Accepted:
    """An accepted event: its durability future and its record's sequence number."""

    event: Event
    durable: asyncio.Future[None]
    seq: int


def _apply_filters(
    filters: Mapping[str, Predicate], payload: Any
) -> dict[str, tuple[Predicate, bool]]:
    return {eid: (predicate, predicate(payload)) for eid, predicate in filters.items()}


def _hand_over(
    durable: asyncio.Future[None], queue: DeliveryQueue, fresh: list[Delivery], event: Event
) -> None:
    """Once ``event`` is durable, its pending deliveries go to the worker (woken)."""
    if not durable.cancelled() and durable.exception() is None:
        queue.hand_over(fresh, event)


class Ingest:
    """Accepts events for one region. Public coroutines are API operations and raise
    ``regionsync.errors.ClientError`` subclasses."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        writer: WritePath,
        queue: DeliveryQueue,
        idempotency: IdempotencyKeys,
        peers: Mapping[str, PeerStatus],
        *,
        store: Store,
        clock: Clock,
        rng: Rng,
        ids: IdSource,
        ops: OperationalEvents | None = None,
        offload: Offload,
    ):
        self.settings, self.region, self.ops = settings, settings.region, ops
        self.catalog, self.writer, self.queue = catalog, writer, queue
        self.idempotency, self.peers = idempotency, peers
        self.store, self.clock, self.rng, self.ids = store, clock, rng, ids
        self.tenant_buckets: dict[str, TokenBucket] = {}  # publish rate, per tenant
        self.pressure: Pressure | None = None
        self.ingest_counts: dict[tuple[str, str], int] = {}  # (admitted|shed, priority)
        self.last_retry_after_s = 0
        self._pending_events: dict[str, asyncio.Future[None]] = {}  # accepted, not durable
        # the latest ids accepted here with a caller's id (insertion order: oldest first),
        # so a repeat that read the store before the first was durable is found under the
        # write lock without a store read there
        self._client_ids: dict[str, None] = {}
        self._ack_waiters: dict[asyncio.Event, None] = {}  # ordered: deterministic wake-ups
        self._publish_latency = writer.telemetry.publish.labels("publish")  # looked up once
        # False while this process cannot read its region's records (runtime/cohort.py;
        # set by the Node): its view is stale, so it acknowledges nothing
        self.following: Callable[[], bool] = lambda: True
        self.offload = offload  # runs the schema validations
        # a tenant's share of the write path while others publish (core.ingest_share)
        self.share = ShareGate(settings.ingest.tenant_publishes_in_flight, clock.monotonic)
        self._validators = ValidatorCache()  # compiled schemas, used on offload threads
        self._validators_lock = threading.Lock()

    def require_following(self) -> None:
        """503 ``not_following`` (Retry-After 1) while ``following`` says this process
        cannot read its region's records: an event it accepted now might match no
        endpoint that another process created."""
        if not self.following():
            raise Unavailable(
                "this process cannot read its region's records now (see its log); another "
                "process of the region can take the request", retry_after_s=1,
                code="not_following",
            )  # fmt: skip

    def admission(self, priority: str, again: bool = False) -> Admission:
        """Backpressure decision for one ingest of ``priority`` (core.backpressure);
        ``again``: a second decision for an ingest admitted before (counted if shed)."""
        opts, before = self.settings.ingest, self.pressure
        self.pressure = observe(
            self.pressure,
            self.queue.backlog,
            self.writer.queued + self.share.waiting,  # waiting for their tenant's share too
            opts.backlog_capacity,
            self.clock.monotonic(),
            opts.pressure_tau_s,
        )
        if self.ops is not None and self.ops.enabled:
            p = self.pressure
            change = pressure_transition(before.state if before else None, p.state)
            if change is not None:
                self.ops.emit(change, {"state": p.state, "saturation": round(p.smoothed, 4)})
        decision = admit(self.pressure, priority, self.rng.uniform(-1.0, 1.0))
        key = "admitted" if decision.admitted else "shed"
        if not (again and decision.admitted):
            self.ingest_counts[(key, priority)] = self.ingest_counts.get((key, priority), 0) + 1
        self.last_retry_after_s = decision.retry_after_s or 0
        return decision

    def _tenant_rate_or_raise(self, tenant_id: str) -> None:
        """429 (code ``tenant_rate_limited``, Retry-After in whole seconds) when the
        tenant's publish bucket in this region is empty; 0/None rate: unlimited."""
        rate = self.catalog.registry.publish_rate(tenant_id)
        rate = rate if rate is not None else self.settings.ingest.tenant_rate_per_s
        if not rate:
            return
        now = self.clock.monotonic()
        bucket = self.tenant_buckets.get(tenant_id)
        if bucket is None:
            bucket = self.tenant_buckets[tenant_id] = TokenBucket.new(rate, now)
        bucket.retune(rate, now)
        if not bucket.take(now):
            raise TooManyRequests(
                f"tenant {tenant_id!r} is over its publish rate of {rate:g}/s in this region",
                retry_after_s=max(1, math.ceil(bucket.wait_s(now))),
                code="tenant_rate_limited",
                field="tenant",
            )

    def _tenant_share_or_raise(self, tenant_id: str, priority: str) -> None:
        """429 (code ``tenant_backlog_full``) while the tenant holds its share of this
        region's backlog (``ingest.tenant_backlog_share`` of the capacity), whatever the
        region's saturation: its backlog never takes the other tenants' capacity."""
        if not self.queue.tenant_full(tenant_id):
            return
        self.ingest_counts[("shed", priority)] = self.ingest_counts.get(("shed", priority), 0) + 1
        raise tenant_backlog_full(self.queue, tenant_id, self.rng.uniform(-1.0, 1.0))

    def _admit_or_raise(self, priority: str, tenant_id: str, again: bool = False) -> None:
        """Backlog share, then backpressure (``again``: after a wait for the tenant's share)."""
        self._tenant_share_or_raise(tenant_id, priority)
        decision = self.admission(priority, again)
        if decision.status == 429:
            raise TooManyRequests(
                f"region is shedding {priority} traffic ({decision.state})",
                retry_after_s=decision.retry_after_s or 1,
                code="shedding",
            )
        if decision.status == 503:
            raise Unavailable(
                "region is at its backlog limit", retry_after_s=decision.retry_after_s or 1,
                code="overloaded",
            )  # fmt: skip

    async def publish(
        self,
        tenant_id: str,
        event_type: Any,
        payload: bytes,
        idempotency_key: str | None,
        payload_obj: Any = None,
        event_id: str | None = None,
    ) -> tuple[Event, bool]:
        """Accept an event: durable locally (with its deliveries) before this returns.

        ``payload`` is the JSON bytes to deliver (``payload_obj`` the same parsed, if the
        caller has it; filters read it). Returns ``(event, created)``; a repeat
        with the same ``Idempotency-Key`` and body (sent to any region, once replicated)
        returns the original event and False. ``event_id``: the id the client chose
        (checked by the caller, core.validate.check_event_id); a repeat with the same id
        and body returns the event and False, and a repeat with another tenant, type or
        payload is a Conflict (``event_id_conflict``, field ``id``); two regions that both
        accept an id before they exchanged it keep one event of that id (README,
        Client-chosen event ids). Raises NotFound (tenant), Unprocessable
        (event_type; unknown type in strict mode), SchemaViolation (payload against its
        type's schema, core.event_types), Conflict (key reused with another body), TooManyRequests /
        Unavailable (backpressure, the tenant's queue of checks full, ``one-remote`` not
        confirmed in time, or ``require_following``).
        """
        self.require_following()
        tel, started = self.writer.telemetry, self.clock.monotonic()
        with tel.span("regionsync.ingest", **{"regionsync.path": "publish"}) as span:
            event, created = await self._publish(
                tenant_id, event_type, payload, idempotency_key, payload_obj, event_id
            )
            span.set_attribute("regionsync.event_id", event.id)
        self._publish_latency.observe(self.clock.monotonic() - started)
        return event, created

    async def _publish(
        self,
        tenant_id: str,
        event_type: Any,
        payload: bytes,
        idempotency_key: str | None,
        payload_obj: Any = None,
        event_id: str | None = None,
    ) -> tuple[Event, bool]:
        check_event_type(event_type)
        self.catalog.require_tenant(tenant_id)
        if event_id is not None:  # a repeat of a client-chosen id: before any admission
            same = await self._same_event(tenant_id, event_id, event_type, payload)
            if same is not None:
                return same, False
        self._tenant_rate_or_raise(tenant_id)
        priority = priority_for(event_type, self.settings.ingest.event_type_priorities)
        self._admit_or_raise(priority, tenant_id)
        async with self.share.slot(tenant_id) as slot:  # the tenant's share of the commits
            if slot.waited:
                self._admit_or_raise(priority, tenant_id, again=True)
            return await self._publish_new(
                slot, tenant_id, event_type, payload, idempotency_key, payload_obj, event_id
            )

    async def _publish_new(
        self, slot: ShareSlot, tenant_id: str, event_type: str, payload: bytes,
        idempotency_key: str | None, payload_obj: Any, event_id: str | None,
    ) -> tuple[Event, bool]:  # fmt: skip
        """``_publish`` once admitted, holding a slot of the tenant's share."""
        digest = ""  # only an Idempotency-Key needs the body's digest
        if idempotency_key is not None:
            digest = hashlib.sha256(event_type.encode() + b"\0" + payload).hexdigest()
        found = None
        if idempotency_key is not None:  # memory or one store read, before the lock
            found = await self._idempotent(tenant_id, idempotency_key)
        obj, refused, verdicts = payload_obj, None, {}
        if found is None:
            obj = json.loads(payload) if payload_obj is None else payload_obj
            # the catalog's schema (or strict mode) judges new events, not repeats
            refused = await self._judge(tenant_id, event_type, obj, True)
            verdicts = await self._filters(tenant_id, event_type, obj) if not refused else {}
        async with self.writer.local_lock():
            self.catalog.require_tenant(tenant_id)
            if idempotency_key is not None and found is None:  # accepted meanwhile?
                found = self.idempotency.get(
                    tenant_id, idempotency_key, self.clock.wall_ms(), self._ttl_ms
                )
            if found is None and event_id is not None and event_id in self._client_ids:
                found = (event_id, digest, "", 0)  # accepted meanwhile (``_same_event``)
            if found is None:
                if refused is not None:
                    raise refused
                accepted = self._accept(
                    tenant_id, event_type, payload, digest, idempotency_key, event_id,
                    payload_obj=obj, verdicts=verdicts,
                )  # fmt: skip
            else:
                found_id, seen, region, received_at_ms = found
                if seen != digest or event_id not in (None, found_id):
                    raise Conflict(
                        "Idempotency-Key was used with another body"
                        if seen != digest else "Idempotency-Key was used with another event id",
                        field="Idempotency-Key",
                        code="idempotency_conflict",
                    )  # fmt: skip
                original = Event(found_id, tenant_id, event_type, payload, region, received_at_ms)
                durable = self._pending_events.get(found_id)
        if found is not None and region == "":  # an id accepted meanwhile: read it back
            if durable is not None:
                await asyncio.shield(durable)
            same = await self._same_event(tenant_id, found_id, event_type, payload)
            if same is None:  # its commit failed (and raised to its caller): retry
                raise Unavailable("the event's first publish failed; retry", retry_after_s=1)
            return same, False
        if found is not None:
            if durable is not None:  # the original is not durable yet: answer when it is
                await asyncio.shield(durable)
            return original, False
        one_remote = self.catalog.registry.ack_policy(tenant_id) == "one-remote"
        await self._settle(accepted, one_remote, slot)
        return accepted.event, True

    async def publish_internal(
        self, tenant_id: str, event_type: str, payload: Any, event_id: str | None = None
    ) -> Event | None:
        """Accept an event the node raises itself (operational webhooks): no admission,
        rate limit or catalog check; durable before it returns. ``event_id``: an id every
        region derives alike (core.operational), None when an event of that id is held
        (accepted here or replicated). NotFound (tenant)."""
        if event_id is not None and await self.store.get_event(event_id) is not None:
            return None
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        async with self.writer.local_lock():
            self.catalog.require_tenant(tenant_id)
            if event_id is not None and event_id in self._pending_events:
                return None
            accepted = self._accept(
                tenant_id, event_type, text, "", None, event_id, payload_obj=payload
            )
        await self._settle(accepted, False)
        return accepted.event

    async def _same_event(
        self, tenant_id: str, event_id: str, event_type: str, payload: bytes
    ) -> Event | None:
        """The stored event ``event_id`` if it is this one (tenant's live generation, type,
        payload bytes), None if no event has that id here yet; Conflict
        (``event_id_conflict``, field ``id``) if another event has it."""
        pending = self._pending_events.get(event_id)
        if pending is not None:  # accepted here, not durable yet
            await asyncio.shield(pending)
        event = await self.store.get_event(event_id)
        if event is None:
            return None
        if (
            not self.catalog.event_visible(tenant_id, event)
            or event.event_type != event_type
            or event.payload != payload
        ):
            raise Conflict(
                "an event with this id exists with another tenant, event type or payload",
                field="id",
                code="event_id_conflict",
            )
        return event

    @property
    def _ttl_ms(self) -> int:
        return int(self.settings.ingest.idempotency_ttl_s * 1000)

    async def _idempotent(self, tenant_id: str, key: str) -> tuple[str, str, str, int] | None:
        return await self.idempotency.lookup(tenant_id, key, self.clock.wall_ms(), self._ttl_ms)

    async def ingest(
        self, source_id: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[Event, bool]:
        """Accept an inbound webhook from a registered source (``POST /in/{source}``).

        ``headers`` have lower-case names; ``body`` is the raw bytes, verified before it
        is parsed. The event id derives from the source and the sender's delivery id, so
        a redelivery to any region is the same event: answered with the original id and
        not delivered again once the regions exchanged it. Raises NotFound (source),
        Unauthorized, BadRequest, Unprocessable (see core.sources.verify), and the
        backpressure errors of ``publish``.
        """
        self.require_following()
        tel, started = self.writer.telemetry, self.clock.monotonic()
        with tel.span("regionsync.ingest", **{"regionsync.path": "inbound"}) as span:
            event, created = await self._ingest(source_id, headers, body)
            span.set_attribute("regionsync.event_id", event.id)
        tel.publish.labels("inbound").observe(self.clock.monotonic() - started)
        return event, created

    async def _ingest(
        self, source_id: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[Event, bool]:
        fields = self.catalog.registry.source(source_id)
        if fields is None:
            raise NotFound(f"no source {source_id!r}", field="source")
        src = SourceConfig(**{k: fields[k] for k in SOURCE_CONFIG_FIELDS})
        inbound = verify(src, headers, body, self.clock.wall_ms() // 1000)
        event_id = event_id_for(source_id, inbound.delivery_id)
        existing = await self.store.get_event(event_id)
        if existing is not None:
            return existing, False
        self._admit_or_raise(src.priority, src.tenant)
        async with self.share.slot(src.tenant) as slot:  # the tenant's share of the commits
            if slot.waited:
                self._admit_or_raise(src.priority, src.tenant, again=True)
            return await self._ingest_new(slot, src, inbound, event_id)

    async def _ingest_new(
        self, slot: ShareSlot, src: SourceConfig, inbound: Inbound, event_id: str
    ) -> tuple[Event, bool]:
        """``_ingest`` once admitted, holding a slot of the tenant's share."""
        payload = inbound.text  # delivered as the sender wrote it (core.jsontext)
        digest = hashlib.sha256(inbound.event_type.encode() + b"\0" + payload.encode()).hexdigest()
        # a schema judges inbound payloads too; strict mode does not refuse an unknown
        # type here (senders add types without notice, some never retry)
        refused = await self._judge(src.tenant, inbound.event_type, inbound.payload, False)
        verdicts: dict[str, tuple[Predicate, bool]] = {}
        if refused is None:
            verdicts = await self._filters(src.tenant, inbound.event_type, inbound.payload)
        async with self.writer.local_lock():
            self.catalog.require_tenant(src.tenant)
            pending = self._pending_events.get(event_id)
            if pending is None:
                if refused is not None:
                    raise refused
                accepted = self._accept(
                    src.tenant, inbound.event_type, payload.encode(), digest, None, event_id,
                    payload_obj=inbound.payload, verdicts=verdicts,
                )  # fmt: skip
        if pending is not None:
            await asyncio.shield(pending)
            stored = await self.store.get_event(event_id)
            assert stored is not None
            return stored, False
        one_remote = "one-remote" in (src.ack_policy, self.catalog.registry.ack_policy(src.tenant))
        await self._settle(accepted, one_remote, slot)
        return accepted.event, True

    async def _judge(
        self, tenant_id: str, event_type: str, payload: Any, strict: bool
    ) -> Unprocessable | None:
        """The catalog's verdict on a new event (None: it may be accepted), reached before
        the write lock and with the schema validation on an offload thread, so neither
        the lock nor the event loop waits for it (the event is judged by the schema of
        when it arrived). Raises TooManyRequests when the tenant's checks queue is full."""
        try:
            schema = self.catalog.schema_of(tenant_id, event_type, strict)
            if schema is not None:
                await self.offload.run(tenant_id, self._validate, schema, payload)
        except Unprocessable as exc:
            return exc
        return None

    async def _filters(
        self, tenant_id: str, event_type: str, payload: Any
    ) -> dict[str, tuple[Predicate, bool]]:
        """The endpoints' filters applied to a new event's payload (``_accept``'s
        verdicts), on an offload thread before the write lock: a filter of 256 values
        over a 256 KB payload takes up to about 0.5 s, and a tenant has many endpoints."""
        filters = self.catalog.index.filtered(tenant_id, event_type)
        if not filters:
            return {}
        return await self.offload.run(tenant_id, _apply_filters, filters, payload)

    def _validate(self, schema: str, payload: Any) -> None:
        """core.event_types.validate_payload within the step bound (on an offload thread)."""
        with self._validators_lock:
            validator = self._validators.get(schema)
        validate_payload(validator, payload, self.settings.ingest.schema_max_steps)

    async def _settle(
        self, accepted: _Accepted, one_remote: bool, slot: ShareSlot | None = None
    ) -> None:
        """After ``_accept``: wait until durable (which hands its pending deliveries to
        the worker; then ``slot`` is given back), and for ``one-remote`` until a peer
        holds it."""
        tel = self.writer.telemetry
        if slot is not None:
            slot.hold_until(accepted.durable)
        with tel.span("regionsync.commit", **{"regionsync.event_id": accepted.event.id}):
            await asyncio.shield(accepted.durable)  # the group commit holding the event
        if slot is not None:
            slot.release()
        if one_remote:
            await self._wait_remote(accepted.seq)

    async def _wait_remote(self, seq: int) -> None:
        """Ack policy ``one-remote``: wait until a peer acknowledged our record ``seq``."""
        opts = self.settings.ingest

        def held_remotely() -> bool:
            return any(p.acked.get(self.writer.actor, 0) >= seq for p in self.peers.values())

        try:
            async with asyncio.timeout(opts.one_remote_timeout_s):
                while not held_remotely():
                    waiter = asyncio.Event()
                    self._ack_waiters[waiter] = None
                    try:
                        await waiter.wait()
                    finally:
                        self._ack_waiters.pop(waiter, None)
        except TimeoutError:
            if opts.one_remote_fallback_local:
                return
            raise Unavailable(
                "no other region confirmed the event in time; it is stored here and will "
                "be delivered, but retrying is safe (same Idempotency-Key or delivery id)",
                retry_after_s=max(1, round(opts.one_remote_timeout_s)),
                code="not_replicated",
            ) from None

    def notify_ack(self) -> None:
        """A peer acknowledged records: wake ``one-remote`` waiters."""
        for waiter in self._ack_waiters:
            waiter.set()

    def _accept(
        self,
        tenant_id: str,
        event_type: str,
        payload: bytes,
        digest: str,
        idempotency_key: str | None,
        event_id: str | None = None,
        payload_obj: Any = None,
        verdicts: Mapping[str, tuple[Predicate, bool]] | None = None,
    ) -> _Accepted:
        """Build the event, its deliveries (fan-out snapshot; ``verdicts``: filters
        already applied, ``_filters``) and counters; queue them. Call with the write lock
        held."""
        stamp = self.writer.stamp()
        now = stamp.wall_ms
        reg = self.catalog.registry
        event = Event(
            event_id or self.ids.new("evt"), tenant_id, event_type, payload, self.region, now,
            owner_gen=reg.tenant_gen(tenant_id) or "",
        )  # fmt: skip
        batch = WriteBatch(events=[event])
        for eid in self.catalog.index.match(tenant_id, event_type, payload_obj, verdicts):
            ep = self.catalog.registry.endpoint(eid, tenant_id)
            if ep is None:
                continue
            active = not (ep.paused or ep.disabled)
            batch.deliveries.append(
                Delivery(
                    id=self.ids.new("dlv"),
                    event_id=event.id,
                    endpoint_id=ep.id,
                    tenant=tenant_id,
                    status=DeliveryStatus.PENDING if active else DeliveryStatus.SKIPPED,
                    attempts=0,
                    next_attempt_at_ms=now if active else None,
                    region=self.region,
                    created_at_ms=now,
                    updated_at_ms=now,
                    owner_gen=reg.endpoint_gen(ep.id, tenant_id) or "",
                )
            )
        idem = None
        if idempotency_key is not None:
            idem = (tenant_id, idempotency_key, event.id, digest, now, self.region)
            batch.idempotency.append(idem)
            self.idempotency.remember(idem)
        fresh = [d for d in batch.deliveries if d.status is DeliveryStatus.PENDING]
        pending = len(fresh)
        self.queue.count(tenant_id, pending)
        # usage counters move once per group commit, not per event (WritePath._before_commit)
        batch.usage[(tenant_id, "events_published")] = 1
        if pending:
            batch.usage[(tenant_id, "backlog")] = pending
        durable = self.writer.commit_local(
            "event", stamp, {}, batch, event=event, idempotency=idem,
            deliveries=batch.deliveries,  # the fan-out snapshot, so any region can deliver
        )  # fmt: skip
        self._pending_events[event.id] = durable
        if event_id is not None:  # a client's id: ``_publish`` finds it under the lock
            self._client_ids[event.id] = None
            while len(self._client_ids) > _CLIENT_IDS_KEPT:
                del self._client_ids[next(iter(self._client_ids))]
            durable.add_done_callback(lambda f: self._forget_failed(f, event.id))
        if pending:
            durable.add_done_callback(lambda f: _hand_over(f, self.queue, fresh, event))
        self.writer.telemetry.remember_current(event.id)  # its attempts continue the trace
        durable.add_done_callback(lambda _f: self._pending_events.pop(event.id, None))
        return _Accepted(event, durable, self.writer.version_vector[self.writer.actor])

    def _forget_failed(self, durable: asyncio.Future[None], event_id: str) -> None:
        """A client's id whose commit failed is not held: a retry may accept it anew."""
        if durable.cancelled() or durable.exception() is not None:
            self._client_ids.pop(event_id, None)

    async def purge_idempotency(self, batch: int = 5000) -> int:
        """Forget Idempotency-Keys older than the TTL (``IdempotencyKeys.expire``; by
        creation time, so every region forgets a key at the same moment)."""
        return await self.idempotency.expire(self.clock.wall_ms() - self._ttl_ms, batch)

    async def get_event(self, tenant_id: str, event_id: str) -> tuple[Event, list[Delivery]]:
        """The event with its deliveries; NotFound unless it belongs to the live tenant's
        generation (an event of a deleted tenant id stays gone after re-creation)."""
        self.catalog.tenant(tenant_id)
        event = await self.store.get_event(event_id)
        if event is None or not self.catalog.event_visible(tenant_id, event):
            raise NotFound(f"no event {event_id!r}", field="event")
        return event, await self.store.deliveries_of_event(event_id)
