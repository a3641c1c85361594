"""One simulation run: build the cluster, run workload and nemesis, heal, check, report.

``run(options)`` is synchronous: it owns a fresh VirtualLoop. The seed (with the options)
determines everything, so the same seed gives the same trace hash.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from regionsync.config import load_settings
from regionsync.core import invariants
from regionsync.core.capabilities import ALL, BASELINE
from regionsync.runtime.node import Node

from ._check import Monitor, Violation, check_final
from ._check_faults import (
    check_duplicate_window,
    check_edges,
    check_failover,
    check_refusals,
    duplicate_windows,
    pending_deliveries,
)
from ._cluster import SimCluster
from ._edges import Injected, edge_records
from ._loop import Deadlock, Livelock, VirtualLoop, run_virtual
from ._net import LinkFaults, SimNetwork
from ._options import Options
from ._receivers import ReceiverTransport
from ._workload import History, Workload
from ._world import SimClock, derive_rng

__all__ = ["Result", "plan_faults", "run"]

# the duplicate window's allowance for latency and a custody step after catching up
DUPLICATE_SLACK_S = 5.0
REGION_NAMES = ("eu-west", "us-east", "ap-south", "us-west", "eu-north", "sa-east", "ap-east")


@dataclass
class Result:
    options: Options
    violations: list[Violation] = field(default_factory=list)
    converged_after_s: float | None = None  # virtual seconds from heal to convergence
    heal_t: float = 0.0
    end_t: float = 0.0
    trace_hash: str = ""
    wall_s: float = 0.0
    loop_iterations: int = 0
    ops: dict[str, int] = field(default_factory=dict)
    events: list[tuple[float, str]] = field(default_factory=list)  # nemesis log
    timeline: list[tuple[float, dict[str, tuple[str | None, int]]]] = field(default_factory=list)
    net: dict[str, int] = field(default_factory=dict)
    deliveries: int = 0
    errors_logged: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def plan_faults(opts: Options, names: list[str]) -> list[tuple[float, str, dict[str, Any]]]:
    """The nemesis schedule: ``(t, action, params)`` sorted by time, drawn from the seed."""
    r = derive_rng(opts.seed, "nemesis")
    plan: list[tuple[float, str, dict[str, Any]]] = []
    horizon = opts.chaos_s
    for i in range(opts.partitions):
        kind = r.choice(opts.partition_kinds)
        dur = r.uniform(*opts.partition_s)
        start = r.uniform(0, max(horizon - dur, 1.0))
        shuffled = list(names)
        r.shuffle(shuffled)
        cut: set[tuple[str, str]] = set()
        if kind == "partial":
            bridge, rest = shuffled[0], shuffled[1:]
            k = r.randint(1, len(rest) - 1)
            a, b = rest[:k], rest[k:]
            cut = {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}
            desc = f"partial: {a} / {b}, {bridge} reaches all"
        else:
            k = r.randint(1, len(names) - 1)
            a, b = shuffled[:k], shuffled[k:]
            cut = {(x, y) for x in a for y in b}
            if kind == "symmetric":
                cut |= {(y, x) for x in a for y in b}
                desc = f"symmetric: {a} | {b}"
            else:
                desc = f"one-way: {a} -/-> {b}"
        pid = f"p{i}"
        plan.append((start, "partition", {"id": pid, "cut": sorted(cut), "desc": desc}))
        plan.append((start + dur, "unpartition", {"id": pid, "desc": desc}))
    for i in range(opts.crashes + opts.lost_disks):
        wipe = i >= opts.crashes
        down = r.uniform(*opts.crash_down_s)
        start = r.uniform(0, max(horizon - down, 1.0))
        plan.append((start, "crash", {"region": r.choice(names), "down_s": down, "wipe": wipe}))
    for i in range(opts.restores):
        name = r.choice(names)
        taken = r.uniform(0, horizon * 0.6)
        back = r.uniform(taken + 5.0, horizon)
        down = r.uniform(*opts.crash_down_s)
        plan.append((taken, "snapshot", {"region": name, "id": f"s{i}"}))
        plan.append((back, "restore", {"region": name, "id": f"s{i}", "down_s": down}))
    stepped = skewed_names(opts, names)
    for _ in range(opts.clock_steps):
        step = r.randint(-opts.clock_step_ms, opts.clock_step_ms)
        at, where = r.uniform(0, horizon), r.choice(stepped)
        plan.append((at, "clock_step", {"region": where, "ms": step}))
    plan += _failover_faults(opts, names)
    if opts.rolling_upgrade:  # own rng: other plans stay as they were
        ur = derive_rng(opts.seed, "upgrades")
        order = list(names)
        ur.shuffle(order)
        times = sorted(ur.uniform(*opts.upgrade_s) for _ in order)
        plan += [(t, "upgrade", {"region": n}) for t, n in zip(times, order, strict=True)]
        for _ in range(opts.rollbacks):
            t = ur.uniform(opts.upgrade_s[1], max(horizon - 60.0, opts.upgrade_s[1]))
            name = ur.choice(names)
            plan.append((t, "rollback", {"region": name}))
            plan.append((t + ur.uniform(10.0, 60.0), "upgrade", {"region": name}))
    er = derive_rng(opts.seed, "edges")  # own rng: other plans stay as they were
    for i in range(opts.edge_records):
        plan.append(
            (er.uniform(0, horizon), "edge_records", {"region": er.choice(names), "round": i})
        )
    plan.sort(key=lambda p: (p[0], p[1]))
    return plan


def skewed_names(opts: Options, names: list[str]) -> list[str]:
    """The regions whose clocks the nemesis sets off and steps: ``skewed_regions`` of
    them (own rng), or every region when it is 0."""
    if not opts.skewed_regions:
        return list(names)
    return derive_rng(opts.seed, "skewed").sample(names, opts.skewed_regions)


def _failover_faults(opts: Options, names: list[str]) -> list[tuple[float, str, dict[str, Any]]]:
    """The failover scenarios' faults (own rng: other plans stay as they were)."""
    if not opts.failover:
        return []
    r = derive_rng(opts.seed, "failover")
    horizon, after = opts.chaos_s, opts.failover_after_s
    victims = r.sample(names, 2)
    plan: list[tuple[float, str, dict[str, Any]]] = []
    if opts.failover in ("origin-dies", "two-die"):
        for i, victim in enumerate(victims[: 1 if opts.failover == "origin-dies" else 2]):
            plan.append((r.uniform(0.2, 0.6) * horizon + i * r.uniform(0, after), "die",
                         {"region": victim}))  # fmt: skip
    else:
        flaps = 1 if opts.failover == "cut-off" else r.randint(3, 5)
        t = r.uniform(0.05, 0.3) * horizon
        others = [n for n in names if n != victims[0]]
        cut = sorted({(victims[0], o) for o in others} | {(o, victims[0]) for o in others})
        for i in range(flaps):
            dur = r.uniform(1.5, 3.0) * after if flaps == 1 else r.uniform(0.5, 2.0) * after
            desc = f"cut off: {victims[0]} (flap {i + 1}/{flaps})"
            plan.append((t, "partition", {"id": f"f{i}", "cut": cut, "desc": desc}))
            plan.append((t + dur, "unpartition", {"id": f"f{i}", "desc": desc}))
            t += dur + r.uniform(10.0, 60.0)
    return plan


