"""CPU per unit of work, measured the way an operator pays for it (issue 44): user +
system CPU seconds of a process tree from /proc, every thread, children included.

- ``tree_cpu(pid)``: ``utime + stime + cutime + cstime`` of ``pid`` and of every running
  descendant (found through ``/proc/<pid>/task/*/children``), in seconds. ``/proc/<pid>/stat``
  sums a process's threads; ``cutime``/``cstime`` hold the children it already reaped.
  A descendant that exits between two readings and is not reaped by then loses what it
  used since the first: PostgreSQL's postmaster reaps its backends and autovacuum
  workers at once, and the nodes start no short-lived processes.
- ``Meter(pids)``: the sum of ``tree_cpu`` over several trees between ``start`` and
  ``stop`` (a region of several node processes and its PostgreSQL server).
- ``per_1000(cpu_s, units)``: CPU milliseconds per unit = CPU seconds per 1,000 units.
- ``median_run``: the run whose ``key`` is the median of several (figures of one run are
  kept together, not medians of unrelated runs).
- ``Split(groups)``: per named group of process trees, between ``start`` and ``stop``:
  CPU seconds of each tree's root and of its descendants apart, and the context switches
  of their threads (voluntary: the thread slept and was woken; involuntary: preempted
  while it could run), with the machine's busy CPUs from ``/proc/stat``; ``report``
  prints them per unit (bench/pg_statements.py). PostgreSQL's backends come and go with
  connections, so its postmaster's reaped children count with its other children.
- ``RECEIVER_APP``: bench/delivery_rate.py's bare receiver, which also keeps, per arrival,
  the lag (ms) from the Standard Webhooks body's ``timestamp`` (the event's acceptance) to
  its arrival; ``GET /lags`` returns them. Same answers to ``/count``, ``/stats``,
  ``/reset`` as the original.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    # fields[0] is the state (field 3 of stat(5)): utime 14, stime 15, cutime 16, cstime 17
    return sum(int(f) for f in fields[11:15]) / _TICK


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                out.update(int(c) for c in (task / "children").read_text().split())
    return out


def _tree(root: int) -> Iterator[int]:
    """``root`` and its running descendants (each once)."""
    todo, seen = [root], set()
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            yield p
            todo.extend(_children(p))


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants so far (0.0 for a process gone)."""
    total = 0.0
    for p in _tree(pid):
        with contextlib.suppress(OSError):
            total += _stat_cpu(p)
    return total


