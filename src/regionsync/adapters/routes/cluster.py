"""Routes of operations: the cluster view, health and readiness probes, metrics."""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import Iterator
from typing import Any

import httpx
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ...config import REGION_PATTERN
from ...core.capabilities import BASELINE
from ...core.model import DeliveryStatus
from ...errors import BadRequest, Unauthorized
from ...runtime.node import Node
from .common import ApiContext, problem, read_no_body, rfc3339

__all__ = ["build"]


def build(ctx: ApiContext) -> APIRouter:
    """``/v1/cluster`` (admin), ``/healthz``, ``/readyz`` and ``/metrics``."""
    router, node = APIRouter(), ctx.node

    @router.get("/v1/cluster")
    async def cluster(request: Request) -> dict[str, Any]:
        ctx.auth.check(request)
        await node.view.registry_hash.ready()  # a first hash of a large registry, off-loop
        c = _dated(node.view.cluster(), {p.region: p.http_url for p in node.settings.peers})
        c["counts"] = await node.store.counts(node.region)
        c["process"] = await node.view.process()
        c["removals"] = node.removals.view()
        return c

    @router.get("/v1/cluster/regions")
    async def regions(request: Request) -> dict[str, Any]:
        """Every region's own view, for one table across the cluster: this node's, then
        each peer's ``/v1/cluster`` asked at the ``http_url`` of its ``[[peers]]`` entry
        with the caller's Authorization (3 s timeout). Per region: ``reached`` (False with
        ``error`` when it has no http_url, cannot be reached or refuses), its
        ``registry_hash``, ``registry_digest`` (None from an earlier release), ``agrees``
        (equal to this node's digest, or hash if either lacks one; for an unreached peer the
        state-digest verdict of this node, None if never compared, with ``digest_at`` and
        ``digest_age_s``: a past verdict, issue 43), ``version_vector`` and
        ``peers_connected``/``peers_total`` of its own links."""
        ctx.auth.check(request)
        return await _regions(node, request.headers.get("authorization"))

    _removal_route(router, ctx)

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        if not node.started:
            return problem(503, "not_ready", "node is starting or stopping")
        if not node.following:
            return problem(503, "not_ready", "this process cannot read its region's records "
                           "(see its log)")  # fmt: skip
        return JSONResponse({"status": "ready"})

    @router.get(
        "/metrics",
        response_class=Response,
        responses={200: {"description": "Prometheus text exposition format",
                         "content": {"text/plain": {"schema": {"type": "string"}}}}},
    )  # fmt: skip
    async def metrics(request: Request) -> Response:
        """Prometheus text format; with ``metrics_token`` set, only for that bearer token
        (401 otherwise)."""
        want = node.settings.metrics_token
        if want is not None:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            ok = scheme.lower() == "bearer" and hmac.compare_digest(
                token.strip().encode(), want.encode()
            )
            if not ok:
                raise Unauthorized("missing or wrong metrics token", field="authorization")
        counts = await node.store.counts(node.region)
        reg = CollectorRegistry(auto_describe=False)
        reg.register(_Snapshot(node, counts))
        reg.register(node.telemetry)  # latency histograms (runtime/telemetry.py)
        return Response(generate_latest(reg), media_type="text/plain; version=0.0.4")

    return router


def _dated(c: dict[str, Any], http_urls: dict[str, str | None]) -> dict[str, Any]:
    """The cluster view with its wall-clock ms as RFC 3339 times and each peer's
    ``http_url``."""
    for p in c["peers"]:
        p["http_url"] = http_urls.get(p["region"])
        p["last_ack_at"] = rfc3339(p.pop("last_ack_at_ms"))
        p["last_digest_at"] = rfc3339(p.pop("last_digest_at_ms"))
        p["last_contact_at"] = rfc3339(p.pop("last_contact_at_ms"))
        for n in p["refused"].values():
            n["last_at"] = rfc3339(n.pop("last_ms"))
    for n in c["refused"].values():
        n["first_at"], n["last_at"] = rfc3339(n.pop("first_ms")), rfc3339(n.pop("last_ms"))
    custody = c["custody"]
    custody["last_heard"] = {r: rfc3339(ms) for r, ms in custody.pop("last_heard_ms").items()}
    custody["fenced_since"] = rfc3339(custody.pop("fenced_since_ms"))
    for rec in custody["records"].values():
        rec["since"] = rfc3339(rec.pop("since_ms"))
    return c