class _ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name}: {record.getMessage()}"[:300])


class _Sim:
    def __init__(self, opts: Options, node_classes: dict[str, type[Node]] | None):
        self.opts = opts
        self.names = list(REGION_NAMES[: opts.regions])
        r = derive_rng(opts.seed, "net")
        lat: dict[tuple[str, str], float] = {}
        for i, a in enumerate(self.names):
            for b in self.names[i + 1 :]:
                lat[(a, b)] = lat[(b, a)] = r.uniform(*opts.latency_ms)
        faults = LinkFaults(mode=opts.mode, loss=opts.loss, dup=opts.dup, reorder=opts.reorder)
        self.net = SimNetwork(derive_rng(opts.seed, "net-faults"), lat, faults)
        cr = derive_rng(opts.seed, "clocks")
        self.clocks = {
            n: SimClock(cr.randint(-opts.skew_ms, opts.skew_ms), cr.uniform(-1, 1) * opts.drift_ppm)
            for n in self.names
        }
        if opts.skewed_regions:  # a minority off by skew_ms, both ways; the others right
            skewed = skewed_names(opts, self.names)
            for n in self.names:
                sign = -1 if n in skewed and skewed.index(n) % 2 else 1
                self.clocks[n].skew_ms = sign * opts.skew_ms if n in skewed else 0
        self.receivers = ReceiverTransport(derive_rng(opts.seed, "receivers"))
        self.cluster = SimCluster(
            opts.seed, self.names, self.net, self.receivers, self.clocks, node_classes,
            replication={"failover_after_s": opts.failover_after_s,
                         # a StateChunk must fit a message too (config.py)
                         **({"max_message_bytes": opts.max_message_bytes,
                             "state_chunk_bytes": opts.max_message_bytes // 2}
                            if opts.max_message_bytes else {})},
            delivery={"retry_schedule_s": [5, 30, 60, 120, 300]} if opts.failover else {},
            ingest={"max_payload_bytes": opts.max_payload_bytes} if opts.max_payload_bytes else {},
        )  # fmt: skip
        if opts.rolling_upgrade:  # every region starts on the previous release
            for r in self.cluster.regions.values():
                r.reads = BASELINE
        self.cluster.force_new_form = opts.force_new_form
        self.dead: set[str] = set()  # regions that died for good
        failover = _failover_faults(opts, self.names)
        if failover:  # receivers are down until just after the first failover fault, so
            # the region that fails holds pending deliveries for its successors to adopt
            self.receivers.outage_until = failover[0][0] + 20.0
        self.history = History()
        self.monitor = Monitor(self.cluster, opts.stall_bound_s)
        self.workload = Workload(opts.seed, self.cluster, self.history, opts)
        self.result = Result(opts)
        self.partitions: dict[str, set[tuple[str, str]]] = {}
        self.restarts: list[asyncio.Task[None]] = []
        self.healing = False
        self.snapshots: dict[str, Any] = {}
        self.injected: list[Injected] = []

    def _check_duplicate_window(self) -> list[Violation]:
        """Duplicates of a long cut only within the README's window (sim/_check_faults.py)."""
        starts: dict[str, float] = {}
        cuts: list[tuple[float, float]] = []
        for t, action, p in _failover_faults(self.opts, self.names):
            if action == "partition":
                starts[p["id"]] = t
            elif action == "unpartition":
                cuts.append((starts.pop(p["id"]), t))
        settings = load_settings(
            None, region=self.names[0], replication=self.cluster.replication,
            delivery=self.cluster.delivery,
        )  # fmt: skip
        windows = duplicate_windows(
            cuts, settings.replication, settings.delivery.timeout_s, DUPLICATE_SLACK_S
        )
        return check_duplicate_window(self.receivers.receipts, windows)

    def note(self, text: str) -> None:
        self.result.events.append((asyncio.get_running_loop().time(), text))

    def _apply_cut(self) -> None:
        cut: set[tuple[str, str]] = set()
        for c in self.partitions.values():
            cut |= c
        self.net.set_cut(cut)

    async def _restart_later(self, name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        if self.healing or self.cluster.regions[name].up:
            return
        await self.cluster.boot(name)
        self.note(f"restart {name} (incarnation {self.cluster.regions[name].incarnations[-1]})")

    async def nemesis(self) -> None:
        loop = asyncio.get_running_loop()
        for t, action, p in plan_faults(self.opts, self.names):
            await asyncio.sleep(max(t - loop.time(), 0))
            if action == "partition":
                self.partitions[p["id"]] = set(map(tuple, p["cut"]))  # type: ignore[arg-type]
                self._apply_cut()
                self.note(f"partition {p['desc']}")
            elif action == "unpartition":
                self.partitions.pop(p["id"], None)
                self._apply_cut()
                self.note(f"heal {p['desc']}")
            elif action == "crash":
                name = p["region"]
                if not self.cluster.regions[name].up:
                    continue
                if p["wipe"]:
                    self.monitor.sample(loop.time(), record=False)
                    lost = self.monitor.mark_lost(name, self.history)
                    self.note(f"lost disk {name} for {p['down_s']:.0f}s ({lost} ops only there)")
                else:
                    self.note(f"crash {name} for {p['down_s']:.0f}s")
                self.workload.abort_region(name)
                await self.cluster.crash(name, wipe=p["wipe"])
                self.restarts.append(asyncio.create_task(self._restart_later(name, p["down_s"])))
            elif action == "die":
                name = p["region"]
                if not self.cluster.regions[name].up:
                    continue
                self.monitor.sample(loop.time(), record=False)
                lost = self.monitor.mark_lost(name, self.history)
                self.note(f"{name} dies for good ({lost} ops only there)")
                self.dead.add(name)
                self.workload.abort_region(name)
                await self.cluster.crash(name)
            elif action == "snapshot":
                if self.cluster.regions[p["region"]].up:
                    self.snapshots[p["id"]] = self.cluster.snapshot(p["region"])
                    self.note(f"snapshot {p['region']} ({p['id']})")
            elif action == "restore":
                name = p["region"]
                snap = self.snapshots.pop(p["id"], None)
                if snap is None or not self.cluster.regions[name].up:
                    continue
                self.monitor.sample(loop.time(), record=False)
                lost = self.monitor.mark_lost(name, self.history)
                down = p["down_s"]
                self.note(
                    f"restore {name} from {p['id']} after {down:.0f}s ({lost} ops only there)"
                )
                self.workload.abort_region(name)
                await self.cluster.crash(name, restore=snap)
                self.monitor.forget(name)
                self.restarts.append(asyncio.create_task(self._restart_later(name, p["down_s"])))
            elif action == "edge_records":
                await self._inject_edges(p["region"], p["round"])
            elif action in ("upgrade", "rollback"):
                await self._upgrade(p["region"], ALL if action == "upgrade" else BASELINE)
            elif action == "clock_step":
                self.clocks[p["region"]].skew_ms += p["ms"]
                self.note(f"clock step {p['region']} {p['ms']:+d} ms")

    async def _upgrade(self, name: str, reads: frozenset[str]) -> None:
        """Restart ``name`` on this release (``reads`` ALL) or the previous one
        (BASELINE, a rollback); one that is down (a crash) boots on it when it is back."""
        r = self.cluster.regions[name]
        r.reads = reads
        what = "upgrade" if reads == ALL else "roll back"
        if not r.up:
            self.note(f"{what} {name} (down: boots on that release)")
            return
        self.workload.abort_region(name)
        await self.cluster.crash(name)
        await self.cluster.boot(name)
        self.note(f"{what} {name} (incarnation {r.incarnations[-1]})")

    async def _inject_edges(self, name: str, round_: int) -> None:
        """A rogue peer's batch at the edge of every range, applied by ``name``'s replica
        (the path a peer's Batch takes); the outcome of each record goes to check_edges."""
        node = self.cluster.regions[name].node
        if node is None or not node.started:
            return
        loop = asyncio.get_running_loop()
        rng = derive_rng(self.opts.seed, "edge-records", round_)
        max_drift = node.settings.replication.max_drift_ms
        records, keys, must = edge_records(rng, node.clock.wall_ms(), max_drift, round_)
        inj = Injected(name, loop.time(), records, keys, must)
        before = node.counters["records_rejected"]
        rejected = {(e.origin, e.seq) for e in await node.replica.apply_records(records)}
        inj.counted = node.counters["records_rejected"] - before
        for r in records:
            if (r.origin, r.seq) in rejected:
                inj.outcome[(r.origin, r.seq)] = "rejected"
            elif node.writer.version_vector.get(r.origin, 0) >= r.seq:
                inj.outcome[(r.origin, r.seq)] = "merged"
            else:
                inj.outcome[(r.origin, r.seq)] = "held"
        self.injected.append(inj)
        counts = {k: list(inj.outcome.values()).count(k) for k in ("merged", "rejected", "held")}
        self.note(f"edge records into {name} (round {round_}): {counts}")

    async def heal(self) -> None:
        self.healing = True
        self.partitions.clear()
        self._apply_cut()
        f = self.net.faults
        f.loss = f.dup = f.reorder = 0.0
        for c in self.clocks.values():
            c.skew_ms, c.drift_ppm = 0, 0.0
        for t in self.restarts:
            t.cancel()
        for name, r in sorted(self.cluster.regions.items()):
            if not r.up and name not in self.dead:
                await self.cluster.boot(name)
        self.note("heal everything (network, clocks, restart down regions)")

    async def sampler(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        step = max(self.opts.sample_s, (self.opts.chaos_s + 300) / 600)
        next_record = 0.0
        while not stop.is_set():
            now = loop.time()
            record = now >= next_record
            if record:
                next_record = now + step
            self.monitor.sample(now, record)
            await asyncio.sleep(self.opts.sample_s)

    async def main(self) -> Result:
        loop = asyncio.get_running_loop()
        res = self.result
        for name in self.names:
            await self.cluster.boot(name)
        stop = asyncio.Event()
        sampler = asyncio.create_task(self.sampler(stop))
        nemesis = asyncio.create_task(self.nemesis())
        self.workload.start()
        await asyncio.sleep(self.opts.chaos_s)
        nemesis.cancel()
        await asyncio.gather(nemesis, return_exceptions=True)
        await self.heal()
        res.heal_t = loop.time()
        await self.workload.stop()
        deadline = res.heal_t + self.opts.heal_budget_s
        while loop.time() < deadline:
            if self.monitor.converged(frozenset(self.dead)):
                res.converged_after_s = loop.time() - res.heal_t
                break
            await asyncio.sleep(self.opts.sample_s)
        if self.opts.failover:
            while loop.time() < deadline and await pending_deliveries(self.cluster):  # noqa: ASYNC110
                await asyncio.sleep(self.opts.sample_s)
        self.monitor.sample(loop.time(), record=True)
        stop.set()
        await sampler
        res.end_t = loop.time()
        res.violations = list(self.monitor.violations)
        if res.converged_after_s is None:
            detail = ", ".join(
                f"{n}={h[:8] if h else 'down'}/behind {b}"
                for n, (h, b) in self.monitor.snapshot().items()
            )
            res.violations.append(
                Violation(
                    "convergence",
                    f"not converged {self.opts.heal_budget_s:.0f}s after healing: {detail}",
                )
            )
        res.violations += check_refusals(self.cluster, self.opts.rolling_upgrade)  # harvests
        rebased = self.monitor.rebased | self.cluster.rebased  # a boot the monitor missed
        res.violations += await check_final(
            self.cluster, self.history, self.opts.lww_bound_s, rebased
        )
        limit = self.opts.max_message_bytes
        if limit and self.net.largest > limit:  # gRPC would have refused it
            detail = f"a {self.net.largest}-byte message; max_message_bytes {limit}"
            res.violations.append(Violation("message_size", detail))
        if self.opts.edge_records:
            res.violations += await check_edges(self.cluster, self.injected)
        if self.opts.failover:
            res.violations += await check_failover(self.cluster, self.history)
        if self.opts.failover in ("cut-off", "flapping"):
            res.violations += self._check_duplicate_window()
        res.violations += [Violation("exception", u) for u in self.history.unexpected]
        res.ops = self.history.by_status()
        res.timeline = self.monitor.timeline
        res.net = dict(vars(self.net.stats))
        await self.cluster.stop_all()
        # the trace ends here: what the loop's teardown cancels (in no set order) is not in it
        res.deliveries = len(self.receivers.receipts)
        return res

    def trace_hash(self) -> str:
        h = hashlib.sha256()
        for op in self.history.ops:
            h.update(op.line().encode() + b"\n")
        for t, text in self.result.events:
            h.update(f"{t:.6f} {text}\n".encode())
        for t, snap in self.result.timeline:
            h.update(f"{t:.6f} {sorted(snap.items())}\n".encode())
        receipts = self.receivers.receipts
        for x in receipts[: self.result.deliveries] if self.result.end_t else receipts:
            h.update(f"{x.at:.6f} {x.host} {x.webhook_id} {x.status}\n".encode())
        h.update(repr(sorted(self.result.net.items())).encode())
        h.update("\n".join(map(str, self.result.violations)).encode())
        return h.hexdigest()


def run(opts: Options, node_classes: dict[str, type[Node]] | None = None) -> Result:
    """Run one simulation; never raises for a failed check (see ``Result.violations``)."""
    started = time.perf_counter()  # wall time, only to report the cost of the run
    sim = _Sim(opts, node_classes)
    loop = VirtualLoop()
    errors = _ErrorLog()
    logger = logging.getLogger("regionsync")
    saved = (logger.level, logger.propagate)
    logger.addHandler(errors)
    logger.setLevel(logging.ERROR)
    logger.propagate = False
    unhandled: list[str] = []

    def on_error(_loop: object, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        unhandled.append(f"{context.get('message')}: {exc!r}"[:300])

    loop.set_exception_handler(on_error)
    mode, before = invariants.set_mode("raise"), invariants.broken.copy()  # core/invariants.py
    try:
        res = run_virtual(sim.main(), loop)
    except (Deadlock, Livelock) as exc:
        res = sim.result
        res.violations.append(Violation(type(exc).__name__.lower(), str(exc)))
    except Exception as exc:  # the node (or the harness) broke: still a verdict, not a crash
        res = sim.result
        res.violations.append(Violation("harness", f"{type(exc).__name__}: {exc}"[:300]))
    finally:
        logger.removeHandler(errors)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        invariants.set_mode(mode)
    broken = invariants.broken - before  # also those a broad except swallowed
    res.violations += [Violation("invariant", f"{n}x {m}") for m, n in sorted(broken.items())]
    res.violations += [Violation("unhandled", u) for u in unhandled[:20]]
    res.errors_logged = errors.lines
    res.violations += [Violation("logged_error", line) for line in errors.lines[:20]]
    res.loop_iterations = loop.iterations
    res.trace_hash = sim.trace_hash()
    res.wall_s = time.perf_counter() - started
    return res
