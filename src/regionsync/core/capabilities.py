"""Capability negotiation: which record forms the cluster may write (issue 40).

Decides, from what every configured region last announced in its Hello (``version`` and
``features``: what it can READ beyond the baseline), the cluster's effective feature set;
a node writes a record, section, body field or registry key kind that is newer than the
baseline only when the effective set holds its feature. Never reads a clock (callers pass
``now_ms``) and never sends anything.

Rules (after Riak's capability negotiation and Redis Active-Active's protocol versions):

- ``FEATURES`` lists every form with the release that introduced it. ``BASELINE`` is what
  release 0.1.0 (commit e5ef9b5, which announces nothing) reads; an empty announcement
  means exactly the baseline.
- effective = own reads ∩ the last announcement of every configured peer. A peer never
  heard from since this process started counts as the baseline: it may have been rolled
  back while we were down, and writing the older form for the seconds until its first
  Hello costs nothing. Announcements are not persisted for that reason.
- Re-evaluated on every Hello. Silence (a peer down or cut off) never lowers the set: its
  last announcement stands. A Hello announcing less (a region rolled back) lowers it at
  once, and the writer goes back to the older form.
- Optional fields and sections (name starting with ``_``) are ignorable: a reader with
  ``optional-fields`` that does not know one skips it (counted as ``unknown_fields``).
  Anything that changes replicated state is gated by a feature of its own instead.

Adding a feature: a row in ``FEATURES`` (name, the release, what it is), its decoder
accepting it only when the node reads it (``core.records.decode_body``'s ``reads``), and
the writer asking ``Negotiation.enabled(name)`` (docs/design.md, Capabilities).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "ALL",
    "BASELINE",
    "BASELINE_RELEASE",
    "FEATURES",
    "RELEASE",
    "Announcement",
    "Feature",
    "Negotiation",
    "announced",
]

BASELINE_RELEASE = "0.1.0"  # e5ef9b5: announces no version and no features
RELEASE = "0.2.0"  # this release: what the Hello's version says (= pyproject.toml version)


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    since: str  # the release that first read it
    kind: str  # "section", "field", "registry-key", "store" (what it is in a record)
    what: str


FEATURES: tuple[Feature, ...] = (
    # the baseline: what e5ef9b5 reads (core/records.py, core/registry_keys.py,
    # adapters/log_cut.py at that commit); never announced, never gated
    Feature("registry", BASELINE_RELEASE, "section", "registry: {key: CRDT bytes}"),
    Feature("event", BASELINE_RELEASE, "section", "event: id, tenant, type, payload, ..."),
    Feature("delivery", BASELINE_RELEASE, "section", "delivery: a delivery's new state"),
    Feature("deliveries", BASELINE_RELEASE, "section", "an event's fan-out snapshot"),
    Feature("attempt", BASELINE_RELEASE, "section", "the attempt an outcome came from"),
    Feature("idempotency", BASELINE_RELEASE, "section", "an Idempotency-Key row"),
    Feature("audit", BASELINE_RELEASE, "section", "who, op, object, tenant, detail"),
    Feature("owner-gen", BASELINE_RELEASE, "field", "event/delivery owner_gen (optional)"),
    Feature("request-headers", BASELINE_RELEASE, "field", "attempt.request_headers"),
    Feature(
        "registry-keys",
        BASELINE_RELEASE,
        "registry-key",
        "tenants, t/, y/, e/, sources, s/, c/, j/, tokens, k/ (core.registry_keys)",
    ),
    Feature("log-payload-cut", BASELINE_RELEASE, "store", "event records stored cut"),
    # 0.2.0
    Feature(
        "optional-fields",
        RELEASE,
        "field",
        "unknown _-prefixed sections and fields are skipped (counted), not refused; "
        "registry records carry _writer (the release that wrote them)",
    ),
    Feature(
        "region-removal",
        RELEASE,
        "registry-key",
        "x/<region> (a region removed for good) and p/<region> (retired process actors) "
        "registry keys; retired actors left out of Hello and Ack (core/removal.py)",
    ),
    Feature(
        "broker-destinations",
        RELEASE,
        "registry-key",
        "e/<endpoint>/secret_destination: an endpoint delivering to RabbitMQ, NATS or "
        "Redis instead of HTTP (core/brokers.py)",
    ),
    Feature(
        "portal-sessions",
        RELEASE,
        "registry-key",
        "pk/<region>/secret registry keys: a region's key signing consumer portal "
        "sessions that every region verifies; pn/<tenant>: sessions made before are "
        "refused (core/portal.py)",
    ),
    Feature(
        "counter-retired-entries",
        RELEASE,
        "field",
        "a pruned actor's PN-Counter totals kept under ~retired:<actor> (crdt RETIRED), "
        "which absorbs its plain entry in a merge; without it they collapse into "
        "~retired:0 (core/pruning.py)",
    ),
)
BASELINE = frozenset(f.name for f in FEATURES if f.since == BASELINE_RELEASE)
ALL = frozenset(f.name for f in FEATURES)
_KNOWN = {f.name: f for f in FEATURES}


def announced(reads: Iterable[str]) -> list[str]:
    """What a node that reads ``reads`` announces in its Hello: the features beyond the
    baseline, sorted (the baseline is implied, so the Hello stays small)."""
    return sorted(set(reads) - BASELINE)


@dataclass(frozen=True, slots=True)
class Announcement:
    """What one region last said in a Hello: ``version`` ("" before 0.2.0), the features
    it reads (baseline included) and when we heard it (None: never, counts as baseline)."""

    version: str = ""
    reads: frozenset[str] = BASELINE
    at_ms: int | None = None


@dataclass
class Negotiation:
    """This node's view of the cluster's capabilities: ``reads`` (what this node reads),
    the configured ``peers``, their last announcements and the effective set."""

    reads: frozenset[str]
    peers: tuple[str, ...]
    heard: dict[str, Announcement] = field(default_factory=dict)
    pinned: frozenset[str] | None = None  # a test's override of the effective set
    # what the other processes of this region read (several processes on one PostgreSQL
    # database follow each other's records); None: no other processes
    local: frozenset[str] | None = None
    effective: frozenset[str] = BASELINE
    held_since_ms: int | None = None  # since when own reads exceed the effective set
    reported: bool = False  # the current holding back was reported (upgrade_held_back)

    def __post_init__(self) -> None:
        unknown = set(self.reads) - ALL
        if unknown or not BASELINE <= self.reads:
            raise ValueError(f"reads must hold the baseline and known features: {unknown}")
        self.effective = self._compute()

    def _compute(self, without: frozenset[str] = frozenset()) -> frozenset[str]:
        if self.pinned is not None:
            return self.pinned
        out = self.region_reads
        for p in self.peers:
            if p not in without:
                out &= self.heard.get(p, Announcement()).reads
        return out

    @property
    def region_reads(self) -> frozenset[str]:
        """What every process of this region reads: what its Hello announces."""
        return self.reads if self.local is None else self.reads & self.local

    def set_local(self, reads: frozenset[str] | None) -> None:
        """What the region's other processes read (None: there are none). A process
        that cannot know them sets the baseline: safe, features stay off."""
        self.local = None if reads is None else BASELINE | (reads & ALL)
        self.effective = self._compute()

    def pin(self, features: frozenset[str]) -> None:
        """Write ``features`` whatever the peers announced (the simulator's "no gating"
        run, which must then see refusals); never used by a node in production."""
        self.pinned = features
        self.effective = self._compute()

    def enabled(self, name: str) -> bool:
        """True if the cluster writes ``name`` (every configured region reads it).
        Raises KeyError for a name not in FEATURES (a typo must not read as "off")."""
        if name not in _KNOWN:
            raise KeyError(f"unknown feature {name!r}")
        return name in self.effective

    def enabled_without(self, name: str, regions: Iterable[str]) -> bool:
        """``enabled`` as if ``regions`` were not configured: a region removed for good,
        or being removed, need not read what the others write about it."""
        if name not in _KNOWN:
            raise KeyError(f"unknown feature {name!r}")
        return name in self.effective_without(regions)

    def effective_without(self, regions: Iterable[str]) -> frozenset[str]:
        """The effective set as if ``regions`` were not configured."""
        return self._compute(frozenset(regions))

    def announce(
        self, region: str, version: str, features: Iterable[str], now_ms: int
    ) -> tuple[frozenset[str], frozenset[str]] | None:
        """Record ``region``'s Hello; ``(before, after)`` if the effective set changed.
        Feature names this release does not know are dropped (a newer peer reads them,
        but nobody here writes them). A region that is not a configured peer is ignored."""
        if region not in self.peers:
            return None
        reads = BASELINE | (frozenset(features) & ALL)
        self.heard[region] = Announcement(version, reads, now_ms)
        before, self.effective = self.effective, self._compute()
        if self.effective != before:
            self.reported = False
            self.held_since_ms = now_ms if self.effective != self.reads else None
            return before, self.effective
        if self.held_since_ms is None and self.effective != self.reads:
            self.held_since_ms = now_ms
        return None

    def holding_back(self) -> dict[str, list[str]]:
        """Region -> the features this node reads that it does not (announced or never
        heard: baseline), for every peer that keeps the effective set below ``reads``."""
        out = {}
        for p in self.peers:
            missing = self.reads - self.heard.get(p, Announcement()).reads
            if missing:
                out[p] = sorted(missing)
        return out

    def held_back_due(self, now_ms: int, after_ms: int) -> dict[str, list[str]] | None:
        """The regions holding the set back, once per episode, when it has been held back
        ``after_ms`` or longer (an episode starts when the set last changed or when this
        node started, ``start``); None otherwise."""
        if self.held_since_ms is None or self.reported or self.pinned is not None:
            return None
        if now_ms - self.held_since_ms < after_ms:
            return None
        self.reported = True
        return self.holding_back()

    def start(self, now_ms: int) -> None:
        """Begin timing a holding back from ``now_ms`` (the node's start)."""
        if self.effective != self.reads and self.held_since_ms is None:
            self.held_since_ms = now_ms

    def view(self) -> dict[str, object]:
        """JSON-ready: own reads, the effective set, each peer's version and features."""
        peers: dict[str, object] = {}
        for p in self.peers:
            a = self.heard.get(p)
            peers[p] = {
                "version": a.version if a else None,
                "features": announced(a.reads) if a else None,
                "heard_at_ms": a.at_ms if a else None,
            }
        return {
            "release": RELEASE,
            "features": announced(self.reads),
            "region_features": announced(self.region_reads),
            "effective": announced(self.effective),
            "held_back_by": sorted(self.holding_back()),
            "peers": peers,
        }


def table() -> list[Mapping[str, str]]:
    """FEATURES as rows (docs, the CLI)."""
    return [{"name": f.name, "since": f.since, "kind": f.kind, "what": f.what} for f in FEATURES]
