"""Checkers: invariants during the run, and what must hold after everything healed.

During the run (``Monitor``): a Node's HLC never goes backwards; a store incarnation's
durable version vector only grows (across crash-restarts too, since it is durable).
At the end (``check_final``): every region's registry hash and version vector are equal;
acknowledged changes are visible under add-wins / LWW semantics; every acknowledged
event is held by its origin region and by every other; per-origin log records carry
strictly increasing HLC stamps. Operations whose outcome is unknown, and acknowledged ones
whose only copy went with a lost disk, may or may not count (Maelstrom's indeterminate
operations), so they can justify a state but are never demanded.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from crdt import LWWRegister, ORSet, decode
from regionsync.core.model import DeliveryStatus

from ._cluster import SimCluster
from ._edges import Injected
from ._workload import History, Op

__all__ = ["Monitor", "Violation", "check_edges", "check_final"]

_INF = 1 << 62


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.detail}"


class Monitor:
    """Samples every region: invariants, plus the convergence timeline for the report."""

    def __init__(self, cluster: SimCluster):
        self.cluster = cluster
        self.violations: list[Violation] = []
        self._hlc: dict[tuple[str, int], tuple[int, int]] = {}
        self._vv: dict[tuple[str, int], dict[str, int]] = {}
        self.known_vv: dict[str, dict[str, int]] = {n: {} for n in cluster.regions}
        self.timeline: list[tuple[float, dict[str, tuple[str | None, int]]]] = []

    def sample(self, t: float, record: bool) -> None:
        for name, r in sorted(self.cluster.regions.items()):
            node = r.node
            if node is None or not node.started:
                continue
            hlc = (node.writer.hlc.last.wall_ms, node.writer.hlc.last.logical)
            key = (name, r.boots)
            if key in self._hlc and hlc < self._hlc[key]:
                self.violations.append(
                    Violation(
                        "hlc", f"{name} boot {r.boots}: HLC {hlc} < {self._hlc[key]} at t={t:.3f}"
                    )
                )
            self._hlc[key] = hlc
            vkey = (name, node.writer.incarnation)
            prev = self._vv.get(vkey, {})
            now = dict(node.writer.durable_vv)
            for origin, seq in prev.items():
                if now.get(origin, 0) < seq:
                    self.violations.append(
                        Violation(
                            "version_vector",
                            f"{name} incarnation {node.writer.incarnation}: {origin} went {seq} -> "
                            f"{now.get(origin, 0)} at t={t:.3f}",
                        )
                    )
            self._vv[vkey] = now
            self.known_vv[name] = now
        if record:
            self.timeline.append((t, self.snapshot()))

    def snapshot(self) -> dict[str, tuple[str | None, int]]:
        top: dict[str, int] = {}
        for vv in self.known_vv.values():
            for o, s in vv.items():
                top[o] = max(top.get(o, 0), s)
        out: dict[str, tuple[str | None, int]] = {}
        for name, r in sorted(self.cluster.regions.items()):
            vv = self.known_vv[name]
            behind = sum(max(s - vv.get(o, 0), 0) for o, s in top.items())
            h = r.node.catalog.registry.state_hash() if r.up and r.node is not None else None
            out[name] = (h, behind)
        return out

    def converged(self, dead: frozenset[str] = frozenset()) -> bool:
        """Every region but the ``dead`` (gone for good) is up, with one registry hash
        and one version vector."""
        ups = self.cluster.up()
        if len(ups) != len(self.cluster.regions) - len(dead):
            return False
        hashes = {r.node.catalog.registry.state_hash() for r in ups if r.node is not None}
        vvs = {tuple(sorted(r.node.writer.durable_vv.items())) for r in ups if r.node is not None}
        return len(hashes) == 1 and len(vvs) == 1

    def forget(self, name: str) -> None:
        """The region's store was rolled back on purpose (a restore): its version vector
        may go down once, so stop comparing with what it held before."""
        self._vv = {k: v for k, v in self._vv.items() if k[0] != name}

    def mark_lost(self, wiped: str, history: History) -> int:
        """Before ``wiped`` loses its disk: mark operations whose record may exist nowhere
        else. Returns how many were marked."""
        n = 0
        for op in history.ops:
            if op.lost_with_disk or op.status not in ("ok", "unknown") or not op.actor:
                continue
            need = op.vv_after.get(op.actor, _INF) if op.status == "ok" else _INF
            held = any(
                vv.get(op.actor, 0) >= need for name, vv in self.known_vv.items() if name != wiped
            )
            if not held:
                op.lost_with_disk = True
                n += 1
        return n


def _counts(op: Op) -> bool:
    """Acknowledged and not lost: the change must be visible."""
    return op.status == "ok" and not op.lost_with_disk


def _maybe(op: Op) -> bool:
    """May have happened."""
    return op.status in ("ok", "unknown")


def _saw(later: Op, earlier: Op) -> bool:
    """True when ``later`` surely observed ``earlier`` (``earlier`` acknowledged)."""
    if earlier.status != "ok" or not earlier.actor:
        return False
    return later.vv_before.get(earlier.actor, 0) >= earlier.vv_after.get(earlier.actor, _INF)


async def check_final(cluster: SimCluster, history: History) -> list[Violation]:
    out: list[Violation] = []
    regions = cluster.up()
    states: dict[str, dict[str, Any]] = {}
    for r in regions:
        assert r.node is not None
        rows = await r.store.load_registry()
        states[r.name] = {k: decode(v) for k, v in rows.items()}
    ops = history.ops
    creates_t = defaultdict(list)
    eps: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.kind == "create_tenant":
            creates_t[op.args["tenant"]].append(op)
        elif "endpoint" in op.args:
            eps[op.args["endpoint"]].append(op)

    for name, st in states.items():

        def orset(key: str, st: dict[str, Any] = st) -> frozenset[Any]:
            s = st.get(key)
            return s.value() if isinstance(s, ORSet) else frozenset()

        tenants = orset("tenants")
        for t, cs in sorted(creates_t.items()):
            if any(map(_counts, cs)) and t not in tenants:
                out.append(Violation("lost_update", f"{name}: acknowledged tenant {t} missing"))
        for t in sorted(tenants):
            if not any(map(_maybe, creates_t.get(t, []))):
                out.append(Violation("phantom", f"{name}: tenant {t} never created"))

        for eid, eops in sorted(eps.items()):
            tenant = eops[0].args["tenant"]
            members = orset(f"t/{tenant}/endpoints")
            creates = [o for o in eops if o.kind == "create_endpoint"]
            deletes = [o for o in eops if o.kind == "delete_endpoint" and _maybe(o)]
            must = [
                c
                for c in creates
                if _counts(c) and not any(d.invoke_t >= c.invoke_t for d in deletes)
            ]
            if must and eid not in members:
                out.append(
                    Violation(
                        "add_wins",
                        f"{name}: endpoint {eid} created by op "
                        f"{must[0].id} and never deleted after, but absent",
                    )
                )
            if eid in members and not any(map(_maybe, creates)):
                out.append(Violation("phantom", f"{name}: endpoint {eid} never created"))

            types = orset(f"e/{eid}/event_types")
            adds: dict[str, list[Op]] = defaultdict(list)
            removes: dict[str, list[Op]] = defaultdict(list)
            for o in eops:
                if o.kind == "create_endpoint":
                    for x in o.args["event_types"]:
                        adds[x].append(o)
                elif o.kind == "patch_types":
                    for x in o.args["add"]:
                        adds[x].append(o)
                    for x in o.args["remove"]:
                        if _maybe(o):
                            removes[x].append(o)
            # deleting an endpoint removes its types, and creating its id again removes
            # what an earlier life left (observed-remove): either may have removed any
            # type added before it, except the types a create adds itself
            wipes = [o for o in eops if o.kind in ("delete_endpoint", "create_endpoint")
                     and _maybe(o)]  # fmt: skip
            for x, aops in sorted(adds.items()):
                must = [
                    a
                    for a in aops
                    if _counts(a)
                    and not any(r.invoke_t >= a.invoke_t for r in removes[x])
                    and not any(w is not a and w.invoke_t >= a.invoke_t for w in wipes)
                ]
                if must and x not in types:
                    out.append(
                        Violation(
                            "add_wins",
                            f"{name}: {eid} event type {x!r} added by "
                            f"op {must[0].id}, never removed after, but absent",
                        )
                    )
            for x in sorted(types):
                if not any(map(_maybe, adds.get(x, []))):
                    out.append(Violation("phantom", f"{name}: {eid} event type {x!r} never added"))

            reg = st.get(f"e/{eid}/description")
            writes = [
                o for o in eops if o.kind in ("create_endpoint", "patch_description") and _maybe(o)
            ]
            if isinstance(reg, LWWRegister) and not reg.is_empty:
                value = reg.value()
                acked = [w for w in writes if _counts(w)]
                maximal = [w for w in acked if not any(_saw(o, w) for o in acked if o is not w)]
                allowed = {w.args["description"] for w in maximal}
                allowed |= {w.args["description"] for w in writes if not _counts(w)}
                if value not in allowed:
                    out.append(
                        Violation(
                            "lww",
                            f"{name}: {eid} description {value!r}; causally maximal "
                            f"acknowledged writes {sorted(allowed)}",
                        )
                    )

    # events: held by the origin region, and by every region once converged
    for op in ops:
        if op.kind != "publish" or not _counts(op):
            continue
        for r in regions:
            if await r.store.get_event(op.result) is None:
                where = "origin" if r.name == op.region else "replica"
                out.append(
                    Violation(
                        "lost_event",
                        f"{r.name} ({where}): acknowledged event {op.result} of op {op.id} missing",
                    )
                )

    # per-origin log records carry strictly increasing HLC stamps
    if regions:
        records = await regions[0].store.records_after({}, 10**9)
        last: dict[str, tuple[int, int]] = {}
        for rec in records:
            if rec.origin in last and rec.hlc <= last[rec.origin]:
                out.append(
                    Violation(
                        "hlc",
                        f"log of {rec.origin}: seq {rec.seq} stamp "
                        f"{rec.hlc} <= previous {last[rec.origin]}",
                    )
                )
            last[rec.origin] = rec.hlc

    # a delivery recorded as delivered was answered 2xx at some receiver
    answered = {x.webhook_id for x in cluster.receivers.receipts if x.status and x.status < 300}
    for r in regions:
        for eid in sorted(eps):
            rows = await r.store.list_deliveries(eid, DeliveryStatus.DELIVERED, None, None, 10**9)
            for d in rows:
                if d.region == r.name and d.event_id not in answered:
                    out.append(
                        Violation(
                            "delivery", f"{r.name}: {d.id} delivered but no receiver answered 2xx"
                        )
                    )
    return out


async def pending_deliveries(cluster: SimCluster) -> int:
    """Pending deliveries of any owner in any up region's store."""
    total = 0
    for r in cluster.up():
        for owner in cluster.regions:
            total += (await r.store.counts(owner))["deliveries_pending"]
    return total


