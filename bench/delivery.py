"""Delivery benchmark: attempt throughput vs raw aiohttp, and tarpit isolation of a real node.

In one run, on this machine, with receivers in their own process on 127.0.0.1:

1. Throughput. ``--concurrency`` workers POST the same signed-size body to a fast
   keep-alive receiver (answers 204) for ``--seconds`` each: first a raw aiohttp
   ``ClientSession`` loop (the baseline), then ``AiohttpSender``, the production sender
   (resolution through a stub resolver, SSRF check, pinning, bounded capture, total
   deadline). Goal: sender/raw >= 0.7x.
2. Tarpit isolation. A real ``Node`` (SqliteStore in a temp dir, in-memory peer
   transport, no peers, ``AiohttpSender`` over the system resolver with
   ``allow_private_networks = ["127.0.0.0/8"]``) with two endpoints on two receivers;
   a steady stream of events goes to both. Healthy latency = receiver arrival (wall
   clock) - event ``received_at_ms``. Run once with a fast neighbour, once with a
   neighbour that sleeps 9.5 s before answering; events of the first 2 s are warm-up and
   not counted. Goal: p99 with tarpit <= 1.2x without.

    .venv/bin/python bench/delivery.py [--seconds 5] [--concurrency 8] [--rate 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from regionsync.adapters.aiohttp_sender import AiohttpSender  # noqa: E402
from regionsync.adapters.memory_transport import MemoryNetwork  # noqa: E402
from regionsync.adapters.sqlite_store import SqliteStore  # noqa: E402
from regionsync.adapters.system import (  # noqa: E402
    SystemClock,
    SystemResolver,
    UlidSource,
    system_rng,
)
from regionsync.config import load_settings  # noqa: E402
from regionsync.core.retry import OutcomeKind  # noqa: E402
from regionsync.core.urlguard import parse_networks  # noqa: E402
from regionsync.runtime.node import Node  # noqa: E402
from regionsync.runtime.ports import OutboundRequest  # noqa: E402

BODY = json.dumps({"type": "order.created", "data": {"id": "ord_1", "items": ["x"] * 40}}).encode()

RECEIVER = r"""
import asyncio, json, sys, time

class Rcv(asyncio.Protocol):
    def __init__(self, delay, arrivals):
        self.delay, self.arrivals, self.buf = delay, arrivals, bytearray()
    def connection_made(self, t):
        self.t = t
    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end])
            n, wid = 0, None
            for line in head.split(b"\r\n"):
                name = line[:16].lower()
                if name.startswith(b"content-length:"):
                    n = int(line[15:])
                elif name.startswith(b"webhook-id:"):
                    wid = line[11:].strip().decode()
            if len(self.buf) < end + 4 + n:
                return
            del self.buf[: end + 4 + n]
            if head.startswith(b"GET /stats"):
                body = json.dumps(self.arrivals).encode()
                self.arrivals.clear()
                self.t.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                continue
            if wid is not None:
                self.arrivals.append([wid, time.time() * 1000])
            if self.delay:
                asyncio.get_running_loop().call_later(self.delay, self._answer)
            else:
                self._answer()
    def _answer(self):
        if not self.t.is_closing():
            self.t.write(b"HTTP/1.1 204 No Content\r\n\r\n")

