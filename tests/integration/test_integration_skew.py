"""Clock skew with three real processes (issue 41): one region's wall clock 10 minutes
behind (``TestBehind``), then one 10 minutes ahead (``TestAhead``), under libfaketime
(faketime_support.py; the monotonic clock stays real). In each: records replicate both
ways within seconds, every acknowledged publish to every region is delivered, the
skewed region says so in ``/v1/cluster``, a restart while still skewed leaves it ready
(custody) and delivering its pending events, and of two concurrent writes to one
endpoint field (the skewed region's links cut meanwhile) the one made later in real time
(by more than ``LWW_BOUND_S`` plus a margin) wins in every region.
The ahead region is also restarted with a correct clock: its peers accept its writes
within seconds and its saved HLC stamps override nothing.

Each class has its own cluster; each test builds its own tenant, so one failure does not
hide the others. Deadlines are wide (a loaded 2-core machine): they prove behaviour, not
speed."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import pytest_asyncio
from cluster_support import REGIONS, Hit, RecordingReceiver, converged, eventually, expect
from faketime_support import (
    SkewedCluster,
    clock_probe,
    faketime_env,
    http_clock_offset_s,
    restart,
    skewed_cluster,
)
from starlette.requests import Request
from starlette.responses import Response

from regionsync import demo
from regionsync.demo import Cluster

ASYNC = pytest.mark.asyncio(loop_scope="module")

US, EU, AP = REGIONS
SKEW_S = 600  # 10 minutes
# replication.clock_suspect_ms (default): a clock further than this from the cluster's
# reference is "suspect"; a correct region's is within it
CLOCK_SUSPECT_S = 2.0
# The last-writer-wins guarantee under skew (README, "Clocks and conflicts"): of two
# concurrent writes to one field, the one made later in real time by more than
# 3 x clock_suspect_ms + one round trip (ms on loopback, within MARGIN_S) wins. The tests
# space their writes by LWW_BOUND_S + MARGIN_S.
LWW_BOUND_S = 3 * CLOCK_SUSPECT_S
MARGIN_S = 3.0
REPLICATED_S = 15.0  # "within seconds": a record written in one region readable in all
DELIVERED_S = 30.0
N_PER_REGION = 10
OPS = "ops"  # the operations tenant (operational_webhooks.tenant)
# failover_after_s: also how long a peer's clock sample counts (i41 clock_offset); the
# LWW writes are made within LWW_BOUND_S + MARGIN_S of a cut, well inside it
REPLICATION = {"heartbeat_s": 0.5, "custody_interval_s": 0.2, "failover_after_s": 20.0}
SECTIONS = {
    "operational_webhooks": {"tenant": OPS},
    # one-remote publishes wait for a peer's ack "within seconds" (not the 5 s default,
    # which a loaded two-core machine has missed): a refused record never comes in time
    "ingest": {"one_remote_timeout_s": REPLICATED_S},
}
DELIVERY = {
    "retry_schedule_s": [0.2, 0.5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    "probe_initial_s": 0.5,
    "probe_max_s": 1.0,
}


@dataclass
class SwitchReceiver(RecordingReceiver):
    """Answers 503 (before checking anything) on the path names in ``down``."""

    down: set[str] = field(default_factory=set)

    async def _hook(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name in self.down:
            headers = {k.lower(): v for k, v in request.headers.items()}
            self.hits.append(Hit(name, headers, b"", 503))
            return Response(status_code=503)
        return await super()._hook(request)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def receiver() -> AsyncIterator[SwitchReceiver]:
    rcv = SwitchReceiver()
    async with rcv.running():
        yield rcv


async def diagnose(client: httpx.AsyncClient, cluster: Cluster) -> dict[str, Any]:
    """What each region says about skew: refusals (``clock_drift``), custody readiness,
    its clock view (absent before issue 41), pending deliveries."""
    out: dict[str, Any] = {}
    for r, base in cluster.http.items():
        try:
            c = (await client.get(f"{base}/v1/cluster")).json()
            metrics = (await client.get(f"{base}/metrics")).text
        except httpx.HTTPError as exc:
            out[r] = repr(exc)
            continue
        drift = re.search(r"^regionsync_clock_drift_total (\S+)$", metrics, re.M)
        out[r] = {
            "clock_drift_total": float(drift.group(1)) if drift else None,
            "custody_ready": c["custody"]["ready"],
            "clock": c.get("clock"),
            "deliveries_pending": c["counts"]["deliveries_pending"],
            "version_vector": c["version_vector"],
        }
    return out


async def within(
    client: httpx.AsyncClient, cluster: Cluster, what: str,
    check: Callable[[], Awaitable[Any]], timeout_s: float,
) -> Any:  # fmt: skip
    """``eventually(check)``; on timeout an AssertionError naming ``what``, the time it
    had, and every region's ``diagnose``."""
    start = time.monotonic()
    try:
        return await eventually(check, timeout_s=timeout_s, interval=0.1)
    except AssertionError as exc:
        took = time.monotonic() - start
        diag = await diagnose(client, cluster)
        raise AssertionError(f"{what}: not within {took:.1f} s ({exc}); {diag}") from None


