"""Checkers of what the nemeses must not break (sim/_check.py holds the run's invariants
and the final state's): pending deliveries and failover custody, duplicates of a long cut
only within the README's window, edge records' outcomes, and no record refused between
configured regions (a rolling upgrade's feature gating).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import urlsplit

from regionsync.core.capabilities import ALL, BASELINE
from regionsync.core.model import DeliveryStatus

from ._check import _INF, Violation, _counts
from ._cluster import SimCluster
from ._edges import Injected
from ._workload import History

__all__ = [
    "check_duplicate_window", "check_edges", "check_failover", "check_refusals",
    "duplicate_windows", "pending_deliveries",
]  # fmt: skip


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
    paths = {  # endpoint id -> the path of its receiver URL (one per create)
        o.result: urlsplit(o.args["url"]).path
        for o in history.ops
        if o.kind == "create_endpoint" and o.result
    }
    for op in history.ops:
        if op.kind != "publish" or not _counts(op):
            continue
        for d in await store.deliveries_of_event(op.result):
            if d.status is DeliveryStatus.CANCELLED:
                continue  # its endpoint was gone when it was due
            if ok.get((paths.get(d.endpoint_id, ""), op.result), 0) == 0:
                out.append(
                    Violation(
                        "lost_delivery",
                        f"acknowledged event {op.result} (op {op.id}, {op.region}) never "
                        f"reached {d.endpoint_id} ({d.status.value}, owner {d.region})",
                    )
                )
    return out


Window = tuple[float, float, float, float]  # first receipt in [0]..[1], second in [2]..[3]


def duplicate_windows(
    cuts: list[tuple[float, float]], repl: Any, timeout_s: float, slack_s: float
) -> list[Window]:
    """When a delivery may reach an endpoint twice around the cuts of one region's links
    (README, "Region failover", the remaining duplicate window), in virtual seconds, as
    (first from, first to, second from, second to):

    - the cut-off region finished it in its lease before fencing (the first
      ``failover_after_s - fence_margin_s``, plus ``delivery.timeout_s`` in flight) and
      an adopter, which never saw that, sends it again before the heal;
    - an attempt in flight at the heal: the second within ``delivery.timeout_s +
      custody_interval_s`` of it;
    - a cut that outlasts ``failover_after_s - fence_margin_s + fence_hold_s`` counted
      from the last message heard, up to ``heartbeat_s`` before the cut: the fence
      lapsed, both sides deliver until the heal.

    ``slack_s`` covers the network's latency and the custody step after a catch-up."""
    lease = repl.failover_after_s - repl.fence_margin
    out: list[Window] = []
    for start, end in cuts:
        healed = end + timeout_s + repl.custody_interval_s + slack_s
        done = start + lease + timeout_s + slack_s  # its last attempt before the fence
        out.append((start - slack_s, done, start - slack_s, healed))
        out.append((-_INF, _INF, end, healed))
        lapse = start - repl.heartbeat_s + lease + repl.fence_hold  # soonest it can lapse
        if end > lapse:
            out.append((-_INF, _INF, lapse, healed))
    return out


def check_duplicate_window(receipts: list[Any], windows: list[Window]) -> list[Violation]:
    """Every second 2xx receipt of one (path, webhook-id) falls in one of ``windows``
    (``duplicate_windows``) with its first: a long cut delivers each event about once."""
    first: dict[tuple[str, str], float] = {}
    out: list[Violation] = []
    for x in sorted(receipts, key=lambda r: r.at):
        if x.status is None or x.status >= 300:
            continue
        key = (x.path, x.webhook_id)
        f = first.setdefault(key, x.at)
        if f == x.at:
            continue
        if not any(a <= f <= b and c <= x.at <= d for a, b, c, d in windows):
            out.append(
                Violation(
                    "duplicate_window",
                    f"{x.webhook_id} reached {x.path} again at t={x.at:.1f}s (first at "
                    f"t={f:.1f}s), outside the stated windows",
                )
            )
    return out


async def check_edges(cluster: SimCluster, injected: list[Injected]) -> list[Violation]:
    """The edge-records nemesis (sim/_edges.py): each injected record was merged, or
    rejected (returned by ``apply_records`` and counted in ``records_rejected``), or held
    back behind missing predecessors (and those at a certain edge, e.g. past
    ``max_drift_ms``, the one outcome they must have); a merged one is in every region's
    version vector and registry, a rejected one in no region's registry (a region may
    have moved past it: kept opaque in the log, issue 41), a held one in neither. At
    least one record of the run must have been merged and one rejected, or the nemesis
    tested nothing."""
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
                if how == "rejected":
                    has_seq = False  # moved past or not: never merged is what counts
                if (how == "merged") != has_seq or (how == "merged") != has_key:
                    detail = f"in version vector {has_seq}, key in registry {has_key}"
                    where = f"{how} record {origin}#{seq} (into {inj.region})"
                    out.append(Violation("edges", f"{r.name}: {where}: {detail}"))
    if injected and not {"merged", "rejected"} <= seen:
        out.append(Violation("edges", f"edge records only ever {sorted(seen)}"))
    return out


def check_refusals(cluster: SimCluster, upgraded: bool) -> list[Violation]:
    """No region refused a record or a state chunk of a configured region, over every
    boot (refusals of the edge-records nemesis come from made-up origins; a record
    refused for clock drift is resent, not counted). After a rolling upgrade
    (``upgraded``), every running node of this release writes every feature it reads:
    the cluster's feature set was raised once the last region announced it."""
    out: list[Violation] = []
    names = set(cluster.regions)
    for name, r in sorted(cluster.regions.items()):
        cluster.harvest(r)
        for origin, n in sorted(r.refused.items()):
            if origin in names:
                out.append(Violation("refused", f"{name} refused {n} records of {origin}"))
        if r.state_rejected:
            out.append(Violation("refused", f"{name} refused {r.state_rejected} state chunks"))
    if upgraded and all(r.reads == ALL for r in cluster.regions.values()):
        for r in cluster.up():
            caps = r.node.capabilities  # type: ignore[union-attr]  # up: it has a node
            if caps.effective != caps.reads:
                got = sorted(caps.effective - BASELINE)
                out.append(
                    Violation(
                        "feature_set",
                        f"{r.name} writes only {got} of "
                        f"{sorted(caps.reads - BASELINE)} after the upgrade",
                    )
                )
    return out
