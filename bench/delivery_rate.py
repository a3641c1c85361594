"""Delivery rate benchmark (issue 17): the node's sustained signed deliveries/s against an
aiohttp ClientSession loop at concurrency 8, both posting to the same bare ASGI receiver.

In one run, on this machine:

1. a bare ASGI receiver (uvicorn, httptools, uvloop when installed) in its own process,
   answering 204 and counting arrivals per ``webhook-id``;
2. the baseline: an aiohttp ``ClientSession`` loop in this process, 8 requests in flight,
   posting the same ~1.5 KB JSON body and headers a delivery carries;
3. a regionsync node (``regionsync serve``, SQLite ``synchronous=FULL``, no peers) in its
   own process with one endpoint (rate limit 10,000/s, 64 in flight; the tenant cap
   raised to match): a 3,000-event backlog re-sent by ``replay-missing`` after a pause,
   then 3,000 live publishes (64 publishing clients).

The node's rate is distinct deliveries arrived per second between the first and the last
arrival; every delivery is checked to have arrived (none missing) and the duplicates are
counted. Prints each figure, the ratios to the baseline and PASS/FAIL against 0.5x.
``--profile DIR`` attaches ``py-spy record`` to the node during the replay and writes a
top table (``bench/profiles/`` keeps the committed ones).

    .venv/bin/python bench/delivery_rate.py [--events 3000] [--seconds 5] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

from regionsync.demo import free_port

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.5

# ~1.5 KB of JSON, delivered inside the Standard Webhooks envelope
PAYLOAD = {
    "id": "ord_1",
    "customer": {"id": "cus_1", "email": "someone@example.com", "name": "Some One"},
    "items": [{"sku": f"sku-{i:04d}", "qty": i % 3 + 1, "price": "12.50"} for i in range(24)],
}
BODY = json.dumps({"type": "order.created", "timestamp": "2026-01-01T00:00:00Z",
                   "data": PAYLOAD}).encode()  # fmt: skip
HEADERS = {
    "content-type": "application/json",
    "user-agent": "regionsync/0.1 (+https://github.com/regionsync)",
    "webhook-timestamp": "1700000000",
    "webhook-signature": "v1," + "A" * 44,
}

RECEIVER_APP = """
import json, time

arrivals = []  # (webhook-id, unix seconds)

async def app(scope, receive, send):
    if scope["type"] != "http":
        while scope["type"] == "lifespan":
            kind = (await receive())["type"]
            await send({"type": kind + ".complete"})
            if kind == "lifespan.shutdown":
                return
        return
    more = True
    while more:
        msg = await receive()
        more = msg.get("more_body", False)
    if scope["method"] == "GET":
        if scope["path"] == "/count":  # cheap to poll: no list of arrivals encoded
            body = str(len(arrivals)).encode()
        else:
            body = json.dumps(arrivals).encode()
        if scope["path"] == "/reset":
            arrivals.clear()
            body = b"[]"
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})
        return
    wid = None
    for k, v in scope["headers"]:
        if k == b"webhook-id":
            wid = v.decode()
            break
    arrivals.append((wid, time.time()))
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})
"""


async def wait_ready(session: aiohttp.ClientSession, url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            async with session.get(url) as r:
                if r.status < 500:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise TimeoutError(url)


class Receiver:
    """The bare ASGI receiver in its own process."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="regionsync-rcv-"))
        (self.dir / "rcv_app.py").write_text(RECEIVER_APP)
        self.port = free_port()
        loop = "uvloop" if _has("uvloop") else "asyncio"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "rcv_app:app", "--port", str(self.port),
             "--loop", loop, "--http", "httptools", "--no-access-log", "--log-level",
             "warning", "--backlog", "1024"],
            cwd=self.dir,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"

    async def arrivals(self, session: aiohttp.ClientSession, reset: bool = False) -> list:
        async with session.get(self.url + ("/reset" if reset else "/stats")) as r:
            return await r.json()

    async def count(self, session: aiohttp.ClientSession) -> int:
        """Arrivals so far, duplicates included (the list itself is not sent: encoding it
        on every poll would take CPU from what is measured, more as arrivals grow)."""
        async with session.get(self.url + "/count") as r:
            return int(await r.text())

    async def wait_for(self, session: aiohttp.ClientSession, want: set[str], timeout_s: float,
                       poll_s: float = 0.25) -> list:  # fmt: skip
        """Poll the count until ``len(want)`` arrivals (or ``timeout_s``), then fetch the
        arrivals, again once a second while an id of ``want`` is missing (duplicates
        count). Returns the last list fetched."""
        deadline = time.monotonic() + timeout_s
        while True:
            if await self.count(session) >= len(want) or time.monotonic() >= deadline:
                arrivals = await self.arrivals(session)
                if want <= {w for w, _ in arrivals} or time.monotonic() >= deadline:
                    return arrivals
                poll_s = max(poll_s, 1.0)  # a duplicate counted: the list, less often
            await asyncio.sleep(poll_s)

    def close(self) -> None:
        _stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # a server waiting on keep-alive connections
        proc.kill()
        proc.wait()


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