async def main():
    servers = []
    for delay in map(float, sys.argv[1:]):
        arrivals = []
        s = await asyncio.get_running_loop().create_server(
            lambda d=delay, a=arrivals: Rcv(d, a), "127.0.0.1", 0, backlog=1024)
        servers.append(s)
    print(" ".join(str(s.sockets[0].getsockname()[1]) for s in servers), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


class Receivers:
    """Receivers in a child process, one per delay (seconds before answering)."""

    def __init__(self, *delays: float):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RECEIVER, *map(str, delays)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.ports = [int(p) for p in self.proc.stdout.readline().split()]

    async def arrivals(self, port: int) -> list[tuple[str, float]]:
        async with httpx.AsyncClient(trust_env=False) as c:
            r = await c.get(f"http://127.0.0.1:{port}/stats")
        return [(w, t) for w, t in r.json()]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


class StubResolver:
    async def resolve(self, host: str, port: int) -> list[str]:
        return ["127.0.0.1"]


HEADERS = {
    "content-type": "application/json",
    "webhook-id": "msg_bench",
    "webhook-timestamp": "1700000000",
    "webhook-signature": "v1," + "A" * 44,
}


async def _drive(call, seconds: float, concurrency: int) -> tuple[int, int]:
    stop = time.perf_counter() + seconds
    ok = bad = 0

    async def worker() -> None:
        nonlocal ok, bad
        while time.perf_counter() < stop:
            if await call():
                ok += 1
            else:
                bad += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ok, bad


async def throughput(seconds: float, concurrency: int) -> tuple[float, float]:
    rcv = Receivers(0.0)
    port = rcv.ports[0]
    try:
        conn = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=conn) as client:
            url = f"http://127.0.0.1:{port}/hook"

            async def raw() -> bool:
                async with client.post(url, data=BODY, headers=HEADERS) as r:
                    await r.read()
                    return r.status == 204

            await _drive(raw, 0.5, concurrency)  # warm up connections
            t0 = time.perf_counter()
            ok, bad = await _drive(raw, seconds, concurrency)
            raw_rate = ok / (time.perf_counter() - t0)
        print(f"  raw aiohttp ClientSession: {raw_rate:8.0f} deliveries/s ({ok} ok, {bad} failed)")

        sender = AiohttpSender(StubResolver(), parse_networks(["127.0.0.0/8"]))
        req = OutboundRequest(f"http://receiver.test:{port}/hook", HEADERS, BODY, 15.0)

        async def guarded() -> bool:
            return (await sender.send(req)).kind is OutcomeKind.SUCCEEDED

        await _drive(guarded, 0.5, concurrency)
        t0 = time.perf_counter()
        ok, bad = await _drive(guarded, seconds, concurrency)
        sender_rate = ok / (time.perf_counter() - t0)
        await sender.aclose()
        print(
            f"  AiohttpSender (guarded):   {sender_rate:8.0f} deliveries/s ({ok} ok, {bad} failed)"
        )
    finally:
        rcv.close()
    return raw_rate, sender_rate


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def isolation_run(neighbour_delay: float, rate: float, seconds: float) -> dict[str, float]:
    rcv = Receivers(0.0, neighbour_delay)
    healthy_port, neighbour_port = rcv.ports
    tmp = tempfile.TemporaryDirectory(prefix="regionsync-bench-")
    settings = load_settings(
        None,
        region="bench",
        peers=[],
        data_dir=tmp.name,
        delivery={"allow_private_networks": ["127.0.0.0/8"], "timeout_s": 15.0},
    )
    clock, rng = SystemClock(), system_rng()
    resolver = SystemResolver()
    node = Node(
        settings,
        store=SqliteStore(Path(tmp.name) / "bench.db"),
        clock=clock,
        rng=rng,
        ids=UlidSource(clock, rng),
        transport=MemoryNetwork().transport("bench"),
        sender=AiohttpSender(resolver, parse_networks(["127.0.0.0/8"])),
        resolver=resolver,
    )
    await node.start()
    received_at: dict[str, int] = {}
    try:
        await node.registry_ops.create_tenant("acme", "Acme")
        for port in (healthy_port, neighbour_port):
            await node.registry_ops.create_endpoint(
                "acme",
                {
                    "url": f"http://127.0.0.1:{port}/hook",
                    "event_types": ["order.created"],
                    "rate_limit_per_s": max(100, int(rate * 2)),
                },
            )
        interval = 1.0 / rate
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            event, _ = await node.ingest.publish("acme", "order.created", BODY, None)
            received_at[event.id] = event.received_at_ms
        deadline = time.perf_counter() + 5.0
        arrivals: dict[str, float] = {}
        while time.perf_counter() < deadline:
            arrivals.update(await rcv.arrivals(healthy_port))
            if all(e in arrivals for e in received_at):
                break
            await asyncio.sleep(0.2)
        neighbour = await rcv.arrivals(neighbour_port)
    finally:
        stop_t0 = time.perf_counter()
        await node.stop()
        stop_s = time.perf_counter() - stop_t0
        await node.sender.aclose()  # type: ignore[attr-defined]
        rcv.close()
        tmp.cleanup()
    warm = min(received_at.values(), default=0) + 2000  # first 2 s: connections, caches
    measured = [e for e in received_at if received_at[e] >= warm]
    lat = [arrivals[e] - received_at[e] for e in measured if e in arrivals]
    return {
        "events": len(measured),
        "delivered": len(lat),
        "neighbour_arrivals": len(neighbour),
        "p50": _pct(lat, 0.50),
        "p99": _pct(lat, 0.99),
        "max": max(lat) if lat else float("nan"),
        "stop_s": stop_s,
    }


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="throughput phase, each")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rate", type=float, default=50.0, help="events/s in the tarpit phase")
    ap.add_argument("--stream-seconds", type=float, default=12.0)
    args = ap.parse_args()
    print(f"bench/delivery.py: {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    print(f"[1] throughput to one fast loopback receiver, concurrency {args.concurrency}")
    raw_rate, sender_rate = await throughput(args.seconds, args.concurrency)
    ratio = sender_rate / raw_rate
    print(
        f"[2] healthy endpoint latency, real node, {args.rate:.0f} events/s for "
        f"{args.stream_seconds:.0f} s to two endpoints"
    )
    runs = {}
    for label, delay in (("fast neighbour", 0.0), ("tarpit neighbour (9.5 s)", 9.5)):
        r = await isolation_run(delay, args.rate, args.stream_seconds)
        runs[label] = r
        print(
            f"  {label:26s} healthy p50 {r['p50']:7.1f} ms  p99 {r['p99']:7.1f} ms  "
            f"max {r['max']:7.1f} ms  delivered {r['delivered']}/{r['events']}  "
            f"neighbour answered-or-arrived {r['neighbour_arrivals']}  stop {r['stop_s']:.1f} s"
        )
    base, tarpit = runs["fast neighbour"], runs["tarpit neighbour (9.5 s)"]
    p99_ratio = tarpit["p99"] / base["p99"]
    complete = tarpit["delivered"] == tarpit["events"] and base["delivered"] == base["events"]
    print("results")
    verdict = "PASS" if ratio >= 0.7 else "FAIL"
    print(f"  sender/raw throughput  {ratio:5.2f}x  goal >= 0.7x  {verdict}")
    ok2 = p99_ratio <= 1.2 and complete
    print(
        f"  p99 tarpit/fast        {p99_ratio:5.2f}x  goal <= 1.2x  {'PASS' if ok2 else 'FAIL'}"
        + ("" if complete else "  (not every healthy delivery arrived)")
    )
    return 0 if ratio >= 0.7 and ok2 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