async def check_failover(cluster: SimCluster, history: History) -> list[Violation]:
    """Region failover: every acknowledged event that a surviving region holds reached
    every endpoint of its fan-out snapshot (a 2xx receipt with its webhook-id), and no
    delivery succeeded more than twice (once per side of a cut, the README's bound)."""
    out: list[Violation] = []
    ups = cluster.up()
    if not ups:
        return out
    store = ups[0].store
    ok: dict[tuple[str, str], int] = defaultdict(int)
    for x in cluster.receivers.receipts:
        if x.status is not None and x.status < 300:
            ok[(x.path, x.webhook_id)] += 1
    for (path, wid), n in sorted(ok.items()):
        if n > 2:
            out.append(Violation("duplicates", f"{wid} reached {path} {n} times"))
    for op in history.ops:
        if op.kind != "publish" or not _counts(op):
            continue
        for d in await store.deliveries_of_event(op.result):
            if d.status is DeliveryStatus.CANCELLED:
                continue  # its endpoint was gone when it was due
            if ok.get((f"/hook/{d.endpoint_id}", op.result), 0) == 0:
                out.append(
                    Violation(
                        "lost_delivery",
                        f"acknowledged event {op.result} (op {op.id}, {op.region}) never "
                        f"reached {d.endpoint_id} ({d.status.value}, owner {d.region})",
                    )
                )
    return out


