"""Shared by make_fixture.py (writes a fixture store) and test_open_old_stores.py (opens
every committed one): the regions, node settings and wiring, a recording receiver, and
the API snapshot a fixture's manifest keeps and the test compares.

A fixture's own region is ``REGION``; ``PEER`` wrote the replicated records it holds;
``FRESH`` is the empty node the test replicates with. Keys, tokens and secrets here are
fixture values, never real ones.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from standardwebhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from api_support import eventually, serving  # noqa: E402

from regionsync.adapters.aiohttp_sender import AiohttpSender  # noqa: E402
from regionsync.adapters.grpc_transport import GrpcTransport  # noqa: E402
from regionsync.adapters.http_api import create_app  # noqa: E402
from regionsync.adapters.postgres_coordinator import PostgresCoordinator  # noqa: E402
from regionsync.adapters.postgres_store import PostgresStore  # noqa: E402
from regionsync.adapters.system import (  # noqa: E402
    SystemClock,
    SystemResolver,
    UlidSource,
    system_rng,
)
from regionsync.adapters.wiring import build_store  # noqa: E402
from regionsync.config import Settings, load_settings  # noqa: E402
from regionsync.core.retry import AttemptOutcome  # noqa: E402
from regionsync.core.urlguard import parse_networks  # noqa: E402
from regionsync.demo import free_port  # noqa: E402
from regionsync.runtime.node import Node  # noqa: E402
from regionsync.runtime.ports import OutboundRequest  # noqa: E402

__all__ = [
    "FIXTURES",
    "FRESH",
    "PEER",
    "REGION",
    "Receiver",
    "RedirectingSender",
    "ShiftedClock",
    "api_snapshot",
    "assert_subset",
    "fixture_node",
    "fixture_settings",
    "running",
    "serving",
    "signed_by",
    "summary",
    "until",
]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stores"
REGION, PEER, FRESH = "us-east-1", "eu-west-1", "ap-southeast-1"
# answers that depend on when and beside whom a store is served, not on what it holds
VOLATILE = frozenset({"custodian", "next_attempt_at", "publish_rate_cluster_per_s"})


def fixture_settings(
    region: str,
    data_dir: Path,
    *,
    store: str,
    keys: str | None,
    admin_token: str,
    http_port: int,
    grpc_port: int,
    peers: dict[str, int],
    **overrides: Any,
) -> Settings:
    """A node of ``region`` on loopback; ``peers``: region -> gRPC port. Delivery to
    127.0.0.1 is allowed and retried fast (0.1 s, three tries), a failing endpoint
    probed again soon; attempts in-process; links redialed within 0.5 s; custody decided
    every 0.2 s."""
    return load_settings(
        None,
        region=region,
        data_dir=data_dir,
        store=store,
        http_listen=f"127.0.0.1:{http_port}",
        grpc_listen=f"127.0.0.1:{grpc_port}",
        peers=[{"region": r, "address": f"127.0.0.1:{p}"} for r, p in peers.items()],
        tokens=[{"token": admin_token, "scope": "admin"}],
        secrets={"keys": keys},
        log_level="warning",
        delivery={
            "allow_private_networks": ["127.0.0.1/32"],
            "retry_schedule_s": [0.1, 0.1],
            "poll_interval_s": 0.2,
            "timeout_s": 5.0,
            "probe_initial_s": 0.1,
            "probe_max_s": 0.5,
            "sender_process": False,
        },
        replication={
            "reconnect_min_s": 0.05,
            "reconnect_max_s": 0.5,
            "custody_interval_s": 0.2,  # a node with peers delivers once custody is ready
            **overrides.pop("replication", {}),
        },
        **overrides,
    )


class ShiftedClock(SystemClock):
    """System time moved by ``offset_ms``: a store opened as if just after it was written
    (pending deliveries, idempotency keys and secret overlaps are still current)."""

    def __init__(self, offset_ms: int):
        self.offset_ms = offset_ms

    def wall_ms(self) -> int:
        return super().wall_ms() + self.offset_ms


class RedirectingSender:
    """The in-process aiohttp sender, with requests to ``origin`` (scheme://host:port)
    sent to ``to`` instead: a fixture's receiver, now listening elsewhere. An attempt
    waits while ``gate`` is clear."""

    def __init__(self, origin: str, to: str):
        self.origin, self.to = origin, to
        self.inner = AiohttpSender(SystemResolver(), parse_networks(["127.0.0.1/32"]))
        self.gate = asyncio.Event()
        self.gate.set()

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        await self.gate.wait()
        if request.url.startswith(self.origin + "/"):
            request = replace(request, url=self.to + request.url[len(self.origin) :])
        return await self.inner.send(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def fixture_node(settings: Settings, clock: SystemClock, sender: Any) -> Node:
    """A Node wired as ``adapters.wiring.build_node`` wires it, with ``clock`` and
    ``sender`` of the caller's choosing."""
    store = build_store(settings)
    coordinator = None
    if isinstance(store, PostgresStore):
        holder = f"{socket.gethostname()}/{os.getpid()}/{settings.region}"
        coordinator = PostgresCoordinator(store, settings.region, holder)
    rng = system_rng()
    return Node(
        settings,
        store=store,
        coordinator=coordinator,
        clock=clock,
        rng=rng,
        ids=UlidSource(clock, rng),
        transport=GrpcTransport(settings.grpc_listen, None, settings.replication.max_message_bytes),
        sender=sender,
        resolver=SystemResolver(),
    )


@contextlib.asynccontextmanager
async def running(node: Node, admin_token: str) -> AsyncIterator[httpx.AsyncClient]:
    """``node`` served on its ``http_listen`` (the lifespan starts and stops it) and an
    admin client; the sender is closed at the end."""
    port = int(node.settings.http_listen.rpartition(":")[2])
    base = f"http://127.0.0.1:{port}"
    headers = {"authorization": f"Bearer {admin_token}"}
    try:
        async with (
            serving(create_app(node, manage_node=True), port),
            httpx.AsyncClient(base_url=base, headers=headers, timeout=10.0) as client,
        ):
            yield client
    finally:
        await node.sender.aclose()


@dataclass
class Hit:
    name: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A loopback receiver: ``/hooks/<name>`` answers 204, or 500 for names in ``fail``;
    records every request. ``verify`` checks a Standard Webhooks signature against a
    secret at the request's own timestamp (a fixture's clock is not this machine's)."""

    fail: set[str] = field(default_factory=set)
    port: int = field(default_factory=free_port)
    hits: list[Hit] = field(default_factory=list)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, name: str) -> str:
        return f"{self.origin}/hooks/{name}"

    def of(self, name: str) -> list[Hit]:
        return [h for h in self.hits if h.name == name]

    async def _hook(self, request: Request) -> Response:
        name = request.path_params["name"]
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.hits.append(Hit(name, headers, await request.body()))
        return Response(status_code=500 if name in self.fail else 204)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Receiver]:
        app = Starlette(routes=[Route("/hooks/{name}", self._hook, methods=["POST"])])
        async with serving(app, self.port, lifespan="off"):
            yield self


