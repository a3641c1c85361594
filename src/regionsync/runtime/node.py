"""One regionsync node: the registry, the delta log, ingest, and their background tasks.

The node never touches a socket, a file or the system clock itself: it is wired from the
ports (Clock, Store, PeerTransport, Sender, Resolver, Rng, IdSource), so the simulator and
the production CLI run this same code. Local writes are serialized by one lock, stamped by
the HLC, and committed with their delta record in group commits (runtime/commit.py); a
caller is answered only once its commit is durable.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from crdt import CRDT, HLC, ClockDriftError, Timestamp

from ..config import Settings
from ..core.backpressure import Admission, Pressure, admit, observe, priority_for
from ..core.filters import explain
from ..core.hashtree import HashTree
from ..core.health import Health, HealthPolicy
from ..core.health import step as health_step
from ..core.matching import SubscriptionIndex
from ..core.model import Delivery, DeliveryStatus, Event, Record, WriteBatch, delivery_join
from ..core.records import Decoded, decode_body, encode_body
from ..core.registry import EndpointView, Registry, TenantView
from ..core.signing import make_secret
from ..core.sources import (
    ACK_POLICIES,
    SourceConfig,
    check_source_fields,
    event_id_for,
    verify,
)
from ..core.urlguard import address_allowed, parse_host_literal, parse_networks, validate_url
from ..core.validate import check_endpoint_fields, check_event_type, check_id
from ..errors import (
    Conflict,
    MalformedRecord,
    NotFound,
    TooManyRequests,
    Unavailable,
    Unprocessable,
)
from .ports import Clock, IdSource, PeerTransport, Resolver, Rng, Sender, Store

__all__ = ["Node", "PeerStatus"]

log = logging.getLogger("regionsync.node")

_MAX_HELD = 100_000
SOURCE_CONFIG_FIELDS = (
    "id", "tenant", "kind", "secret", "priority", "ack_policy", "header", "algorithm",
    "encoding", "prefix", "event_type_from", "id_from", "default_event_type",
)  # fmt: skip  # out-of-order records buffered per node before dropping


@dataclass(frozen=True, slots=True)
class _Accepted:
    """An accepted event: its durability future, its record's sequence number and how
    many pending deliveries it fanned out to."""

    event: Event
    durable: asyncio.Future[None]
    seq: int
    pending: int


@dataclass
class Job:
    """A recovery job (``recover`` or ``replay-missing``) and its progress."""

    id: str
    tenant: str
    endpoint_id: str
    kind: str
    since_ms: int
    status: str  # running | succeeded | failed
    done: int = 0
    error: str | None = None
    started_at_ms: int = 0
    finished_at_ms: int | None = None


@dataclass
class PeerStatus:
    """Replication state towards one peer, as ``/v1/cluster`` shows it."""

    region: str
    address: str
    connected: bool = False
    actor: str | None = None  # the peer's own actor, from its Hello
    acked: dict[str, int] = field(default_factory=dict)
    last_ack_at_ms: int | None = None
    last_error: str | None = None


class Node:
    """A region's node. Construct with adapters, ``await start()``, ``await stop()``.

    Public coroutine methods are the operations of the HTTP API; they raise
    ``regionsync.errors.ClientError`` subclasses for bad input or missing objects.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        clock: Clock,
        rng: Rng,
        ids: IdSource,
        transport: PeerTransport,
        sender: Sender,
        resolver: Resolver,
    ):
        self.settings = settings
        self.region = settings.region
        self.store, self.clock, self.rng, self.ids = store, clock, rng, ids
        self.transport, self.sender, self.resolver = transport, sender, resolver
        self.allow_networks = parse_networks(settings.delivery.allow_private_networks)
        self.hlc = HLC(max_drift_ms=settings.replication.max_drift_ms)
        self.registry = Registry()
        self.version_vector: dict[str, int] = {}
        self.incarnation = 0
        self.actor = ""
        self.peers = {p.region: PeerStatus(p.region, p.address) for p in settings.peers}
        self.counters: dict[str, int] = {
            "records_rejected": 0,
            "clock_drift": 0,
            "log_truncated": 0,
            "state_rejected": 0,
            "anti_entropy_items": 0,  # state items merged here by repairs
            "anti_entropy_passes": 0,  # repairs this node ran towards a peer
        }
        self.write_lock = asyncio.Lock()
        self._held: dict[str, dict[int, Record]] = {}
        self._pending_events: dict[str, asyncio.Future[None]] = {}  # accepted, not durable
        self.health: dict[str, Health] = {}  # endpoint id -> this region's view of it
        self.jobs: dict[str, Job] = {}
        self.idempotency: dict[tuple[str, str], tuple[str, str, str, int]] = {}
        self.durable_vv: dict[str, int] = {}
        self.log_floor: dict[str, int] = {}  # origin -> highest seq truncated from the log
        self.backlog = 0  # pending deliveries owned by this region
        self.pressure: Pressure | None = None
        self.ingest_counts: dict[tuple[str, str], int] = {}  # (admitted|shed, priority)
        self.last_retry_after_s = 0
        self._ack_waiters: dict[asyncio.Event, None] = {}  # ordered: deterministic wake-ups
        self._log_waiters: dict[asyncio.Event, None] = {}  # ordered: deterministic wake-ups
        self._tasks: list[asyncio.Task[None]] = []
        self.delivery_wake = asyncio.Event()
        self.started = False

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the store, load state, start serving peers, replicating and delivering."""
        from .commit import GroupCommitter
        from .delivery import DeliveryWorker
        from .replication import PeerLink, serve_stream

        info = await self.store.open(self.region, new_incarnation=self.clock.wall_ms())
        self.incarnation = info.incarnation
        self.actor = f"{self.region}:{self.incarnation}"
        self.registry = Registry.from_bytes(await self.store.load_registry())
        self._rebuild_index()
        self.version_vector = await self.store.load_version_vector()
        self.durable_vv = dict(self.version_vector)
        self.log_floor = await self.store.load_log_floor()
        self.idempotency = await self._load_idempotency()
        self.backlog = (await self.store.counts(self.region))["deliveries_pending"]
        self.committer = GroupCommitter(
            self.store,
            max_batches=self.settings.ingest.commit_max_batches,
            linger_s=self.settings.ingest.commit_linger_ms / 1000,
            on_commit=self._on_commit,
            on_failure=self._on_commit_failure,
        )
        self._tasks.append(asyncio.create_task(self.committer.run(), name="committer"))
        own_seq = self.version_vector.get(self.actor, 0)
        if own_seq:
            # resume the HLC from this actor's last stamp (other origins skipped)
            skip = {o: 1 << 62 for o in self.version_vector}
            last = await self.store.records_after({**skip, self.actor: own_seq - 1}, 1)
            if last:  # truncation keeps an actor's last own record, unless forced
                self.hlc = HLC(self.settings.replication.max_drift_ms, Timestamp(*last[0].hlc))
        log.info(
            "node %s started (actor %s, %s store)",
            self.region,
            self.actor,
            "fresh" if info.fresh else "existing",
        )
        await self.transport.serve(lambda stream: serve_stream(self, stream))
        self._tasks.append(asyncio.create_task(self._purge_loop(), name="purge"))
        self._tasks.append(asyncio.create_task(self._truncate_loop(), name="truncate"))
        self.delivery = DeliveryWorker(self)
        self._tasks.append(asyncio.create_task(self.delivery.run(), name="delivery"))
        for peer in self.settings.peers:
            link = PeerLink(self, self.peers[peer.region])
            self._tasks.append(asyncio.create_task(link.run(), name=f"peer-{peer.region}"))
        self.started = True

    async def stop(self) -> None:
        """Stop background tasks and the transport, then close the store."""
        self.started = False
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.transport.stop()
        async with self.write_lock:
            await self.store.close()

    async def _load_idempotency(self) -> dict[tuple[str, str], tuple[str, str, str, int]]:
        rows = await self.store.load_idempotency()
        return {(t, k): (e, d, r, at) for t, k, e, d, at, r in rows}

    def _rebuild_index(self) -> None:
        self.index = SubscriptionIndex()
        for tenant in self.registry.tenant_ids():
            for view in self.registry.endpoints(tenant):
                self._index_upsert(view)

    def _index_upsert(self, view: EndpointView) -> None:
        try:
            self.index.upsert(view)
        except Unprocessable as exc:  # validated at its origin; never expected here
            log.error("endpoint %s has an unusable filter or pattern: %s", view.id, exc)
            self.index.remove(view.id)

    def _reindex(self, changed: Mapping[str, CRDT]) -> None:
        """Bring the subscription index up to date with changed registry keys."""
        if "tenants" in changed:
            self._rebuild_index()  # tenants come and go rarely
            return
        ids: set[str] = set()
        for key in changed:
            kind, _, rest = key.partition("/")
            if kind == "e":
                ids.add(rest.split("/", 1)[0])
            elif kind == "t" and rest.endswith("/endpoints"):
                tenant = rest.split("/", 1)[0]
                ids.update(self.registry.endpoint_ids(tenant))
                ids.update(self.index.endpoints_of(tenant))
        for eid in ids:
            view = self.registry.endpoint(eid)
            if view is None:
                self.index.remove(eid)
            else:
                self._index_upsert(view)

    def _on_commit(self, batch: WriteBatch) -> None:
        for origin, seq in batch.version_vector.items():
            self.durable_vv[origin] = max(self.durable_vv.get(origin, 0), seq)
        self.notify_log()

    def _on_commit_failure(self, exc: BaseException) -> None:
        # memory ran ahead of the store: go back to what is durable
        task = asyncio.create_task(self._reload())
        self._tasks.append(task)

    async def _reload(self) -> None:
        async with self.write_lock:
            self.registry = Registry.from_bytes(await self.store.load_registry())
            self._rebuild_index()
            self.version_vector = await self.store.load_version_vector()
            self.durable_vv = dict(self.version_vector)
            self.idempotency = await self._load_idempotency()
            self._held.clear()
        log.warning("state reloaded from the store after a failed commit")

    # -- write path ----------------------------------------------------------------------

    def stamp(self) -> Timestamp:
        return self.hlc.now(self.clock.wall_ms())

    def commit_local(
        self,
        kind: str,
        stamp: Timestamp,
        deltas: Mapping[str, CRDT],
        batch: WriteBatch | None = None,
        event: Event | None = None,
        delivery: Delivery | None = None,
        idempotency: tuple[str, str, str, str, int, str] | None = None,
    ) -> asyncio.Future[None]:
        """Apply ``deltas`` in memory and queue them, with a new own record, for the next
        group commit. Call with the write lock held; await the returned future after
        releasing it (it resolves once the change is durable)."""
        batch = batch or WriteBatch()
        changed = self.registry.apply(deltas)
        if changed:
            self._reindex(changed)
        seq = self.version_vector.get(self.actor, 0) + 1
        body = encode_body(dict(deltas), event, delivery, idempotency)
        batch.records.append(Record(self.actor, seq, kind, body, (stamp.wall_ms, stamp.logical)))
        batch.version_vector[self.actor] = seq
        batch.registry.update({k: v.to_bytes() for k, v in changed.items()})
        self.version_vector[self.actor] = seq
        return self.committer.submit(batch)

    def notify_log(self) -> None:
        """Wake every replication link: the log has new records."""
        for ev in self._log_waiters:
            ev.set()

    def log_waiter(self) -> asyncio.Event:
        ev = asyncio.Event()
        self._log_waiters[ev] = None
        return ev

    def drop_log_waiter(self, ev: asyncio.Event) -> None:
        self._log_waiters.pop(ev, None)

    # -- tenants -------------------------------------------------------------------------

    async def create_tenant(
        self, tenant_id: str | None, name: Any, ack_policy: Any = "local"
    ) -> TenantView:
        """Create a tenant; ``ack_policy`` is ``local`` or ``one-remote`` (see publish)."""
        if tenant_id is not None:
            check_id(tenant_id, "id")
        if not isinstance(name, str) or not 1 <= len(name) <= 256:
            raise Unprocessable("must be a string of 1..256 characters", field="name")
        if ack_policy not in ACK_POLICIES:
            raise Unprocessable(f"must be one of {list(ACK_POLICIES)}", field="ack_policy")
        async with self.write_lock:
            tid = tenant_id or self.ids.new("ten")
            if self.registry.tenant(tid) is not None:
                raise Conflict(f"tenant {tid!r} exists", field="id", code="exists")
            stamp = self.stamp()
            deltas = self.registry.create_tenant(
                tid, name, stamp.wall_ms, self.actor, stamp, ack_policy
            )
            durable = self.commit_local("registry", stamp, deltas)
        await durable
        view = self.registry.tenant(tid)
        assert view is not None
        return view

    def tenant(self, tenant_id: str) -> TenantView:
        view = self.registry.tenant(tenant_id)
        if view is None:
            raise NotFound(f"no tenant {tenant_id!r}", field="tenant")
        return view

    def require_tenant(self, tenant_id: str) -> None:
        """NotFound unless the tenant is live (the cheap check of the ingest path)."""
        if not self.registry.has_tenant(tenant_id):
            raise NotFound(f"no tenant {tenant_id!r}", field="tenant")

    async def delete_tenant(self, tenant_id: str) -> None:
        async with self.write_lock:
            self.tenant(tenant_id)
            stamp = self.stamp()
            durable = self.commit_local("registry", stamp, self.registry.delete_tenant(tenant_id))

        await durable

    # -- endpoints -----------------------------------------------------------------------

    async def _check_destination(self, url: str) -> None:
        """422 if ``url``'s host resolves to an address deliveries may not reach."""
        host, port = validate_url(url)
        literal = parse_host_literal(host)  # judged by the address it denotes, no resolver
        if literal is not None:
            addrs = [literal]
        else:
            try:
                addrs = [ipaddress.ip_address(a) for a in await self.resolver.resolve(host, port)]
            except (OSError, UnicodeError) as exc:
                raise Unprocessable(
                    f"host {host!r} does not resolve: {exc}", field="url", code="invalid_url"
                ) from None
        bad = [str(a) for a in addrs if not address_allowed(a, self.allow_networks)]
        if bad or not addrs:
            raise Unprocessable(
                f"url resolves to a non-public address ({', '.join(bad)}); list its network "
                "in delivery.allow_private_networks to allow it",
                field="url",
                code="forbidden_address",
            )
        if literal is not None and literal.version == 4 and str(literal) != host:
            # octal, hex, integer and short forms: httpx will not send to them
            raise Unprocessable(f"write the address as {literal}", field="url", code="invalid_url")

    async def create_endpoint(self, tenant_id: str, body: Mapping[str, Any]) -> EndpointView:
        """Create an endpoint from an API body (fields of shared/API.md)."""
        allowed = {
            "id", "url", "event_types", "filter", "secret", "description",
            "rate_limit_per_s", "max_in_flight", "headers", "paused",
        }  # fmt: skip
        unknown = sorted(set(body) - allowed)
        if unknown:
            raise Unprocessable("unknown field", field=unknown[0])
        if "url" not in body:
            raise Unprocessable("is required", field="url")
        fields = check_endpoint_fields(body)
        await self._check_destination(fields["url"])
        event_types = fields.pop("event_types", None) or []
        eid = fields.pop("id", None)
        if eid is not None:
            check_id(eid, "id")
        fields.setdefault("secret", make_secret(self.rng.randbytes(32)))
        defaults = {
            "filter": None,
            "description": "",
            "rate_limit_per_s": 50,
            "max_in_flight": 16,
            "headers": {},
            "paused": False,
            "disabled": False,
        }
        async with self.write_lock:
            self.tenant(tenant_id)
            eid = eid or self.ids.new("ep")
            if self.registry.endpoint(eid) is not None:
                raise Conflict(f"endpoint {eid!r} exists", field="id", code="exists")
            stamp = self.stamp()
            deltas = self.registry.create_endpoint(
                eid, tenant_id, {**defaults, **fields}, event_types, stamp.wall_ms,
                self.actor, stamp,
            )  # fmt: skip
            durable = self.commit_local("registry", stamp, deltas)
        await durable
        return self.endpoint(tenant_id, eid)

    def endpoint(self, tenant_id: str, endpoint_id: str) -> EndpointView:
        self.tenant(tenant_id)
        view = self.registry.endpoint(endpoint_id, tenant_id)
        if view is None:
            raise NotFound(f"no endpoint {endpoint_id!r}", field="endpoint")
        return view

    def endpoints(self, tenant_id: str) -> list[EndpointView]:
        self.tenant(tenant_id)
        return self.registry.endpoints(tenant_id)

    async def patch_endpoint(
        self, tenant_id: str, endpoint_id: str, body: Mapping[str, Any]
    ) -> EndpointView:
        """Change fields; ``event_types_add``/``event_types_remove`` are OR-Set operations.

        ``paused``: manual pause/resume; ``disabled: false`` re-enables a disabled
        endpoint. Resuming or re-enabling resets the failure counter. A new ``secret``
        (or ``null`` for a generated one) rotates: the old one keeps signing for
        ``delivery.secret_overlap_s``.
        """
        allowed = {
            "url", "event_types", "event_types_add", "event_types_remove", "filter", "secret",
            "description", "rate_limit_per_s", "max_in_flight", "headers", "paused",
            "disabled",
        }  # fmt: skip
        unknown = sorted(set(body) - allowed)
        if unknown:
            raise Unprocessable("unknown field", field=unknown[0])
        if "secret" in body and body["secret"] is None:
            body = {**body, "secret": make_secret(self.rng.randbytes(32))}
        fields = check_endpoint_fields(body)
        if "url" in fields:
            await self._check_destination(fields["url"])
        add = fields.pop("event_types_add", [])
        remove = fields.pop("event_types_remove", [])
        async with self.write_lock:
            old = self.endpoint(tenant_id, endpoint_id)
            stamp = self.stamp()
            if fields.get("paused") is False or fields.get("disabled") is False:
                fields["failing_since"] = None  # resume / re-enable resets the counter
                self.health.pop(endpoint_id, None)
            if fields.get("disabled") is True:
                fields["failing_since"] = None
            if "secret" in fields and fields["secret"] != old.secret:
                fields["secret_previous"] = old.secret
                fields["secret_rotated_at"] = stamp.wall_ms
            deltas = self.registry.patch_endpoint(
                endpoint_id, fields, add, remove, stamp.wall_ms, self.actor, stamp
            )
            durable = self.commit_local("registry", stamp, deltas)
        await durable
        return self.endpoint(tenant_id, endpoint_id)

    async def delete_endpoint(self, tenant_id: str, endpoint_id: str) -> None:
        async with self.write_lock:
            self.endpoint(tenant_id, endpoint_id)
            stamp = self.stamp()
            deltas = self.registry.delete_endpoint(endpoint_id, tenant_id)
            durable = self.commit_local("registry", stamp, deltas)

        await durable

    def health_deltas(
        self, endpoint_id: str, event: str | None, now_ms: int, policy: HealthPolicy
    ) -> dict[str, CRDT]:
        """Apply one attempt's health input; registry deltas if the replicated state
        (failing since / disabled) changed. Call with the write lock held."""
        view = self.registry.endpoint(endpoint_id)
        if event is None or view is None:
            return {}
        before = self.health.get(endpoint_id)
        if before is None:
            state = "disabled" if view.disabled else "paused" if view.paused else (
                "failing" if view.failing_since_ms is not None else "active"
            )  # fmt: skip
            before = Health(state, failing_since_ms=view.failing_since_ms)
        after = health_step(before, event, now_ms, policy)
        self.health[endpoint_id] = after
        fields: dict[str, Any] = {}
        if after.state == "disabled" and not view.disabled:
            fields = {"disabled": True, "failing_since": None}
            log.warning("endpoint %s disabled (%s)", endpoint_id, event)
        elif after.state == "failing" and view.failing_since_ms is None:
            fields = {"failing_since": after.failing_since_ms}
        elif after.state == "active" and view.failing_since_ms is not None:
            fields = {"failing_since": None}
        if not fields:
            return {}
        stamp = self.stamp()
        return self.registry.patch_endpoint(
            endpoint_id, fields, (), (), stamp.wall_ms, self.actor, stamp
        )

    # -- recovery --------------------------------------------------------------------------

    async def retry_delivery(self, tenant_id: str, delivery_id: str) -> Delivery:
        """Re-send one delivery now, whatever its status: a new generation owned by this
        region, same event, so the same ``webhook-id``."""
        self.tenant(tenant_id)
        d = await self.store.get_delivery(delivery_id)
        if d is None or d.tenant != tenant_id:
            raise NotFound(f"no delivery {delivery_id!r}", field="delivery")
        async with self.write_lock:
            new, durable = self._regenerate([d])
        await durable
        self.delivery_wake.set()
        return new[0]

    def _regenerate(self, rows: list[Delivery]) -> tuple[list[Delivery], asyncio.Future[None]]:
        """New pending generations of ``rows`` owned here, replicated. Lock held."""
        now = self.clock.wall_ms()
        new = [
            replace(
                d,
                status=DeliveryStatus.PENDING,
                next_attempt_at_ms=now,
                attempts=0,
                region=self.region,
                updated_at_ms=now,
                generation=d.generation + 1,
            )
            for d in rows
        ]
        self.backlog += len(new)
        deltas: dict[str, CRDT] = {}
        for tenant in {d.tenant for d in new}:
            n = sum(d.tenant == tenant for d in new)
            deltas.update(self.registry.count(tenant, "backlog", n, self.actor))
        stamp = self.stamp()
        batch = WriteBatch(deliveries=new)
        # one record per delivery keeps every record's body a single delivery
        durable = self.commit_local("registry", stamp, deltas, batch)
        for d in new:
            durable = self.commit_local("delivery", self.stamp(), {}, delivery=d)
        return new, durable

    def start_job(self, tenant_id: str, endpoint_id: str, kind: str, since_ms: int) -> Job:
        """Start a background recovery job: ``recover`` re-sends dead deliveries of an
        endpoint since ``since_ms``, ``replay-missing`` the skipped ones."""
        self.endpoint(tenant_id, endpoint_id)
        job = Job(self.ids.new("job"), tenant_id, endpoint_id, kind, since_ms, "running",
                  started_at_ms=self.clock.wall_ms())  # fmt: skip
        self.jobs[job.id] = job
        task = asyncio.create_task(self._run_job(job), name=f"job-{job.id}")
        self._tasks.append(task)
        return job

    async def _run_job(self, job: Job) -> None:
        status = DeliveryStatus.DEAD if job.kind == "recover" else DeliveryStatus.SKIPPED
        cursor = None
        try:
            while True:
                rows = await self.store.list_deliveries(
                    job.endpoint_id, status, job.since_ms, cursor, 200
                )
                if not rows:
                    break
                cursor = rows[-1].id
                async with self.write_lock:
                    _, durable = self._regenerate(rows)
                await durable
                job.done += len(rows)
                self.delivery_wake.set()
            job.status = "succeeded"
        except Exception as exc:
            log.exception("job %s failed", job.id)
            job.status, job.error = "failed", str(exc)
        job.finished_at_ms = self.clock.wall_ms()

    async def purge_attempts(self) -> int:
        """Delete attempts older than the retention, in small batches (ingest goes on)."""
        cutoff = self.clock.wall_ms() - int(self.settings.delivery.attempt_retention_s * 1000)
        total = 0
        while (n := await self.store.purge_attempts(cutoff, 1000)) > 0:
            total += n
            await asyncio.sleep(0)
        return total

    # -- ingest --------------------------------------------------------------------------

    def admission(self, priority: str) -> Admission:
        """Backpressure decision for one ingest of ``priority`` (core.backpressure)."""
        opts = self.settings.ingest
        self.pressure = observe(
            self.pressure,
            self.backlog,
            self.committer.queued,
            opts.backlog_capacity,
            self.clock.monotonic(),
            opts.pressure_tau_s,
        )
        decision = admit(self.pressure, priority, self.rng.uniform(-1.0, 1.0))
        key = "admitted" if decision.admitted else "shed"
        self.ingest_counts[(key, priority)] = self.ingest_counts.get((key, priority), 0) + 1
        self.last_retry_after_s = decision.retry_after_s or 0
        return decision

    def _admit_or_raise(self, priority: str) -> None:
        decision = self.admission(priority)
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
    ) -> tuple[Event, bool]:
        """Accept an event: durable locally (with its deliveries) before this returns.

        ``payload`` is the JSON bytes to deliver (``payload_obj`` the same parsed, if the
        caller has it; filters read it). Returns ``(event, created)``; a repeat
        with the same ``Idempotency-Key`` and body (sent to any region, once replicated)
        returns the original event and False. Raises NotFound (tenant), Unprocessable
        (event_type), Conflict (key reused with another body), TooManyRequests /
        Unavailable (backpressure, or ``one-remote`` not confirmed in time).
        """
        check_event_type(event_type)
        self.require_tenant(tenant_id)
        priority = priority_for(event_type, self.settings.ingest.event_type_priorities)
        self._admit_or_raise(priority)
        digest = ""  # only an Idempotency-Key needs the body's digest
        if idempotency_key is not None:
            digest = hashlib.sha256(event_type.encode() + b"\0" + payload).hexdigest()
        async with self.write_lock:
            self.require_tenant(tenant_id)
            found = None
            if idempotency_key is not None:
                found = self._idempotent(tenant_id, idempotency_key)
            if found is None:
                accepted = self._accept(
                    tenant_id, event_type, payload, digest, idempotency_key,
                    payload_obj=json.loads(payload) if payload_obj is None else payload_obj,
                )  # fmt: skip
            else:
                event_id, seen, region, received_at_ms = found
                if seen != digest:
                    raise Conflict(
                        "Idempotency-Key was used with another body",
                        field="Idempotency-Key",
                        code="idempotency_conflict",
                    )
                original = Event(event_id, tenant_id, event_type, payload, region, received_at_ms)
                durable = self._pending_events.get(event_id)
        if found is not None:
            if durable is not None:  # the original is not durable yet: answer when it is
                await asyncio.shield(durable)
            return original, False
        await self._settle(accepted, self.registry.ack_policy(tenant_id) == "one-remote")
        return accepted.event, True

    def _idempotent(self, tenant_id: str, key: str) -> tuple[str, str, str, int] | None:
        found = self.idempotency.get((tenant_id, key))
        ttl_ms = int(self.settings.ingest.idempotency_ttl_s * 1000)
        if found is not None and found[3] + ttl_ms < self.clock.wall_ms():
            return None  # expired: the key may be used again
        return found

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
        fields = self.registry.source(source_id)
        if fields is None:
            raise NotFound(f"no source {source_id!r}", field="source")
        src = SourceConfig(**{k: fields[k] for k in SOURCE_CONFIG_FIELDS})
        inbound = verify(src, headers, body, self.clock.wall_ms() // 1000)
        event_id = event_id_for(source_id, inbound.delivery_id)
        existing = await self.store.get_event(event_id)
        if existing is not None:
            return existing, False
        priority = src.priority
        self._admit_or_raise(priority)
        payload = inbound.text  # delivered as the sender wrote it (core.jsontext)
        digest = hashlib.sha256(inbound.event_type.encode() + b"\0" + payload.encode()).hexdigest()
        async with self.write_lock:
            self.require_tenant(src.tenant)
            pending = self._pending_events.get(event_id)
            if pending is None:
                accepted = self._accept(
                    src.tenant, inbound.event_type, payload.encode(), digest, None, event_id,
                    payload_obj=inbound.payload,
                )  # fmt: skip
        if pending is not None:
            await asyncio.shield(pending)
            stored = await self.store.get_event(event_id)
            assert stored is not None
            return stored, False
        one_remote = "one-remote" in (src.ack_policy, self.registry.ack_policy(src.tenant))
        await self._settle(accepted, one_remote)
        return accepted.event, True

    async def _settle(self, accepted: _Accepted, one_remote: bool) -> None:
        """After ``_accept``: wait until durable, wake the delivery worker if the event
        fanned out, and for ``one-remote`` until a peer holds it."""
        await asyncio.shield(accepted.durable)
        if accepted.pending:
            self.delivery_wake.set()
        if one_remote:
            await self._wait_remote(accepted.seq)

    async def _wait_remote(self, seq: int) -> None:
        """Ack policy ``one-remote``: wait until a peer acknowledged our record ``seq``."""
        opts = self.settings.ingest

        def held_remotely() -> bool:
            return any(p.acked.get(self.actor, 0) >= seq for p in self.peers.values())

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
    ) -> _Accepted:
        """Build the event, its deliveries (fan-out snapshot) and counters; queue them.
        Call with the write lock held."""
        stamp = self.stamp()
        now = stamp.wall_ms
        event = Event(
            event_id or self.ids.new("evt"), tenant_id, event_type, payload, self.region, now
        )
        batch = WriteBatch(events=[event])
        for eid in self.index.match(tenant_id, event_type, payload_obj):
            ep = self.registry.endpoint(eid, tenant_id)
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
                )
            )
        idem = None
        if idempotency_key is not None:
            idem = (tenant_id, idempotency_key, event.id, digest, now, self.region)
            batch.idempotency.append(idem)
            self.idempotency[(tenant_id, idempotency_key)] = (event.id, digest, self.region, now)
        pending = sum(d.status is DeliveryStatus.PENDING for d in batch.deliveries)
        self.backlog += pending
        deltas = {
            **self.registry.count(tenant_id, "events_published", 1, self.actor),
            **self.registry.count(tenant_id, "backlog", pending, self.actor),
        }
        durable = self.commit_local("event", stamp, deltas, batch, event=event, idempotency=idem)
        self._pending_events[event.id] = durable
        durable.add_done_callback(lambda _f: self._pending_events.pop(event.id, None))
        return _Accepted(event, durable, self.version_vector[self.actor], pending)

    async def purge_idempotency(self) -> int:
        """Forget Idempotency-Keys older than the TTL, in memory and in the store.

        Expiry is by creation time, so every region forgets a key at the same moment."""
        cutoff = self.clock.wall_ms() - int(self.settings.ingest.idempotency_ttl_s * 1000)
        for k in [k for k, v in self.idempotency.items() if v[3] < cutoff]:
            del self.idempotency[k]
        return await self.store.purge_idempotency(cutoff)

    async def _purge_loop(self) -> None:
        interval = min(self.settings.ingest.idempotency_ttl_s / 4, 3600.0)
        while True:
            await self.clock.sleep(interval)
            try:
                await self.purge_idempotency()
                await self.purge_attempts()
            except Exception:
                log.exception("idempotency purge failed; retrying later")

    def test_filter(self, tenant_id: str, endpoint_id: str, payload: Any) -> dict[str, Any]:
        """Would ``payload`` pass the endpoint's filter? ``{matches, failed_clause}``."""
        view = self.endpoint(tenant_id, endpoint_id)
        matched, failed = explain(view.filter, payload)
        return {"matches": matched, "failed_clause": failed}

    # -- sources -------------------------------------------------------------------------

    async def create_source(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Register an inbound source (``POST /v1/sources``); returns its fields."""
        fields = check_source_fields(body)
        sid = body.get("id")
        if sid is not None:
            check_id(sid, "id")
        async with self.write_lock:
            self.tenant(fields["tenant"])
            sid = sid or self.ids.new("src")
            if self.registry.source(sid) is not None:
                raise Conflict(f"source {sid!r} exists", field="id", code="exists")
            stamp = self.stamp()
            deltas = self.registry.create_source(sid, fields, stamp.wall_ms, self.actor, stamp)
            durable = self.commit_local("registry", stamp, deltas)
        await durable
        return self.source(sid)

    def source(self, source_id: str) -> dict[str, Any]:
        fields = self.registry.source(source_id)
        if fields is None:
            raise NotFound(f"no source {source_id!r}", field="source")
        return fields

    async def delete_source(self, source_id: str) -> None:
        async with self.write_lock:
            self.source(source_id)
            stamp = self.stamp()
            durable = self.commit_local("registry", stamp, self.registry.delete_source(source_id))
        await durable

    async def get_event(self, tenant_id: str, event_id: str) -> tuple[Event, list[Delivery]]:
        self.tenant(tenant_id)
        event = await self.store.get_event(event_id)
        if event is None or event.tenant != tenant_id:
            raise NotFound(f"no event {event_id!r}", field="event")
        return event, await self.store.deliveries_of_event(event_id)

    # -- remote records ------------------------------------------------------------------

    async def apply_records(self, records: list[Record]) -> list[MalformedRecord]:
        """Merge records from a peer, in per-origin sequence order, in one commit.

        A record whose predecessors from its origin are missing is held back until they
        arrive (causal delivery per origin); duplicates are ignored. A record that fails to
        decode, or whose HLC stamp is too far ahead (``clock_drift``), is rejected, logged
        and never merged; later records of its origin wait behind it. Returns the rejects.
        """
        rejected: list[MalformedRecord] = []
        async with self.write_lock:
            touched: set[str] = set()
            for r in records:
                if r.origin == self.actor or r.seq <= self.version_vector.get(r.origin, 0):
                    continue
                held = self._held.setdefault(r.origin, {})
                if len(held) < _MAX_HELD:
                    held[r.seq] = r
                    touched.add(r.origin)
            batch = WriteBatch()
            vv = dict(self.version_vector)
            deliveries: dict[str, Delivery] = {}
            for origin in sorted(touched):
                held = self._held[origin]
                while (r := held.get(vv.get(origin, 0) + 1)) is not None:
                    try:
                        await self._apply_one(r, batch, deliveries)
                    except MalformedRecord as exc:
                        log.warning("rejected record: %s", exc)
                        self.counters["records_rejected"] += 1
                        rejected.append(exc)
                        break
                    del held[r.seq]
                    vv[origin] = r.seq
                    batch.records.append(r)
                    batch.version_vector[origin] = r.seq
                if not held:
                    del self._held[origin]
            if not batch:
                return rejected
            batch.deliveries.extend(deliveries.values())
            self.version_vector = vv
            durable = self.committer.submit(batch)
        await durable
        return rejected

    async def _apply_one(
        self, r: Record, batch: WriteBatch, deliveries: dict[str, Delivery]
    ) -> None:
        try:
            decoded = decode_body(r.kind, r.body)
        except ValueError as exc:
            raise MalformedRecord(r.origin, r.seq, str(exc)) from None
        try:
            self.hlc.observe(Timestamp(*r.hlc), self.clock.wall_ms())
        except ClockDriftError as exc:
            self.counters["clock_drift"] += 1
            raise MalformedRecord(r.origin, r.seq, f"clock_drift: {exc}") from None
        await self._merge(decoded, batch, deliveries)

    async def _merge(
        self, decoded: Decoded, batch: WriteBatch, deliveries: dict[str, Delivery]
    ) -> None:
        """Merge validated state into memory and ``batch`` (write lock held)."""
        changed = self.registry.apply(decoded.registry)
        if changed:
            self._reindex(changed)
        batch.registry.update({k: v.to_bytes() for k, v in changed.items()})
        if decoded.event is not None:
            batch.events.append(decoded.event)
        if decoded.idempotency is not None:
            tenant, key, event_id, digest, at, region = decoded.idempotency
            known = self.idempotency.get((tenant, key))
            if known is None or (known[3], known[0]) > (at, event_id):
                # the earliest acceptance wins, in every region alike
                self.idempotency[(tenant, key)] = (event_id, digest, region, at)
            batch.idempotency.append(decoded.idempotency)
        d = decoded.delivery
        if d is not None:
            old = deliveries.get(d.id) or await self.store.get_delivery(d.id)
            if old is not None:
                d = delivery_join(old, d)
            deliveries[d.id] = d

    # -- log truncation and anti-entropy ---------------------------------------------------

    async def _truncate_loop(self) -> None:
        while True:
            await self.clock.sleep(self.settings.replication.truncate_interval_s)
            try:
                await self.truncate_log()
            except Exception:
                log.exception("log truncation failed; retrying later")

    def truncation_point(self) -> dict[str, int]:
        """origin -> seq up to which the log may be truncated now (only origins that move).

        A record goes once every configured peer acknowledged it: the min over peers of
        their acked seq (a peer never heard from has acked nothing, so it blocks
        truncation), capped by what this node holds. The last own record is kept (it
        resumes the HLC after a restart). If the log holds more than
        ``replication.max_log_records``, the oldest records of each origin go anyway, down
        to an equal share per origin; a peer left behind is repaired by anti-entropy.
        """
        opts = self.settings.replication
        held = {o: s - self.log_floor.get(o, 0) for o, s in self.durable_vv.items()}
        share = opts.max_log_records // max(len(held), 1)
        forced = sum(held.values()) > opts.max_log_records
        out: dict[str, int] = {}
        for origin, have in self.durable_vv.items():
            acked = min((p.acked.get(origin, 0) for p in self.peers.values()), default=have)
            upto = min(acked, have)
            if origin == self.actor:
                upto = min(upto, have - 1)
            if forced:
                upto = max(upto, have - share)
            if upto > self.log_floor.get(origin, 0):
                out[origin] = upto
        return out

    async def truncate_log(self) -> int:
        """Delete log records per ``truncation_point``; returns how many were deleted."""
        upto = self.truncation_point()
        if not upto:
            return 0
        n = await self.store.truncate_log(upto)
        for origin, seq in upto.items():
            self.log_floor[origin] = max(self.log_floor.get(origin, 0), seq)
        self.counters["log_truncated"] += n
        return n

    def behind_floor(self, vv: Mapping[str, int]) -> list[str]:
        """Origins whose records a holder of ``vv`` lacks that the log no longer has."""
        return sorted(o for o, f in self.log_floor.items() if vv.get(o, 0) < f)

    async def state_tree(self) -> HashTree:
        """A hash tree (core.hashtree) over this node's state, built now (O(items)): every
        non-empty registry state, every stored event id and every stored delivery."""
        tree = HashTree(self.settings.replication.tree_depth)
        for key, state in self.registry.states().items():
            tree.put("r/" + key, state.to_bytes())
        for event_id in await self.store.list_event_ids():
            tree.put("e/" + event_id, b"")
        for d in await self.store.load_deliveries():
            tree.put("d/" + d.id, encode_body(delivery=d))
        return tree

    async def state_items(self, idents: list[str]) -> list[tuple[str, bytes]]:
        """``(kind, body)`` items carrying the current state of tree items ``idents``;
        registry states are grouped in one item per call, an event carries its
        Idempotency-Keys. Items gone since the tree was built are skipped."""
        states = self.registry.states()
        registry = {i[2:]: states[i[2:]] for i in idents if i[:2] == "r/" and i[2:] in states}
        out: list[tuple[str, bytes]] = []
        if registry:
            out.append(("registry", encode_body(registry=registry)))
        keys: dict[str, list[tuple[str, str, str, str, int, str]]] = {}
        if any(i[:2] == "e/" for i in idents):
            for (tenant, key), (eid, digest, region, at) in self.idempotency.items():
                keys.setdefault(eid, []).append((tenant, key, eid, digest, at, region))
        for ident in idents:
            kind, oid = ident[:2], ident[2:]
            if kind == "e/" and (event := await self.store.get_event(oid)) is not None:
                rows = sorted(keys.get(oid, [])) or [None]
                for row in rows:  # one item per key (usually none or one)
                    out.append(("event", encode_body(event=event, idempotency=row)))
            elif kind == "d/" and (d := await self.store.get_delivery(oid)) is not None:
                out.append(("delivery", encode_body(delivery=d)))
        return out

    async def apply_state(
        self, items: list[tuple[str, bytes]], version_vector: Mapping[str, int] | None = None
    ) -> str | None:
        """Merge anti-entropy state items (see ``state_items``) in one commit.

        Every item is validated first (``decode_body``); if any is malformed nothing is
        merged and the reason is returned. ``version_vector`` (the sender's, when its state
        was taken) raises this node's version vector in the same commit: the caller passes
        it only once every chunk of the pass was merged. Returns None on success.
        """
        try:
            decoded = [decode_body(kind, body) for kind, body in items]
        except ValueError as exc:
            self.counters["state_rejected"] += 1
            log.warning("rejected state chunk: %s", exc)
            return str(exc)
        async with self.write_lock:
            batch = WriteBatch()
            deliveries: dict[str, Delivery] = {}
            for dec in decoded:
                await self._merge(dec, batch, deliveries)
            batch.deliveries.extend(deliveries.values())
            for origin, seq in (version_vector or {}).items():
                if seq > self.version_vector.get(origin, 0):
                    self.version_vector[origin] = seq
                    batch.version_vector[origin] = seq
                    held = self._held.get(origin, {})
                    for s in [s for s in held if s <= seq]:
                        del held[s]
                    if not held:
                        self._held.pop(origin, None)
            if not batch:
                return None
            durable = self.committer.submit(batch)
        await durable
        self.counters["anti_entropy_items"] += len(items)
        if deliveries:
            self.delivery_wake.set()
        return None

    # -- status --------------------------------------------------------------------------

    def records_behind(self, peer: PeerStatus) -> int:
        """Records this node holds that ``peer`` has not acknowledged (its own excluded)."""
        return sum(
            max(seq - peer.acked.get(origin, 0), 0)
            for origin, seq in self.durable_vv.items()
            if origin != peer.actor
        )

    def cluster(self) -> dict[str, Any]:
        """The ``cluster`` object of shared/API.md (times as ms; the API renders them)."""
        now = self.clock.wall_ms()
        return {
            "region": self.region,
            "actor": self.actor,
            "incarnation": self.incarnation,
            "version_vector": dict(sorted(self.durable_vv.items())),
            "log_floor": dict(sorted(self.log_floor.items())),
            "registry_hash": self.registry.state_hash(),
            "peers": [
                {
                    "region": p.region,
                    "address": p.address,
                    "connected": p.connected,
                    "records_behind": self.records_behind(p),
                    "last_ack_at_ms": p.last_ack_at_ms,
                    "seconds_since_ack": None
                    if p.last_ack_at_ms is None
                    else (now - p.last_ack_at_ms) / 1000,
                    "last_error": p.last_error,
                }
                for p in self.peers.values()
            ],
        }