async def readable(
    client: httpx.AsyncClient, cluster: Cluster, path: str, regions: tuple[str, ...]
) -> bool:
    """``path`` answers 200 in each of ``regions``."""
    for r in regions:
        if (await client.get(f"{cluster.http[r]}{path}")).status_code != 200:
            return False
    return True


async def tenant_with_endpoint(
    client: httpx.AsyncClient, cluster: Cluster, receiver: SwitchReceiver, region: str,
    tenant: str, readable_in: tuple[str, ...] = REGIONS, **tenant_fields: Any,
) -> str:  # fmt: skip
    """A tenant and an endpoint (receiver path ``tenant``) made in ``region``, readable
    in ``readable_in`` (every region) within REPLICATED_S; returns the endpoint id."""
    base = cluster.http[region]
    await expect(client, "POST", f"{base}/v1/tenants", 201,
                 json={"id": tenant, "name": tenant, **tenant_fields})  # fmt: skip
    ep = await expect(client, "POST", f"{base}/v1/tenants/{tenant}/endpoints", 201,
                      json={"url": receiver.url(tenant), "rate_limit_per_s": 1000})  # fmt: skip
    receiver.secrets[tenant] = ep["secret"]
    path = f"/v1/tenants/{tenant}/endpoints/{ep['id']}"
    await within(client, cluster, f"endpoint made in {region} readable in {readable_in}",
                 lambda: readable(client, cluster, path, readable_in), REPLICATED_S)  # fmt: skip
    return ep["id"]


async def publish(client: httpx.AsyncClient, base: str, tenant: str, key: str) -> str:
    """One acknowledged publish (202); returns the event id (the webhook-id)."""
    body = await expect(
        client, "POST", f"{base}/v1/tenants/{tenant}/events", 202,
        json={"event_type": "skew.test", "payload": {"key": key}},
        headers={"Idempotency-Key": key},
    )  # fmt: skip
    return body["id"]


async def all_delivered(
    client: httpx.AsyncClient, cluster: Cluster, receiver: SwitchReceiver, tenant: str,
    acked: list[str], what: str, since: int = 0,
) -> None:  # fmt: skip
    """Every event of ``acked`` reached the receiver (at least once) with a signature the
    official library accepts (its timestamp within 5 minutes of the receiver's clock). A
    failure names the answers to the requests received after ``receiver.hits[since]``
    (400: signature refused) and the state of a few lost events' deliveries."""

    async def done() -> bool:
        return set(acked) <= receiver.ids(tenant)

    try:
        await within(client, cluster, what, done, DELIVERED_S)
    except AssertionError as exc:
        lost = sorted(set(acked) - receiver.ids(tenant))
        answers: dict[int, int] = {}
        for h in receiver.hits[since:]:
            if h.name == tenant:
                answers[h.status] = answers.get(h.status, 0) + 1
        states = [await delivery_state(client, cluster, tenant, e) for e in lost[:2]]
        raise AssertionError(
            f"{len(lost)} of {len(acked)} acknowledged events never delivered (answers to "
            f"the requests since: {answers}; deliveries: {states}): {exc}"
        ) from None
    refused = [h.headers.get("webhook-timestamp") for h in receiver.hits
               if h.name == tenant and h.status == 400]  # fmt: skip
    assert not refused, f"signatures refused, webhook-timestamp {refused[:3]} at {time.time()}"


