"""A real network partition between node processes on loopback: every peer link goes
through a TCP relay of this test process, which can cut it (every open connection
reset, new ones closed at once) and heal it. The nodes see what a partition does to
them: their gRPC streams break and reconnects fail until the heal."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from regionsync.demo import Cluster, spawn, stop_nodes, wait_ready, write_configs

__all__ = ["Relay", "partitioned_cluster"]


class Relay:
    """Forwards connections on its own loopback port to ``target`` unless cut."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.cut = False
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self.set_cut(True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def set_cut(self, cut: bool) -> None:
        self.cut = cut
        if cut:
            for w in list(self._writers):
                w.transport.abort()
            self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    if self.cut:
                        break
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}


@contextlib.asynccontextmanager
async def partitioned_cluster(
    root: Path, regions: tuple[str, ...], **delivery: object
) -> AsyncIterator[tuple[Cluster, dict[tuple[str, str], Relay]]]:
    """Node processes of ``regions`` whose peer links (``(from, to)``) each go through a
    Relay; stopped after. Configs as ``regionsync.demo.write_configs`` writes them."""
    configs = write_configs(root, regions, **delivery)
    grpc = {}
    for r, path in configs.items():
        grpc[r] = int(re.search(r'grpc_listen = "127\.0\.0\.1:(\d+)"', path.read_text())[1])
    relays: dict[tuple[str, str], Relay] = {}
    for r, path in configs.items():
        text = path.read_text()
        for p in regions:
            if p != r:
                relay = relays[(r, p)] = Relay(("127.0.0.1", grpc[p]))
                port = await relay.start()
                text = text.replace(f'address = "127.0.0.1:{grpc[p]}"',
                                    f'address = "127.0.0.1:{port}"')  # fmt: skip
        path.write_text(text)
    http = {r: "http://" + re.search(r'http_listen = "([^"]+)"', configs[r].read_text())[1]
            for r in regions}  # fmt: skip
    cluster = Cluster(root, http, {r: spawn(root, r, configs[r]) for r in regions})
    try:
        async with httpx.AsyncClient(timeout=5.0) as client:
            deadline = time.monotonic() + 60
            for r in regions:
                await wait_ready(client, http[r], deadline)
        yield cluster, relays
    finally:
        stop_nodes(cluster)
        for relay in relays.values():
            await relay.close()