async def baseline(rcv: Receiver, seconds: float, concurrency: int) -> float:
    """Requests/s of an aiohttp ClientSession loop at ``concurrency`` in flight."""
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as s:
        url = rcv.url + "/hook"
        stop = 0.0
        ok = 0

        async def worker(i: int) -> None:
            nonlocal ok
            n = 0
            while time.perf_counter() < stop:
                n += 1
                h = {**HEADERS, "webhook-id": f"msg_{i}_{n}"}
                async with s.post(url, data=BODY, headers=h) as r:
                    await r.read()
                    ok += r.status == 204

        stop = time.perf_counter() + 0.5  # warm up the connections
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        ok = 0
        t0 = time.perf_counter()
        stop = t0 + seconds
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        rate = ok / (time.perf_counter() - t0)
        await rcv.arrivals(s, reset=True)
    return rate


class NodeProc:
    """``regionsync serve`` in its own process, with one tenant and one endpoint."""

    def __init__(self, rcv: Receiver) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="regionsync-bench-"))
        port = free_port()
        (self.dir / "node.toml").write_text(
            f'region = "bench-1"\ndata_dir = "{self.dir}"\nhttp_listen = "127.0.0.1:{port}"\n'
            f'grpc_listen = "127.0.0.1:{free_port()}"\nlog_level = "warning"\n'
            '[delivery]\nallow_private_networks = ["127.0.0.0/8"]\ntenant_max_in_flight = 64\n'
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "regionsync.cli", "serve", "--config",
             str(self.dir / "node.toml")]
        )  # fmt: skip
        self.base = f"http://127.0.0.1:{port}"
        self.rcv = rcv
        self.endpoint = ""  # its path, once setup created it (the id is generated)

    async def setup(self, s: aiohttp.ClientSession) -> None:
        await wait_ready(s, self.base + "/readyz")
        async with s.post(self.base + "/v1/tenants", json={"id": "t", "name": "Bench"}) as r:
            assert r.status == 201, await r.text()
        ep = {"url": self.rcv.url + "/hook", "event_types": ["*"],
              "rate_limit_per_s": 10_000, "max_in_flight": 64}  # fmt: skip
        async with s.post(self.base + "/v1/tenants/t/endpoints", json=ep) as r:
            assert r.status == 201, await r.text()
            self.endpoint = f"{self.base}/v1/tenants/t/endpoints/{(await r.json())['id']}"

    async def patch(self, s: aiohttp.ClientSession, fields: dict) -> None:
        async with s.patch(self.endpoint, json=fields) as r:
            assert r.status == 200, await r.text()

    async def counts(self, s: aiohttp.ClientSession) -> dict:
        async with s.get(self.base + "/v1/cluster") as r:
            return (await r.json())["counts"]

    async def publish(self, s: aiohttp.ClientSession, n: int, concurrency: int) -> list[str]:
        """Publish ``n`` events; returns their ids (each answered 202)."""
        ids: list[str] = []
        body = json.dumps({"event_type": "order.created", "payload": PAYLOAD}).encode()
        todo = iter(range(n))

        async def worker() -> None:
            for _ in todo:
                async with s.post(self.base + "/v1/tenants/t/events", data=body,
                                  headers={"content-type": "application/json"}) as r:  # fmt: skip
                    assert r.status == 202, await r.text()
                    ids.append((await r.json())["id"])

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return ids

    def close(self) -> None:
        _stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