async def delivery_state(
    client: httpx.AsyncClient, cluster: Cluster, tenant: str, event_id: str
) -> Any:
    """The event's deliveries as its origin shows them (its region first, then others)."""
    views = {}
    for r, base in cluster.http.items():
        resp = await client.get(f"{base}/v1/tenants/{tenant}/events/{event_id}")
        if resp.status_code == 200:
            views[r] = resp.json()
    origin = next((v["region"] for v in views.values()), None)
    view = views.get(origin) if origin else None
    return {"region": origin, "deliveries": view["deliveries"]} if view else None


async def clock_of(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    """``/v1/cluster`` ``clock`` (issue 41: status ok|suspect, error_ms, ...)."""
    c = (await client.get(f"{base}/v1/cluster")).json()
    assert "clock" in c, f"/v1/cluster has no clock view: {sorted(c)}"
    return c["clock"]


async def replicates_both_ways(
    client: httpx.AsyncClient, cluster: Cluster, receiver: SwitchReceiver, skewed: str,
    tag: str,
) -> None:  # fmt: skip
    """Tenants and endpoints made in a correct region and in ``skewed`` are readable in
    every region within REPLICATED_S; then all regions converge."""
    correct = next(r for r in REGIONS if r != skewed)
    for region in (correct, skewed):
        await tenant_with_endpoint(client, cluster, receiver, region, f"{tag}-{region}")
    await within(client, cluster, "registries and version vectors converge",
                 lambda: converged(client, cluster.http), 2 * REPLICATED_S)  # fmt: skip


async def reports_its_clock(client: httpx.AsyncClient, cluster: Cluster, skewed: str,
                            error_s: float) -> None:  # fmt: skip
    """``skewed`` shows its clock ``suspect`` with about ``error_s`` of error in
    ``/v1/cluster``; the others show theirs ``ok``."""

    async def shown() -> bool:
        views = {r: await clock_of(client, base) for r, base in cluster.http.items()}
        for r, v in views.items():
            if r == skewed:
                if v["status"] != "suspect" or abs(v["error_ms"] - error_s * 1000) > 10_000:
                    return False
            elif v["status"] != "ok" or abs(v["error_ms"]) > CLOCK_SUSPECT_S * 1000:
                return False
        return True

    await within(client, cluster, f"{skewed} reports its clock {error_s:+.0f} s off", shown,
                 REPLICATED_S)  # fmt: skip


async def every_publish_delivered(
    client: httpx.AsyncClient, cluster: Cluster, receiver: SwitchReceiver, made_in: str,
    tenant: str, ack_policy: str = "local",
) -> None:  # fmt: skip
    """A tenant made in ``made_in``; N_PER_REGION acknowledged publishes to every region,
    all delivered (at least once; every one counted)."""
    await tenant_with_endpoint(client, cluster, receiver, made_in, tenant, ack_policy=ack_policy)
    acked = await asyncio.gather(*(
        publish(client, cluster.http[r], tenant, f"{tenant}-{r}-{i}")
        for r in REGIONS for i in range(N_PER_REGION)
    ))  # fmt: skip
    assert len(set(acked)) == len(REGIONS) * N_PER_REGION
    await all_delivered(client, cluster, receiver, tenant, acked,
                        f"{len(acked)} publishes to every region delivered")  # fmt: skip
    counts = [receiver.seen[(tenant, wid)] for wid in acked]
    assert min(counts) >= 1, counts


async def later_write_wins(
    client: httpx.AsyncClient, cluster: SkewedCluster, path: str, first: str, later: str,
    tag: str, skewed: str,
) -> None:  # fmt: skip
    """Concurrent writes: with ``skewed``'s links cut, ``first`` sets the endpoint's
    description, then ``later`` sets it LWW_BOUND_S + MARGIN_S later in real time; once
    the links are healed every region ends with the later value, and keeps it."""
    cluster.isolate(skewed)
    try:
        for region, value in ((first, f"{tag}-first"), (later, f"{tag}-later")):
            if region == later:
                await asyncio.sleep(LWW_BOUND_S + MARGIN_S)
            await expect(client, "PATCH", f"{cluster.http[region]}{path}", 200,
                         json={"description": value})  # fmt: skip
    finally:
        cluster.isolate(skewed, cut=False)
    seen: dict[str, Any] = {}

    async def later_everywhere() -> bool:
        for r, base in cluster.http.items():
            seen[r] = (await expect(client, "GET", f"{base}{path}", 200))["description"]
        return set(seen.values()) == {f"{tag}-later"}

    try:
        await within(client, cluster, f"the write made later in {later} wins",
                     later_everywhere, REPLICATED_S)  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(f"descriptions {seen}: {exc}") from None
    await asyncio.sleep(1.0)
    assert await later_everywhere(), seen  # not overridden after


async def restart_delivers_pending(
    client: httpx.AsyncClient, cluster: Cluster, receiver: SwitchReceiver, region: str,
    offset: str | None, tenant: str, made_in: str,
) -> None:  # fmt: skip
    """A tenant made in ``made_in``; three publishes acknowledged by ``region`` while the
    receiver answers 503, then ``region`` restarted (clock ``offset``), then the receiver
    answers again: the events are delivered and ``region``'s custody is ready."""
    await tenant_with_endpoint(client, cluster, receiver, made_in, tenant)
    receiver.down.add(tenant)
    base = cluster.http[region]
    acked = [await publish(client, base, tenant, f"{tenant}-{i}") for i in range(3)]

    async def tried() -> bool:  # pending: the deliveries are being attempted
        return len({h.headers.get("webhook-id") for h in receiver.hits if h.name == tenant}) >= 3

    await within(client, cluster, "three deliveries attempted", tried, DELIVERED_S)
    since = len(receiver.hits)
    restart(cluster, region, offset)
    await demo.wait_ready(client, base, time.monotonic() + 60)
    want = {None: 0, "-10m": -SKEW_S, "+10m": SKEW_S}[offset]
    assert abs(await http_clock_offset_s(client, base) - want) < 5
    receiver.down.discard(tenant)
    what = f"{region} restarted (clock {offset or 'correct'}) delivers its pending events"
    await all_delivered(client, cluster, receiver, tenant, acked, what, since)

    async def ready() -> bool:
        return (await expect(client, "GET", f"{base}/v1/cluster", 200))["custody"]["ready"]

    await within(client, cluster, f"{region} custody ready after restart", ready, REPLICATED_S)


async def says_so_by_webhook(
    client: httpx.AsyncClient, cluster: Cluster, receiver: SwitchReceiver, skewed: str,
    since: int,
) -> None:  # fmt: skip
    """The operations tenant (made in ``skewed`` before its restart, see TestBehind) got
    ``region.clock_skewed`` from ``skewed`` after it restarted with its clock still off
    (a new process's clock status starts ``ok``). ``since``: the receiver's hits before
    this cluster's operations tenant (the receiver outlives each class's cluster)."""

    async def skewed_hits() -> list[tuple[int, dict[str, Any]]]:
        bodies = [(h.status, json.loads(h.body)) for h in receiver.hits[since:]
                  if h.name == OPS and h.body]  # fmt: skip
        return [(st, b) for st, b in bodies if b["type"] == "region.clock_skewed"]

    hits = await within(client, cluster, f"region.clock_skewed from {skewed}", skewed_hits,
                        REPLICATED_S)  # fmt: skip
    assert {b["region"] for _, b in hits} == {skewed}, hits  # only the region that is off
    assert {st for st, _ in hits} == {204}, f"refused (400: signature timestamp): {hits}"


async def endpoint_path(client: httpx.AsyncClient, cluster: Cluster,
                        receiver: SwitchReceiver, region: str, tenant: str) -> str:  # fmt: skip
    ep = await tenant_with_endpoint(client, cluster, receiver, region, tenant)
    return f"/v1/tenants/{tenant}/endpoints/{ep}"


def test_faketime_shifts_the_wall_clock_only() -> None:
    """The harness: a child under faketime_env reads a wall clock 10 minutes off and the
    real monotonic clock."""
    for offset, want in (("-10m", -SKEW_S), ("+10m", SKEW_S)):
        wall, mono = clock_probe(faketime_env(offset))
        assert abs(wall - want) < 5, (offset, wall)
        assert abs(mono) < 5, (offset, mono)


@pytest_asyncio.fixture(scope="class", loop_scope="module")
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[SkewedCluster]:
    """The three regions, the class's ``SKEWED`` region under faketime ``OFFSET``."""
    cls = request.cls
    async with skewed_cluster(
        {cls.SKEWED: cls.OFFSET}, REPLICATION, SECTIONS, **DELIVERY
    ) as running:
        yield running


async def only_skewed_is_off(
    client: httpx.AsyncClient, cluster: SkewedCluster, skewed: str, offset_s: float
) -> None:
    """The HTTP Date of ``skewed`` is ``offset_s`` off, every other region's is right."""
    for r, base in cluster.http.items():
        want = offset_s if r == skewed else 0
        assert abs(await http_clock_offset_s(client, base) - want) < 5, r


@ASYNC
class TestBehind:
    """ap-southeast-1's wall clock 10 minutes behind."""

    SKEWED, OFFSET = AP, "-10m"

    async def test_only_the_skewed_region_is_off(self, cluster: SkewedCluster,
                                                 client: httpx.AsyncClient) -> None:  # fmt: skip
        await only_skewed_is_off(client, cluster, self.SKEWED, -SKEW_S)

    async def test_replication_both_ways(self, cluster: SkewedCluster, client: httpx.AsyncClient,
                                         receiver: SwitchReceiver) -> None:  # fmt: skip
        await replicates_both_ways(client, cluster, receiver, self.SKEWED, "b-repl")

    async def test_skewed_region_reports_its_clock(self, cluster: SkewedCluster,
                                                   client: httpx.AsyncClient) -> None:  # fmt: skip
        await reports_its_clock(client, cluster, self.SKEWED, -SKEW_S)

    async def test_every_acknowledged_publish_delivered(
        self, cluster: SkewedCluster, client: httpx.AsyncClient, receiver: SwitchReceiver
    ) -> None:
        # made in a correct region: the skewed one must apply its peers' records
        await every_publish_delivered(client, cluster, receiver, US, "b-pub")

    async def test_later_write_from_the_region_behind_wins(
        self, cluster: SkewedCluster, client: httpx.AsyncClient, receiver: SwitchReceiver
    ) -> None:
        path = await endpoint_path(client, cluster, receiver, self.SKEWED, "b-lww")
        await later_write_wins(client, cluster, path, US, self.SKEWED, "b-lww", self.SKEWED)

    async def test_restart_while_behind_ready_and_delivers(
        self, cluster: SkewedCluster, client: httpx.AsyncClient, receiver: SwitchReceiver
    ) -> None:
        # made in the region behind, which its peers accept today: its own deliveries
        await restart_delivers_pending(client, cluster, receiver, self.SKEWED, self.OFFSET,
                                       "b-restart", self.SKEWED)  # fmt: skip
        await replicates_both_ways(client, cluster, receiver, self.SKEWED, "b-after")

    async def test_restart_while_behind_says_so_by_operational_webhook(
        self, cluster: SkewedCluster, client: httpx.AsyncClient, receiver: SwitchReceiver
    ) -> None:
        # the operations tenant held by the skewed region (made there), then a restart
        since = len(receiver.hits)
        await tenant_with_endpoint(client, cluster, receiver, self.SKEWED, OPS, (self.SKEWED,))
        restart(cluster, self.SKEWED, self.OFFSET)
        await demo.wait_ready(client, cluster.http[self.SKEWED], time.monotonic() + 60)
        await says_so_by_webhook(client, cluster, receiver, self.SKEWED, since)


@ASYNC
class TestAhead:
    """eu-central-1's wall clock 10 minutes ahead; later restarted with a correct one."""

    SKEWED, OFFSET = EU, "+10m"

    async def test_only_the_skewed_region_is_off(self, cluster: SkewedCluster,
                                                 client: httpx.AsyncClient) -> None:  # fmt: skip
        await only_skewed_is_off(client, cluster, self.SKEWED, SKEW_S)

    async def test_replication_both_ways(self, cluster: SkewedCluster, client: httpx.AsyncClient,
                                         receiver: SwitchReceiver) -> None:  # fmt: skip
        await replicates_both_ways(client, cluster, receiver, self.SKEWED, "a-repl")

    async def test_skewed_region_reports_its_clock(self, cluster: SkewedCluster,
                                                   client: httpx.AsyncClient) -> None:  # fmt: skip
        await reports_its_clock(client, cluster, self.SKEWED, SKEW_S)

    async def test_every_acknowledged_publish_delivered_one_remote(
        self, cluster: SkewedCluster, client: httpx.AsyncClient, receiver: SwitchReceiver
    ) -> None:
        # one-remote: the ahead region's publishes wait for a peer to hold them
        await every_publish_delivered(client, cluster, receiver, US, "a-pub", "one-remote")

    async def test_later_write_from_a_correct_region_wins(
        self, cluster: SkewedCluster, client: httpx.AsyncClient, receiver: SwitchReceiver
    ) -> None:
        path = await endpoint_path(client, cluster, receiver, US, "a-lww")
        await later_write_wins(client, cluster, path, self.SKEWED, US, "a-lww", self.SKEWED)

    async def test_restart_while_ahead_ready_delivers_and_says_so(
        self, cluster: SkewedCluster, client: httpx.AsyncClient, receiver: SwitchReceiver
    ) -> None:
        since = len(receiver.hits)
        await tenant_with_endpoint(client, cluster, receiver, self.SKEWED, OPS, (self.SKEWED,))
        await restart_delivers_pending(client, cluster, receiver, self.SKEWED, self.OFFSET,
                                       "a-restart", US)  # fmt: skip
        await says_so_by_webhook(client, cluster, receiver, self.SKEWED, since)
        await replicates_both_ways(client, cluster, receiver, self.SKEWED, "a-after")

    async def test_restart_with_a_correct_clock_accepted_and_overrides_nothing(
        self, cluster: SkewedCluster, client: httpx.AsyncClient, receiver: SwitchReceiver
    ) -> None:
        # its saved HLC is 10 minutes ahead of the now correct clock
        await restart_delivers_pending(client, cluster, receiver, self.SKEWED, None,
                                       "a-fixed", US)  # fmt: skip
        await replicates_both_ways(client, cluster, receiver, self.SKEWED, "a-fixed-repl")
        path = await endpoint_path(client, cluster, receiver, US, "a-fixed-lww")
        await later_write_wins(client, cluster, path, self.SKEWED, US, "a-fixed-lww",
                               self.SKEWED)  # fmt: skip
