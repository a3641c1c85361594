"""A small asyncio HTTP/1.1 load generator (keep-alive connections, raw sockets).

Run as a separate process so it does not share a core's event loop with the server:
``python bench/loadgen.py URL --connections 64 --seconds 5 [--rate R] [--body FILE]``.
Prints one JSON line: requests, errors, statuses, rps, p50/p90/p99 latency (ms).
``--rate`` paces requests open-loop at R per second across all connections (latency
then includes any queueing behind a slow server); without it every connection sends as
fast as answers come back (closed loop, for throughput). ``--unique-keys`` sends every
request with an ``Idempotency-Key`` never sent before (a new key per publish, as clients
that set one per message do).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from urllib.parse import urlsplit


async def _worker(host, port, path, body, headers, deadline, lat, statuses, ticks,
                  keys: str | None = None) -> int:  # fmt: skip
    """One keep-alive connection; ``keys``: a prefix of this connection's unique keys."""
    reader, writer = await asyncio.open_connection(host, port)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{headers}"
    ).encode()
    request = head + b"\r\n" + body
    errors = sent = 0
    try:
        while time.perf_counter() < deadline:
            if keys is not None:
                sent += 1
                request = head + f"Idempotency-Key: {keys}-{sent}\r\n\r\n".encode() + body
            if ticks is not None:
                due = await ticks.get()
                if due is None:
                    break
                start = due
            else:
                start = time.perf_counter()
            writer.write(request)
            status_line = await reader.readline()
            if not status_line:
                errors += 1
                break
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            lat.append((time.perf_counter() - start) * 1000)
            code = int(status_line.split()[1])
            statuses[code] = statuses.get(code, 0) + 1
    except (ConnectionError, asyncio.IncompleteReadError):
        errors += 1
    finally:
        writer.close()
    return errors


async def _pacer(rate: float, deadline: float, ticks: asyncio.Queue, n: int) -> None:
    interval = 1.0 / rate
    nxt = time.perf_counter()
    while nxt < deadline:
        now = time.perf_counter()
        if nxt > now:
            await asyncio.sleep(nxt - now)
        ticks.put_nowait(nxt)
        nxt += interval
    for _ in range(n):
        ticks.put_nowait(None)


async def run(url: str, connections: int, seconds: float, rate: float | None, body: bytes,
              headers: str = "", unique_keys: bool = False) -> dict:  # fmt: skip
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    lat: list[float] = []
    statuses: dict[int, int] = {}
    t0 = time.perf_counter()
    deadline = t0 + seconds
    ticks: asyncio.Queue | None = asyncio.Queue() if rate else None
    run_id = f"{time.time_ns():x}"
    tasks = [
        _worker(parts.hostname, parts.port, path, body, headers, deadline, lat, statuses, ticks,
                f"{run_id}-{i}" if unique_keys else None)
        for i in range(connections)
    ]  # fmt: skip
    if rate:
        tasks.append(_pacer(rate, deadline, ticks, connections))
    results = await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    lat.sort()

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 3) if lat else float("nan")

    return {
        "requests": len(lat),
        "errors": sum(r for r in results if r),
        "statuses": statuses,
        "rps": round(len(lat) / elapsed, 1),
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "mean_ms": round(statistics.fmean(lat), 3) if lat else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=None)
    ap.add_argument("--body", default=None, help="file with the request body")
    ap.add_argument("--unique-keys", action="store_true", help="a new Idempotency-Key each")
    args = ap.parse_args()
    body = open(args.body, "rb").read() if args.body else b'{"event_type":"a","payload":{}}'
    job = run(args.url, args.connections, args.seconds, args.rate, body, "", args.unique_keys)
    try:
        import uvloop

        result = uvloop.run(job)
    except ImportError:
        result = asyncio.run(job)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
