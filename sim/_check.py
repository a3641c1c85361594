"""Checkers: invariants during the run, and what must hold after everything healed.

During the run (``Monitor``): a Node's HLC never goes backwards but when it restarts at
physical time (a rebase, runtime/writepath.py ``stamp``); a store incarnation's durable
version vector only grows (across crash-restarts too, since it is durable); no origin's
later records wait behind a refused record longer than ``STALL_BOUND_S`` (issue 41); with
``stall_bound_s``, no region lags another's durable records longer than that.
At the end (``check_final``): every region's registry hash and version vector are equal;
acknowledged changes are visible under add-wins / LWW semantics; every acknowledged
event is held by its origin region and by every other; per-origin log records carry
strictly increasing HLC stamps (but across a rebase); with ``lww_bound_s``, no LWW winner
beat a concurrent acknowledged write made more than that later; every tenant's
``events_published`` counter, recorded or still carried (README "Usage counters"), equals
the events of the tenant every region holds, unless a disk was lost or restored (which the
README says may lose or repeat up to ``usage_record_ms`` of moves). Operations whose outcome
is unknown, and acknowledged ones whose only copy went with a lost disk, may or may not
count (Maelstrom's indeterminate operations), so they can justify a state but are never
demanded.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from crdt import LWWRegister, ORSet, decode
from regionsync.core.model import DeliveryStatus, EventQuery

from ._cluster import SimCluster
from ._workload import History, Op

__all__ = ["Monitor", "Violation", "check_final"]

_INF = 1 << 62
# virtual seconds an origin's later records may wait behind a refused one (issue 41): a
# refused record is moved past at once, and no stamp is refused for drift
STALL_BOUND_S = 60.0


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.detail}"


class Monitor:
    """Samples every region: invariants, plus the convergence timeline for the report."""

    def __init__(self, cluster: SimCluster, stall_bound_s: float = 0.0):
        self.cluster = cluster
        self.violations: list[Violation] = []
        self._hlc: dict[tuple[str, int], tuple[int, int, int]] = {}
        # the stall check (``stall_bound_s`` > 0): when each region's boot was first seen,
        # each region's own durable seq over time, the pairs already reported
        self.stall_bound_s = stall_bound_s
        self._up_since: dict[tuple[str, int], float] = {}
        self._own: dict[str, list[tuple[float, str, int]]] = defaultdict(list)
        self._lagged: set[tuple[str, str, int]] = set()
        self.rebased: set[str] = set()  # actors whose HLC restarted (WritePath.stamp)
        self._vv: dict[tuple[str, int], dict[str, int]] = {}
        self.known_vv: dict[str, dict[str, int]] = {n: {} for n in cluster.regions}
        self.timeline: list[tuple[float, dict[str, tuple[str | None, int]]]] = []
        self._stalled: dict[tuple[str, str], float] = {}  # (region, origin) -> since

    def sample(self, t: float, record: bool) -> None:
        for name, r in sorted(self.cluster.regions.items()):
            node = r.node
            if node is None or not node.started:
                continue
            # never backwards, except when it restarted at physical time (a rebase:
            # it was past the bound, runtime/writepath.py stamp)
            rebases = getattr(node.writer, "hlc_rebases", 0)  # 0: a release before it
            hlc = (node.writer.hlc.last.wall_ms, node.writer.hlc.last.logical, rebases)
            key = (name, r.boots)
            if rebases:
                self.rebased.add(node.writer.actor)
            was = self._hlc.get(key)
            if was is not None and hlc < was[:2] + (hlc[2],) and rebases == was[2]:
                self.violations.append(
                    Violation("hlc", f"{name} boot {r.boots}: HLC {hlc[:2]} < {was[:2]} t={t:.3f}")
                )
            self._hlc[key] = hlc
            self._up_since.setdefault(key, t)
            actor = node.writer.actor
            self._own[name].append((t, actor, node.writer.durable_vv.get(actor, 0)))
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
            self._stalls(t, name, node)
        if self.stall_bound_s:
            self._check_stall(t)
        if record:
            self.timeline.append((t, self.snapshot()))

    def _stalls(self, t: float, name: str, node: Any) -> None:
        """An origin whose next record ``name`` holds but did not apply (it refused it)
        while later ones wait behind it is stalled; past ``STALL_BOUND_S`` it is a
        violation (reported once)."""
        vv, held = node.writer.version_vector, node.replica.held
        nxt = {o: vv.get(o, 0) + 1 for o in held}
        stalled = {o for o, n in nxt.items() if n in held[o] and any(s > n for s in held[o])}
        for key in [k for k in self._stalled if k[0] == name and k[1] not in stalled]:
            del self._stalled[key]
        for origin in sorted(stalled):
            since = self._stalled.setdefault((name, origin), t)
            if since >= 0 and t - since > STALL_BOUND_S:
                detail = f"{name}: {origin}'s records wait behind #{nxt[origin]} since "
                self.violations.append(Violation("stall", f"{detail}t={since:.1f}"))
                self._stalled[(name, origin)] = -1.0  # reported

    def _check_stall(self, t: float) -> None:
        """Every up region holds what every other up region had durable ``stall_bound_s``
        ago, once both have been up that long (the network is intact in scenarios that
        turn this on: a skewed clock alone must never stop replication)."""
        bound = self.stall_bound_s
        ups = {n: r for n, r in self.cluster.regions.items() if r.up and r.node is not None}
        for a, ra in sorted(ups.items()):
            since_a = self._up_since.get((a, ra.boots), t)
            old = [e for e in self._own[a] if since_a <= e[0] <= t - bound]
            self._own[a] = [e for e in self._own[a] if e[0] >= t - 2 * bound]
            if not old or not old[-1][2]:
                continue
            _, actor, seq = old[-1]
            for b, rb in sorted(ups.items()):
                if b == a or t - self._up_since.get((b, rb.boots), t) < bound:
                    continue
                assert rb.node is not None
                held = rb.node.writer.durable_vv.get(actor, 0)
                if held < seq and (a, b, seq) not in self._lagged:
                    self._lagged.add((a, b, seq))
                    detail = f"{b} holds {actor} up to {held}, {a} had {seq} {bound}s before"
                    detail += f" t={t:.3f}"
                    self.violations.append(Violation("stall", detail))

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


def _may_follow(later: Op, earlier: Op) -> bool:
    """``later`` (maybe happened) may have taken effect after ``earlier`` was invoked:
    it had not surely finished before (an op runs between its invocation and completion)."""
    return _maybe(later) and (later.complete_t is None or later.complete_t >= earlier.invoke_t)


def _owner_of(desc: Any, ops_by_id: dict[int, Op]) -> str | None:
    """The tenant whose op wrote description ``d<op id>`` (None: not a workload value)."""
    if isinstance(desc, str) and desc[1:].isdigit():
        op = ops_by_id.get(int(desc[1:]))
        return op.args["tenant"] if op is not None else None
    return None


def _lww(what: str, reg: Any, writes: list[Op], bound_s: float = 0.0) -> list[Violation]:
    """An LWW register written by ``writes`` (ops with a ``description``) must hold the
    value of a causally maximal acknowledged write, or of one whose outcome is unknown.
    With ``bound_s`` (README "Clocks and conflicts"): an acknowledged winner never beat a
    concurrent acknowledged write invoked more than ``bound_s`` after it completed."""
    if not isinstance(reg, LWWRegister) or reg.is_empty:
        return []
    writes = [w for w in writes if _maybe(w)]
    acked = [w for w in writes if _counts(w)]
    maximal = [w for w in acked if not any(_saw(o, w) for o in acked if o is not w)]
    allowed = {w.args["description"] for w in maximal}
    allowed |= {w.args["description"] for w in writes if not _counts(w)}
    if reg.value() not in allowed:
        detail = f"{what} {reg.value()!r}; causally maximal acknowledged writes {sorted(allowed)}"
        return [Violation("lww", detail)]
    won = [w for w in maximal if w.args["description"] == reg.value()]
    if not bound_s or len(won) != 1 or won[0].complete_t is None:
        return []
    done = won[0].complete_t
    later = [o for o in maximal if o is not won[0] and o.invoke_t - done > bound_s]
    if not later:
        return []
    gap = max(o.invoke_t for o in later) - done
    detail = (f"{what} {reg.value()!r} (done at t={done:.3f}) won over concurrent "
              f"acknowledged {sorted(o.args['description'] for o in later)} made up to "
              f"{gap:.3f}s later (bound {bound_s}s)")  # fmt: skip
    return [Violation("lww_skew", detail)]


def _orset(st: dict[str, Any], key: str) -> frozenset[Any]:
    s = st.get(key)
    return s.value() if isinstance(s, ORSet) else frozenset()


def _registry_violations(
    name: str, st: dict[str, Any], history: History, bound_s: float = 0.0
) -> list[Violation]:
    """What the converged registry of region ``name`` must show, given the history."""
    out: list[Violation] = []
    ops = history.ops
    tenant_ops: dict[str, list[Op]] = defaultdict(list)
    eps: dict[str, list[Op]] = defaultdict(list)  # endpoint id -> its create and changes
    for op in ops:
        if op.kind in ("create_tenant", "delete_tenant"):
            tenant_ops[op.args["tenant"]].append(op)
        elif op.kind == "create_endpoint" and op.result:
            eps[op.result].append(op)
        elif "endpoint" in op.args and op.kind != "foreign_patch":
            eps[op.args["endpoint"]].append(op)

    tenants = _orset(st, "tenants")
    out += _tenant_violations(name, tenants, tenant_ops)
    for eid, eops in sorted(eps.items()):
        out += _endpoint_violations(name, st, eid, eops, tenant_ops, bound_s)
    out += _catalog_violations(name, st, ops, tenants, tenant_ops)
    out += _owner_violations(name, st, ops, eps)
    return out


def _tenant_violations(
    name: str, tenants: frozenset[Any], tenant_ops: dict[str, list[Op]]
) -> list[Violation]:
    """Acknowledged tenants not deleted after are present; present ones were created."""
    out: list[Violation] = []
    for t, tops in sorted(tenant_ops.items()):
        creates = [o for o in tops if o.kind == "create_tenant"]
        deletes = [o for o in tops if o.kind == "delete_tenant"]
        must = [c for c in creates if _counts(c) and not any(_may_follow(d, c) for d in deletes)]
        if must and t not in tenants:
            out.append(Violation("lost_update", f"{name}: acknowledged tenant {t} missing"))
    for t in sorted(tenants):
        if not any(o.kind == "create_tenant" and _maybe(o) for o in tenant_ops.get(t, [])):
            out.append(Violation("phantom", f"{name}: tenant {t} never created"))
    return out


def _endpoint_violations(
    name: str,
    st: dict[str, Any],
    eid: str,
    eops: list[Op],
    tenant_ops: dict[str, list[Op]],
    bound_s: float = 0.0,
) -> list[Violation]:
    """Endpoint ``eid`` (``eops``: its create and changes): present if created and never
    deleted after, its event types add-wins, its description LWW."""
    out: list[Violation] = []
    tenant = eops[0].args["tenant"]
    members = _orset(st, f"t/{tenant}/endpoints")
    creates = [o for o in eops if o.kind == "create_endpoint"]
    wipes = [o for o in eops if o.kind == "delete_endpoint"]
    wipes += [o for o in tenant_ops.get(tenant, []) if o.kind == "delete_tenant"]
    must = [c for c in creates if _counts(c) and not any(_may_follow(w, c) for w in wipes)]
    if must and eid not in members:
        out.append(
            Violation(
                "add_wins",
                f"{name}: endpoint {eid} created by op {must[0].id} and never deleted "
                "after (nor its tenant), but absent",
            )
        )

    types = _orset(st, f"e/{eid}/event_types")
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
                removes[x].append(o)
    deletes = [o for o in eops if o.kind == "delete_endpoint"]
    for x, aops in sorted(adds.items()):
        must = [
            a
            for a in aops
            if _counts(a)
            and not any(_may_follow(r, a) for r in removes[x])
            and not any(_may_follow(d, a) for d in deletes)
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

    writes = [o for o in eops if o.kind in ("create_endpoint", "patch_description")]
    out += _lww(f"{name}: {eid} description", st.get(f"e/{eid}/description"), writes, bound_s)
    return out


def _catalog_violations(
    name: str,
    st: dict[str, Any],
    ops: list[Op],
    tenants: frozenset[Any],
    tenant_ops: dict[str, list[Op]],
) -> list[Violation]:
    """Event types: a tenant's catalog (add-wins by name) and each type's description (LWW)."""
    out: list[Violation] = []
    catalog: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for op in ops:
        if op.kind.endswith("_event_type"):
            catalog[(op.args["tenant"], op.args["name"])].append(op)
    for (t, type_name), tops in sorted(catalog.items()):
        creates = [o for o in tops if o.kind == "create_event_type"]
        wipes = [o for o in tops if o.kind == "delete_event_type"]
        wipes += [o for o in tenant_ops.get(t, []) if o.kind == "delete_tenant"]
        must = [c for c in creates if _counts(c) and not any(_may_follow(w, c) for w in wipes)]
        if must and type_name not in _orset(st, f"t/{t}/event_types"):
            out.append(
                Violation(
                    "add_wins",
                    f"{name}: event type {type_name} created by op {must[0].id} and never "
                    "deleted after (nor its tenant), but absent",
                )
            )
        writes = [o for o in tops if o.kind != "delete_event_type"]
        out += _lww(
            f"{name}: event type {type_name} description",
            st.get(f"y/{t}/{type_name}/description"),
            writes,
        )
    for t in sorted(tenants):
        for type_name in sorted(_orset(st, f"t/{t}/event_types")):
            made = catalog.get((t, type_name), [])
            if not any(o.kind == "create_event_type" and _maybe(o) for o in made):
                out.append(Violation("phantom", f"{name}: event type {type_name} never created"))
    return out


def _owner_violations(
    name: str, st: dict[str, Any], ops: list[Op], eps: dict[str, list[Op]]
) -> list[Violation]:
    """Every endpoint the state holds: never unknown to the history, and made of its
    owner's writes only (the owner register, every description and url held, every event
    type)."""
    out: list[Violation] = []
    ops_by_id = {o.id: o for o in ops}
    unknown_creates = {o.args["tenant"] for o in ops if o.kind == "create_endpoint"
                       and o.status == "unknown"}  # fmt: skip
    ids = sorted({k.split("/")[1] for k in st if k.startswith("e/")})
    for eid in ids:
        if eid not in eps:
            owner = st.get(f"e/{eid}/tenant")
            t = owner.value() if isinstance(owner, LWWRegister) else None
            if t not in unknown_creates:
                out.append(Violation("phantom", f"{name}: endpoint {eid} never created"))
            continue
        owner = eps[eid][0].args["tenant"]
        found: list[str] = []
        for field in ("tenant", "description", "url"):
            reg = st.get(f"e/{eid}/{field}")
            for v in reg.values() if isinstance(reg, LWWRegister) else []:
                if field == "tenant":
                    whose = v
                elif field == "description":
                    whose = _owner_of(v, ops_by_id)
                else:  # .../hook/<tenant>-e<j>/<op id>
                    whose = str(v).rsplit("/", 2)[-2].rpartition("-")[0]
                if whose != owner:
                    found.append(f"{field} {v!r} of {whose}")
        found += [f"event type {x!r}" for x in sorted(_orset(st, f"e/{eid}/event_types"))
                  if not str(x).startswith(f"{owner}.")]  # fmt: skip
        if found:
            out.append(
                Violation("owner", f"{name}: endpoint {eid} of {owner} holds {', '.join(found)}")
            )
    return out


async def check_final(
    cluster: SimCluster,
    history: History,
    lww_bound_s: float = 0.0,
    rebased: frozenset[str] | set[str] = frozenset(),
) -> list[Violation]:
    out: list[Violation] = []
    regions = cluster.up()
    ops = history.ops
    for r in regions:
        assert r.node is not None
        rows = await r.store.load_registry()
        st = {k: decode(v) for k, v in rows.items()}
        out += _registry_violations(r.name, st, history, lww_bound_s)
    eps = sorted({o.result for o in ops if o.kind == "create_endpoint" and o.result})
    for op in ops:
        if op.kind == "foreign_patch" and op.status == "ok":
            out.append(
                Violation(
                    "owner",
                    f"op {op.id}: tenant {op.args['tenant']} changed endpoint "
                    f"{op.args['endpoint']} of another tenant",
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

    # per-origin log records carry strictly increasing HLC stamps, except across a
    # rebase (the actor's HLC restarted at physical time: runtime/writepath.py stamp)
    if regions:
        records = await regions[0].store.records_after({}, 10**9)
        last: dict[str, tuple[int, int]] = {}
        for rec in records:
            back = rec.origin in rebased and rec.hlc < last.get(rec.origin, rec.hlc)
            if rec.origin in last and rec.hlc <= last[rec.origin] and not back:
                out.append(
                    Violation(
                        "hlc",
                        f"log of {rec.origin}: seq {rec.seq} stamp "
                        f"{rec.hlc} <= previous {last[rec.origin]}",
                    )
                )
            last[rec.origin] = rec.hlc

    if regions and len(regions) == len(cluster.regions):
        out += await _usage_violations(cluster, ops)

    # a delivery recorded as delivered was answered 2xx at some receiver
    answered = {x.webhook_id for x in cluster.receivers.receipts if x.status and x.status < 300}
    for r in regions:
        for eid in eps:
            rows = await r.store.list_deliveries(eid, DeliveryStatus.DELIVERED, None, None, 10**9)
            for d in rows:
                if d.region == r.name and d.event_id not in answered:
                    out.append(
                        Violation(
                            "delivery", f"{r.name}: {d.id} delivered but no receiver answered 2xx"
                        )
                    )
    return out


async def _usage_violations(cluster: SimCluster, ops: list[Op]) -> list[Violation]:
    """Each event accepted moved its tenant's ``events_published`` by one, exactly once:
    at every region, the counter (``Registry.usage``: recorded, plus its own carry) plus
    every other region's carry equals the tenant's events. Skipped after a lost or
    restored disk (README "Usage counters": those lose or repeat a carry)."""
    regions = cluster.up()
    if any(r.wipes or r.restores for r in regions):
        return []
    tenants = sorted({str(op.args["tenant"]) for op in ops if "tenant" in op.args})
    counter = "events_published"
    held = {
        t: len(await regions[0].store.list_events(EventQuery(t), None, 1 << 30)) for t in tenants
    }
    out: list[Violation] = []
    for r in regions:
        assert r.node is not None
        for t in tenants:
            carried = sum(
                q.node.catalog.pending_usage.get((t, counter), 0)
                for q in regions
                if q is not r and q.node is not None
            )
            seen = r.node.catalog.registry.usage(t, counter) + carried
            if seen != held[t]:
                out.append(
                    Violation(
                        "usage",
                        f"{r.name}: tenant {t} events_published {seen} "
                        f"(carried elsewhere {carried}) for {held[t]} events held",
                    )
                )
    return out