def _removal_route(router: APIRouter, ctx: ApiContext) -> None:
    """``POST /v1/cluster/regions/{name}/removal`` (runtime/removal.py)."""
    node = ctx.node

    @router.post("/v1/cluster/regions/{name}/removal", status_code=201)
    async def remove_region(request: Request, name: str) -> dict[str, Any]:
        """Remove region ``name`` for good (admin): the removal replicates to every region,
        the remaining regions adopt its deliveries for good, its actors' clock entries are
        pruned once every remaining region acknowledged, and a Hello from it with old
        state is refused until it is wiped and re-added (README "Removing a region for
        good"). 404 for an unknown region, 409 for this node's own region, one already
        removed, or while a region's release cannot read removals; 400 for a bad name."""
        ctx.auth.check(request)
        await read_no_body(request, ctx.max_body)
        if not re.fullmatch(REGION_PATTERN, name):
            raise BadRequest(f"{name!r} is not a region name ({REGION_PATTERN})", field="name")
        rec = await node.removals.remove(name)
        return {"region": rec.region, "incarnation": rec.incarnation,
                "removed_at": rfc3339(rec.at_ms), "by": rec.by}  # fmt: skip


async def _regions(node: Node, auth: str | None) -> dict[str, Any]:
    """The rows of ``/v1/cluster/regions``: this node's view, then each peer's, asked with
    the caller's Authorization ``auth``."""
    await node.view.registry_hash.ready()
    mine = node.view.cluster()
    headers = {"authorization": auth} if auth else {}

    def row(c: dict[str, Any]) -> dict[str, Any]:
        return {
            "region": c["region"], "reached": True, "error": None,
            "registry_hash": c["registry_hash"],
            "registry_digest": c.get("registry_digest"),  # absent before issue 42
            "agrees": _same_registry(c, mine),
            "version_vector": c["version_vector"],
            "peers_connected": sum(1 for p in c["peers"] if p["connected"]),
            "peers_total": len(c["peers"]),
            "digest_at": None, "digest_age_s": None,  # compared now, not by a past digest
        }  # fmt: skip

    async def ask(client: httpx.AsyncClient, peer: Any, status: Any) -> dict[str, Any]:
        at = status.last_digest_at_ms  # on the raw clock, as links keep it
        age = None if at is None else round(max(node.clock.wall_ms() - at, 0) / 1000, 1)
        out = {"region": peer.region, "http_url": peer.http_url, "reached": False,
               "registry_hash": None, "registry_digest": None,
               "agrees": status.state_agrees, "version_vector": None,
               "peers_connected": None, "peers_total": None,
               "digest_at": rfc3339(at), "digest_age_s": age}  # fmt: skip
        if peer.http_url is None:
            return {**out, "error": "no http_url in its [[peers]] entry"}
        try:
            resp = await client.get(f"{peer.http_url}/v1/cluster", headers=headers)
        except httpx.HTTPError as exc:
            return {**out, "error": f"cannot reach {peer.http_url}: {type(exc).__name__}"}
        if resp.status_code != 200:
            return {**out, "error": f"{peer.http_url} answered {resp.status_code}"}
        try:
            return {**row(resp.json()), "http_url": peer.http_url}
        except (ValueError, KeyError, TypeError):
            return {**out, "error": f"{peer.http_url} answered no cluster view"}

    async with httpx.AsyncClient(timeout=3.0, follow_redirects=False) as client:
        peers = await asyncio.gather(*(
            ask(client, p, node.peers[p.region])
            for p in node.settings.peers if p.region in node.peers
        ))  # fmt: skip
    return {"items": [{**row(mine), "http_url": None}, *peers], "next": None}