def signed_by(hit: Hit, secret: str) -> bool:
    """Whether one of ``hit``'s ``webhook-signature`` entries is ``secret``'s."""
    ts = datetime.fromtimestamp(int(hit.headers["webhook-timestamp"]), UTC)
    want = Webhook(secret).sign(hit.headers["webhook-id"], ts, hit.body.decode())
    return want in hit.headers["webhook-signature"].split(" ")


async def pages(client: httpx.AsyncClient, path: str, paged: bool = True) -> list[dict[str, Any]]:
    """Every item of a ``{items, next}`` list (``paged``: it takes ``limit``)."""
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {"limit": 1000, **({"cursor": cursor} if cursor else {})} if paged else {}
        resp = await client.get(path, params=query)
        assert resp.status_code == 200, (path, resp.text)
        body = resp.json()
        items += body["items"]
        cursor = body["next"]
        if cursor is None:
            return items


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


async def api_snapshot(client: httpx.AsyncClient) -> dict[str, Any]:
    """What the node serves of its store (admin view, ``VOLATILE`` members left out):
    tenants, sources, tokens, audit, and per tenant its endpoints, event types, events
    (each with payload and deliveries), deliveries and each delivery's attempts."""
    tenants = await pages(client, "/v1/tenants")
    out: dict[str, Any] = {
        "tenants": tenants,
        "sources": await pages(client, "/v1/sources"),
        "tokens": await pages(client, "/v1/tokens"),
        "audit": await pages(client, "/v1/audit"),
        "of_tenant": {},
    }
    for t in tenants:
        base = f"/v1/tenants/{t['id']}"
        events = []
        for e in await pages(client, f"{base}/events"):
            resp = await client.get(f"{base}/events/{e['id']}")
            assert resp.status_code == 200, resp.text
            events.append({**e, "full": resp.json()})
        deliveries = await pages(client, f"{base}/deliveries")
        # oldest first whatever the release's default order (newest first since 0.2.0,
        # issue 43; a 0.1.0 node refuses the order parameter)
        attempts = {
            d["id"]: sorted(
                await pages(client, f"{base}/deliveries/{d['id']}/attempts"),
                key=lambda a: (a["at"], a["generation"], a["n"]),
            )
            for d in deliveries
        }
        out["of_tenant"][t["id"]] = {
            "endpoints": await pages(client, f"{base}/endpoints"),
            "event_types": await pages(client, f"{base}/event-types", paged=False),
            "events": events,
            "deliveries": deliveries,
            "attempts": attempts,
        }
    return _stable(out)