async def check_edges(cluster: SimCluster, injected: list[Injected]) -> list[Violation]:
    """The edge-records nemesis (sim/_edges.py): each injected record was merged, or
    rejected (returned by ``apply_records`` and counted in ``records_rejected``), or held
    back behind missing predecessors (and those at a certain edge, e.g. past
    ``max_drift_ms``, the one outcome they must have); a merged one is in every region's
    version vector and registry, a rejected or held one in none. At least one record of
    the run must have been merged and one rejected, or the nemesis tested nothing."""
    out: list[Violation] = []
    ups = cluster.up()
    rows = {r.name: await r.store.load_registry() for r in ups}
    seen: set[str] = set()
    for inj in injected:
        rejected = [k for k, v in inj.outcome.items() if v == "rejected"]
        if inj.counted != len(rejected):
            detail = f"{len(rejected)} rejected, records_rejected grew by {inj.counted}"
            out.append(Violation("edges", f"{inj.region}: {detail}"))
        for (origin, seq), how in sorted(inj.outcome.items()):
            seen.add(how)
            if inj.must.get((origin, seq), how) != how:
                where = f"record {origin}#{seq} (into {inj.region})"
                out.append(Violation("edges", f"{where}: {how}, must be {inj.must[(origin, seq)]}"))
            key = inj.keys[(origin, seq)]
            for r in ups:
                assert r.node is not None
                has_seq = r.node.writer.durable_vv.get(origin, 0) >= seq
                has_key = key in rows[r.name]
                if (how == "merged") != has_seq or (how == "merged") != has_key:
                    detail = f"in version vector {has_seq}, key in registry {has_key}"
                    where = f"{how} record {origin}#{seq} (into {inj.region})"
                    out.append(Violation("edges", f"{r.name}: {where}: {detail}"))
    if injected and not {"merged", "rejected"} <= seen:
        out.append(Violation("edges", f"edge records only ever {sorted(seen)}"))
    return out