def _same_registry(c: dict[str, Any], mine: dict[str, Any]) -> bool:
    """The registries of two cluster views agree: by ``registry_digest`` (exact, kept per
    apply) when both carry it, else by ``registry_hash`` (a region of an earlier
    release; this node's may be up to a few seconds old over a large registry)."""
    if c.get("registry_digest") and mine.get("registry_digest"):
        return bool(c["registry_digest"] == mine["registry_digest"])
    return bool(c["registry_hash"] == mine["registry_hash"])


class _Snapshot:
    """A Prometheus collector over values read just before the scrape."""

    def __init__(self, node: Node, counts: dict[str, int]):
        self.node, self.counts = node, counts

    def collect(self):  # noqa: ANN201 (prometheus collector protocol)
        yield from self._stores_and_peers()
        yield from self._ingest()
        yield from self._matching_and_keys()
        yield from self._operations()

    def _stores_and_peers(self) -> Iterator[Metric]:
        node = self.node
        g = GaugeMetricFamily("regionsync_events", "Events held by this node", labels=["origin"])
        g.add_metric(["local"], self.counts["events_accepted"])
        g.add_metric(["all"], self.counts["events"])
        yield g
        g = GaugeMetricFamily(
            "regionsync_deliveries", "Deliveries owned by this region", labels=["status"]
        )
        for s in DeliveryStatus:
            g.add_metric([s.value], self.counts[f"deliveries_{s.value}"])
        yield g
        g = GaugeMetricFamily(
            "regionsync_replication_records_behind", "Records a peer lacks", labels=["peer"]
        )
        for p in node.peers.values():
            g.add_metric([p.region], node.view.records_behind(p))
        yield g
        g = GaugeMetricFamily("regionsync_peer_connected", "1 if connected", labels=["peer"])
        for p in node.peers.values():
            g.add_metric([p.region], 1.0 if p.connected else 0.0)
        yield g
        g = GaugeMetricFamily(
            "regionsync_peer_state_agrees",
            "1 if the last digest matched, 0 if it differed, -1 if never compared",
            labels=["peer"],
        )
        for p in node.peers.values():
            g.add_metric([p.region], -1.0 if p.state_agrees is None else float(p.state_agrees))
        yield g
        clock = node.writer.clock_view  # issue 41: README "Clocks and conflicts"
        yield GaugeMetricFamily(
            "regionsync_clock_error_ms",
            "This clock minus the cluster's reference clock, in ms",
            value=clock.error_ms,
        )
        yield GaugeMetricFamily(
            "regionsync_clock_suspect", "1 if this clock is suspect", value=clock.status != "ok"
        )
        g = GaugeMetricFamily(
            "regionsync_peer_clock_offset_ms", "A peer's clock minus this one", labels=["peer"]
        )
        for peer, offset in clock.offsets.items():
            g.add_metric([peer], offset)
        caps = node.capabilities
        g = GaugeMetricFamily(
            "regionsync_feature_in_use",
            "1 if the cluster writes this feature (every region reads it), 0 if held back",
            labels=["feature"],
        )
        for name in sorted(caps.reads - BASELINE):
            g.add_metric([name], 1.0 if name in caps.effective else 0.0)
        yield g

    def _ingest(self) -> Iterator[Metric]:
        node = self.node
        p = node.ingest.pressure
        g = GaugeMetricFamily("regionsync_ingest_saturation", "Smoothed backlog saturation S")
        g.add_metric([], p.smoothed if p else 0.0)
        yield g
        state = p.state if p else "accepting"
        g = GaugeMetricFamily("regionsync_ingest_state", "Backpressure state", labels=["state"])
        for name in ("accepting", "shedding", "critical_only", "overloaded"):
            g.add_metric([name], 1.0 if name == state else 0.0)
        yield g
        yield GaugeMetricFamily(
            "regionsync_ingest_retry_after_seconds",
            "Last Retry-After given",
            node.ingest.last_retry_after_s,
        )
        yield GaugeMetricFamily(
            "regionsync_backlog", "Pending deliveries owned", node.queue.backlog
        )

    def _matching_and_keys(self) -> Iterator[Metric]:
        node = self.node
        stats = node.catalog.index.stats()
        c = CounterMetricFamily(
            "regionsync_match_negative_cache", "No-subscriber lookups", labels=["result"]
        )
        c.add_metric(["hit"], stats["hits"])
        c.add_metric(["miss"], stats["misses"])
        c.add_metric(["invalidated"], stats["invalidations"])
        yield c
        yield GaugeMetricFamily(
            "regionsync_match_endpoints",
            "Endpoints in the subscription index (a tenant present at start is indexed at "
            "its first publish)",
            stats["endpoints"],
        )
        reg = node.catalog.registry
        yield GaugeMetricFamily(
            "regionsync_registry_decoded_keys",
            "Registry states held decoded (the rest as stored bytes; "
            "registry.decoded_cache_keys bounds the cold ones)",
            reg.decoded_count(),
        )
        yield CounterMetricFamily(
            "regionsync_registry_decode_errors",
            "Stored registry rows that did not decode at their first read (read as absent)",
            value=node.catalog.decode_errors,
        )
        keys = node.keys
        c = CounterMetricFamily(
            "regionsync_idempotency_lookups",
            "Idempotency-Key lookups before the write lock: from the cache, a store read, "
            "or a read the key filter spared",
            labels=["result"],
        )
        for result, n in (("cached", keys.hits), ("read", keys.misses), ("spared", keys.spared)):
            c.add_metric([result], n)
        yield c
        if keys.filter is not None:
            yield GaugeMetricFamily(
                "regionsync_idempotency_filter_keys",
                "Keys in the Idempotency-Key filter (estimate; sized for "
                "ingest.idempotency_filter_entries per generation; -1 while it is filled)",
                keys.filter.approx_keys if keys.filter.ready else -1,
            )

    def _operations(self) -> Iterator[Metric]:
        node = self.node
        c = CounterMetricFamily(
            "regionsync_ingest", "Ingest decisions", labels=["decision", "priority"]
        )
        for (decision, priority), n in sorted(node.ingest.ingest_counts.items()):
            c.add_metric([decision, priority], n)
        yield c
        share = node.ingest.share
        yield CounterMetricFamily(
            "regionsync_ingest_share_waits",
            "Publishes that waited for their tenant's share of the write path "
            "(ingest.tenant_publishes_in_flight, while other tenants publish)",
            value=share.waited,
        )
        yield GaugeMetricFamily(
            "regionsync_ingest_share_waiting",
            "Publishes waiting for their tenant's share of the write path now",
            share.waiting,
        )
        yield CounterMetricFamily(
            "regionsync_actor_renewals",
            "New incarnations taken because a peer had seen more of this node's actor",
            value=node.writer.renewals,
        )
        c = CounterMetricFamily(
            "regionsync_operational_events",
            "Operational webhook events published here ([operational_webhooks])",
            labels=["type"],
        )
        for event_type, n in sorted(node.ops.counts.items()):
            c.add_metric([event_type], n)
        yield c
        yield GaugeMetricFamily(
            "regionsync_custody_fenced",
            "1 while this region fences itself (no peer heard; README, Region failover)",
            1.0 if node.custody.fence.fenced else 0.0,
        )
        yield CounterMetricFamily(
            "regionsync_operational_events_dropped",
            "Operational events lost (no operations tenant, full queue, publish error)",
            value=node.ops.dropped,
        )
        for name, value in node.counters.items():
            yield CounterMetricFamily(f"regionsync_{name}", name.replace("_", " "), value=value)