def summary(snap: dict[str, Any]) -> dict[str, Any]:
    """Counts of a snapshot (the manifest's readable part)."""
    of = snap["of_tenant"]
    statuses: dict[str, int] = {}
    for t in of.values():
        for d in t["deliveries"]:
            statuses[d["status"]] = statuses.get(d["status"], 0) + 1
    return {
        "tenants": len(snap["tenants"]),
        "sources": len(snap["sources"]),
        "tokens": len(snap["tokens"]),
        "audit": len(snap["audit"]),
        "endpoints": sum(len(t["endpoints"]) for t in of.values()),
        "event_types": sum(len(t["event_types"]) for t in of.values()),
        "events": sum(len(t["events"]) for t in of.values()),
        "deliveries": dict(sorted(statuses.items())),
        "attempts": sum(len(a) for t in of.values() for a in t["attempts"].values()),
    }


def assert_subset(expected: Any, actual: Any, path: str = "$") -> None:
    """``actual`` serves everything ``expected`` holds: equal scalars, lists of equal
    length compared in order, and every member of an expected object (a newer release
    may add members, never drop or change one)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: {actual!r} is not an object"
        for k, v in expected.items():
            assert k in actual, f"{path}.{k}: missing"
            assert_subset(v, actual[k], f"{path}.{k}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{path}: {actual!r} is not a list"
        assert len(actual) == len(expected), f"{path}: {len(actual)} items, {len(expected)} kept"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_subset(e, a, f"{path}[{i}]")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


async def until(check: Any, timeout_s: float = 30.0, what: str = "") -> Any:
    """api_support's ``eventually`` with a longer deadline, naming what it waited for."""
    try:
        return await eventually(check, timeout_s, 0.05)
    except AssertionError as exc:
        raise AssertionError(f"{what}: {exc}") from None


def fixture_key(release: str) -> str:
    """A key ring of one fixture key derived from the release name (never a real key)."""
    key = hashlib.sha256(f"regionsync fixture key {release}".encode()).digest()
    return f"fixture:{base64.b64encode(key).decode()}"


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