async def collect(s: aiohttp.ClientSession, rcv: Receiver, ids: list[str],
                  timeout_s: float) -> dict:  # fmt: skip
    """Wait until every id arrived (or ``timeout_s``); rate over first..last arrival."""
    want = set(ids)
    arrivals = await rcv.wait_for(s, want, timeout_s)
    seen = Counter(w for w, _ in arrivals)
    times = sorted(t for _, t in arrivals)
    span = times[-1] - times[0] if len(times) > 1 else float("nan")
    arrived = len(want & set(seen))
    return {
        "events": len(want),
        "arrived": arrived,
        "duplicates": sum(c - 1 for c in seen.values() if c > 1),
        "seconds": round(span, 3),
        "rate": round(arrived / span, 1) if span == span and span > 0 else 0.0,
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its running child processes (the
    node's sender process) so far, all their threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    children = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            children.update(int(c) for c in (task / "children").read_text().split())
    return own + sum(cpu_seconds(c) for c in children if Path(f"/proc/{c}").exists())


class Profiler:
    """``py-spy record`` (raw collapsed stacks) attached to ``pid`` until stopped."""

    def __init__(self, pid: int, out: Path, gil: bool = False):
        self.raw = out.with_suffix(".raw.txt")
        self.out = out
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid),
             "--format", "raw", "--rate", "200", "--threads", "--output", str(self.raw),
             "--nonblocking", *(["--gil"] if gil else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self) -> None:
        self.proc.send_signal(2)  # SIGINT: py-spy writes its output and exits
        self.proc.wait(timeout=30)
        self.out.write_text(top_table(self.raw.read_text()))
        self.raw.unlink()


def top_table(raw: str, rows: int = 40) -> str:
    """A ``py-spy top``-like table from collapsed stacks: own and total % per function,
    and the share of samples per thread."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    n = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        n += c
        frames = stack.split(";")
        threads[frames[0]] += c
        funcs = frames[1:] or frames
        own[funcs[-1]] += c
        for f in set(funcs):
            total[f] += c
    lines = [f"samples: {n}", "", "%thread  thread"]
    lines += [f"{100 * c / n:6.1f}%  {t}" for t, c in threads.most_common(10)]
    lines += ["", "  %own  %total  function (file:line)"]
    for f, c in own.most_common(rows):
        lines.append(f"{100 * c / n:6.1f}  {100 * total[f] / n:6.1f}  {f}")
    lines += ["", "by %total:", "  %own  %total  function (file:line)"]
    for f, c in total.most_common(rows):
        lines.append(f"{100 * own[f] / n:6.1f}  {100 * c / n:6.1f}  {f}")
    return "\n".join(lines) + "\n"


async def node_runs(
    rcv: Receiver, events: int, profile: Path | None, gil: bool = False
) -> tuple[dict, dict]:
    node = NodeProc(rcv)
    try:
        async with aiohttp.ClientSession() as s:
            await node.setup(s)
            # replay: a backlog skipped while the endpoint was paused, re-sent by the job
            await node.patch(s, {"paused": True})
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
            ids = await node.publish(s, events, 16)
            deadline = time.monotonic() + 120
            while (await node.counts(s)).get("deliveries_skipped", 0) < events:
                if time.monotonic() > deadline:
                    raise TimeoutError("deliveries were not all skipped")
                await asyncio.sleep(0.2)
            await node.patch(s, {"paused": False})
            await rcv.arrivals(s, reset=True)
            prof = Profiler(node.proc.pid, profile, gil) if profile else None
            cpu0 = cpu_seconds(node.proc.pid), cpu_seconds(rcv.proc.pid), time.monotonic()
            async with s.post(node.endpoint + "/replay-missing", json={"since": since}) as r:
                assert r.status == 202, await r.text()
            replay = await collect(s, rcv, ids, 300)
            wall = time.monotonic() - cpu0[2]  # includes up to 0.25 s of collect's polling
            replay["node_cpu"] = round((cpu_seconds(node.proc.pid) - cpu0[0]) / wall, 2)
            replay["receiver_cpu"] = round((cpu_seconds(rcv.proc.pid) - cpu0[1]) / wall, 2)
            if prof:
                prof.stop()
            # live: publishes while the node delivers them (64 clients: with 16, each
            # waiting for its 202, the publish rate capped the delivery rate)
            await rcv.arrivals(s, reset=True)
            t0 = time.monotonic()
            ids = await node.publish(s, events, 64)
            published_s = time.monotonic() - t0
            live = await collect(s, rcv, ids, 300)
            # deliveries cannot follow faster than the events are published (each 202
            # after the group commit's fsync): the live rate's ceiling
            live["published_per_s"] = round(events / published_s, 1)
            await rcv.arrivals(s, reset=True)
    finally:
        node.close()
    return replay, live


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=3000)
    ap.add_argument("--seconds", type=float, default=5.0, help="baseline duration")
    ap.add_argument("--concurrency", type=int, default=8, help="baseline in flight")
    ap.add_argument("--profile", type=Path, help="write a py-spy top table of the replay here")
    ap.add_argument("--gil", action="store_true",
                    help="profile only samples holding the GIL (py-spy --gil)")  # fmt: skip
    args = ap.parse_args()
    print(f"bench/delivery_rate.py: {os.cpu_count()} cores, python {sys.version.split()[0]}, "
          f"aiohttp {aiohttp.__version__}, {len(BODY)}-byte bodies")  # fmt: skip
    rcv = Receiver()
    try:
        async with aiohttp.ClientSession() as s:
            await wait_ready(s, rcv.url + "/stats")
        base = await baseline(rcv, args.seconds, args.concurrency)
        print(f"  aiohttp ClientSession loop, {args.concurrency} in flight: {base:8.0f} req/s")
        replay, live = await node_runs(rcv, args.events, args.profile, args.gil)
    finally:
        rcv.close()
    ok = True
    for label, r in (("replay-missing backlog", replay), ("live publishes", live)):
        ratio = r["rate"] / base if base else 0.0
        complete = r["arrived"] == r["events"]
        passed = ratio >= GOAL and complete
        ok &= passed
        print(f"  node, {label:23s} {r['rate']:8.0f} deliveries/s  ({r['arrived']}/{r['events']}"
              f" arrived, {r['duplicates']} duplicates, {r['seconds']} s)")  # fmt: skip
        print(f"    ratio {ratio:5.2f}x  goal >= {GOAL}x  {'PASS' if passed else 'FAIL'}"
              + ("" if complete else "  (not every delivery arrived)"))  # fmt: skip
        if "node_cpu" in r:
            print(f"    CPU (core-seconds per second): node {r['node_cpu']}, "
                  f"receiver {r['receiver_cpu']}")  # fmt: skip
        if "published_per_s" in r:
            print(
                f"    published {r['published_per_s']:.0f} events/s meanwhile "
                f"({r['published_per_s'] / base if base else 0:.2f}x of the baseline)"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
