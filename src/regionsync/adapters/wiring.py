"""Composition root of a production node: SQLite or PostgreSQL, gRPC, aiohttp, system
clock, uvicorn."""

from __future__ import annotations

import gc
import os
import secrets
import socket

import uvicorn

from ..config import Settings
from ..core.urlguard import parse_networks
from ..runtime.node import Node
from .aiohttp_sender import AiohttpSender
from .broker_sender import BrokerSender, RoutingSender
from .grpc_transport import GrpcTransport
from .http_api import create_app
from .http_server import server_config
from .jsonlog import configure as configure_logging
from .postgres_coordinator import PostgresCoordinator
from .postgres_store import PostgresStore
from .process_sender import ProcessSender
from .secretbox import NodeKeys
from .sqlite_store import SqliteStore
from .system import SystemClock, SystemResolver, UlidSource, system_rng
from .tracing import otlp_tracer_provider

__all__ = ["GC_GEN0_THRESHOLD", "build_node", "build_server", "build_store", "node_keys", "serve"]

# Allocations between young-generation collections in a serving node (CPython's default is
# 700). A publish allocates a few hundred objects, so the default ran a collection every
# few requests: 11% of the ingest path's time in a profile (issue 17), and 17% less CPU
# per publish at 10,000 in bench runs; older generations keep their default ratios.
GC_GEN0_THRESHOLD = 10_000


def node_keys(settings: Settings) -> NodeKeys:
    """The node key ring of ``settings.secrets``; without one configured, the generated
    ``<data_dir>/<region>.key`` (created 0600 on first start). Raises FileNotFoundError
    for a missing ``key_file`` and ValueError for bad key text."""
    return NodeKeys.load(
        settings.secrets.keys,
        settings.secrets.key_file,
        settings.data_dir / f"{settings.region}.key",
    )


def build_store(settings: Settings) -> SqliteStore | PostgresStore:
    """The store ``settings.store`` names: a PostgreSQL URL, else the SQLite file
    ``<data_dir>/<region>.db``; either seals secrets with ``node_keys``."""
    if settings.store == "sqlite":
        return SqliteStore(settings.data_dir / f"{settings.region}.db", node_keys(settings))
    return PostgresStore(settings.store, pool_max=settings.store_pool_max, keys=node_keys(settings))


def build_node(settings: Settings) -> Node:
    """A Node wired with the production adapters (not started); its SQLite store encrypts
    signing secrets with ``node_keys(settings)``. On PostgreSQL the node is one of the
    region's processes on that database (a PostgresCoordinator; one process is simply
    the only one)."""
    clock = SystemClock()
    rng = system_rng()
    resolver = SystemResolver()
    store = build_store(settings)
    coordinator = None
    if isinstance(store, PostgresStore):
        holder = f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(4)}"
        # a process stalled this long may hold a counter entry compacted meanwhile
        # (retired_compact_s after its actor was pruned): its registry writes wait for
        # its next follow round (postgres_commit.Fence)
        fence_s = settings.replication.retired_compact_s / 2
        coordinator = PostgresCoordinator(store, settings.region, holder, fence_s)
    return Node(
        settings,
        store=store,
        coordinator=coordinator,
        clock=clock,
        rng=rng,
        ids=UlidSource(clock, rng),
        transport=GrpcTransport(
            settings.grpc_listen, settings.tls, settings.replication.max_message_bytes
        ),
        sender=build_sender(settings, resolver),
        resolver=resolver,
    )


def build_sender(settings: Settings, resolver: SystemResolver) -> RoutingSender:
    """The production Sender: HTTP attempts in a child process unless
    ``delivery.sender_process`` is false, both over the aiohttp client with the SSRF
    guard's allow-list; broker destinations by ``BrokerSender`` with the same allow-list."""
    allow = settings.delivery.allow_private_networks
    brokers = BrokerSender(resolver, parse_networks(allow))
    if settings.delivery.sender_process:
        logs = (settings.log_format, settings.log_level, settings.region)
        return RoutingSender(ProcessSender(allow, logs=logs), brokers)
    return RoutingSender(AiohttpSender(resolver, parse_networks(allow)), brokers)


def _split(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def build_server(settings: Settings, node: Node) -> uvicorn.Server:
    """The HTTP server of ``node`` on ``settings.http_listen`` (limits ``settings.http``);
    its lifespan starts and stops the node. Not started: ``await server.serve()``."""
    host, port = _split(settings.http_listen)
    app = create_app(node, manage_node=True)
    return uvicorn.Server(server_config(app, host, port, settings.http, settings.log_level))


async def serve(settings: Settings) -> None:
    """Run a node until SIGINT/SIGTERM; the HTTP server's shutdown stops the node. Raises
    errors.CannotStart when the node refuses to start."""
    configure_logging(settings.log_format, settings.log_level, settings.region)
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)
    node = build_node(settings)
    if settings.tracing is not None:  # off unless configured
        node.telemetry.use_tracer_provider(otlp_tracer_provider(settings.tracing, settings.region))
    try:
        if isinstance(node.sender, RoutingSender):
            await node.sender.start()
        # before the server binds (as its lifespan would), so that a refusal to start
        # (errors.CannotStart) reaches the command line as one line, not a traceback
        await node.start()
        await build_server(settings, node).serve()
    finally:
        if node.started:  # the server's shutdown stops it; a server that never ran did not
            await node.stop()
        await node.sender.aclose()  # type: ignore[attr-defined]