class Meter:
    """CPU seconds used by the process trees of ``pids`` between start() and stop()."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = list(pids)
        self.begin = 0.0
        self.cpu_s = 0.0

    def now(self) -> float:
        return sum(tree_cpu(p) for p in self.pids)

    def start(self) -> Meter:
        self.begin = self.now()
        return self

    def stop(self) -> float:
        self.cpu_s = self.now() - self.begin
        return self.cpu_s


def _process(pid: int) -> dict[str, tuple[float, int, int]]:
    """Of ``pid``: ``"own"``: its CPU seconds (utime + stime); ``"reaped"``: those of the
    children it reaped (cutime + cstime); and per thread id, its voluntary and
    involuntary context switches."""
    f = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    out = {"own": ((int(f[11]) + int(f[12])) / _TICK, 0, 0),
           "reaped": ((int(f[13]) + int(f[14])) / _TICK, 0, 0)}  # fmt: skip
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            counts = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines())
            out[task.name] = (0.0, int(counts["voluntary_ctxt_switches"]),
                              int(counts["nonvoluntary_ctxt_switches"]))  # fmt: skip
    return out


def _busy() -> tuple[int, int, int]:
    """Busy and total jiffies of all CPUs so far, and the number of CPUs (``/proc/stat``:
    user, nice, system, idle, iowait, irq, softirq, steal; idle, iowait and steal are not
    busy; guest time is already in user)."""
    lines = Path("/proc/stat").read_text().splitlines()
    f = [int(x) for x in lines[0].split()[1:9]]
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3].isdigit())
    return sum(f) - f[3] - f[4] - f[7], sum(f), cpus


class Split:
    """CPU and context switches of named groups of process trees: each root apart (its
    index, or "main" for a group of one) and all their descendants together
    ("children", with what the roots reaped). Counted over the processes and threads
    seen at ``stop``, from zero for those started since ``start``; a thread that ended
    meanwhile is not counted, nor a descendant's CPU after ``start`` if it ended and its
    parent has not reaped it."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.groups = groups
        self.begin: dict[tuple, tuple[float, int, int]] = {}
        self.got: dict[tuple[str, str], list[float]] = {}
        self.busy_cores, self.cpus = 0.0, 0
        self._busy0 = (0, 0, 0)

    def _now(self) -> dict[tuple, tuple[float, int, int]]:
        """(group, part, pid, "own" | "reaped" | thread id) -> (CPU s, switches)."""
        out: dict[tuple, tuple[float, int, int]] = {}
        for name, roots in self.groups.items():
            for i, root in enumerate(roots):
                label = str(i) if len(roots) > 1 else "main"
                for p in _tree(root):
                    with contextlib.suppress(OSError):
                        for key, v in _process(p).items():
                            part = label if p == root and key != "reaped" else "children"
                            out[name, part, p, key] = v
        return out

    def start(self) -> Split:
        self.begin, self._busy0 = self._now(), _busy()
        return self

    def stop(self) -> Split:
        now, busy = self._now(), _busy()
        self.got = {}
        for key, v in now.items():
            was = self.begin.get(key, (0.0, 0, 0))
            got = self.got.setdefault(key[:2], [0.0, 0, 0])
            for k in range(3):
                got[k] += v[k] - was[k]
        self.cpus = busy[2]
        self.busy_cores = self.cpus * (busy[0] - self._busy0[0]) / max(1, busy[1] - self._busy0[1])
        return self

    def report(self, units: int, unit: str) -> None:
        print(f"  machine busy {self.busy_cores:.2f} of {self.cpus} CPUs; per {unit}: "
              "CPU ms, voluntary / involuntary context switches")  # fmt: skip
        for (name, part), (cpu, vol, invol) in sorted(self.got.items()):
            print(
                f"  {name + ' ' + part:24s} {per_1000(cpu, units):7.3f} "
                f"{vol / units:7.2f} {invol / units:7.2f}"
            )


def per_1000(cpu_s: float, units: int) -> float:
    """CPU seconds per 1,000 units (= CPU ms per unit); nan without units."""
    return 1000 * cpu_s / units if units else float("nan")


def median_run(runs: list[dict], key: str) -> dict:
    """The run whose ``key`` is the median (the lower middle of an even count), with
    ``key + "_runs"``: every run's value, in run order."""
    ordered = sorted(runs, key=lambda r: r[key])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen[key + "_runs"] = [round(r[key], 3) for r in runs]
    return chosen


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


RECEIVER_APP = """
import json, re, time
from datetime import datetime

arrivals = []  # (webhook-id, unix seconds)
lags = []  # ms from the body's "timestamp" (the event's acceptance) to arrival
STAMP = re.compile(rb'"timestamp":"([^"]+)"')

async def app(scope, receive, send):
    if scope["type"] != "http":
        while scope["type"] == "lifespan":
            kind = (await receive())["type"]
            await send({"type": kind + ".complete"})
            if kind == "lifespan.shutdown":
                return
        return
    chunks, more = [], True
    while more:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        more = msg.get("more_body", False)
    if scope["method"] == "GET":
        if scope["path"] == "/count":
            body = str(len(arrivals)).encode()
        elif scope["path"] == "/lags":
            body = json.dumps(lags).encode()
        else:
            body = json.dumps(arrivals).encode()
        if scope["path"] == "/reset":
            arrivals.clear()
            lags.clear()
            body = b"[]"
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})
        return
    now = time.time()
    wid = None
    for k, v in scope["headers"]:
        if k == b"webhook-id":
            wid = v.decode()
            break
    arrivals.append((wid, now))
    m = STAMP.search(b"".join(chunks)[:200])
    if m:
        stamp = datetime.fromisoformat(m.group(1).decode().replace("Z", "+00:00"))
        lags.append(round((now - stamp.timestamp()) * 1000, 2))
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})
"""
