"""Simulation options: from a scenario file (TOML) or drawn from the seed alone.

A scenario fixes the kinds of faults (and their ranges); the seed picks every concrete
choice inside them. ``Options.explore(seed)`` lets the seed pick the fault mix too.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._world import derive_rng

__all__ = ["Options", "load_scenario"]

FAILOVER_MODES = ("", "origin-dies", "cut-off", "flapping", "two-die")
PARTITION_KINDS = ("symmetric", "one-way", "partial")


@dataclass
class Options:
    """Every knob of one run. Durations in virtual seconds, latencies in ms."""

    seed: int = 1
    scenario: str = "explore"
    regions: int = 3  # 3..7
    chaos_s: float = 240.0  # faults and workload run this long, then everything heals
    ops_per_region: int = 25
    inflight_per_region: int = 3
    tenants: int = 2
    endpoints_per_tenant: int = 3
    latency_ms: list[float] = field(default_factory=lambda: [5.0, 120.0])
    mode: str = "stream"  # "stream" (gRPC semantics) | "datagram" (breaks the contract)
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    partitions: int = 0
    partition_kinds: list[str] = field(default_factory=lambda: list(PARTITION_KINDS))
    partition_s: list[float] = field(default_factory=lambda: [5.0, 90.0])
    crashes: int = 0
    crash_down_s: list[float] = field(default_factory=lambda: [1.0, 60.0])
    lost_disks: int = 0
    # a region's store is copied at one time and, later, the region crashes and comes
    # back on that older copy (a backup restore; issue 12 item 3)
    restores: int = 0
    # a rogue peer's batch of records at the edge of every range (sim/_edges.py) is
    # applied by one region this many times; check_edges judges what was merged
    edge_records: int = 0
    # payload bytes of published events (0: the workload's small payloads), and the
    # node's ingest.max_payload_bytes / replication.max_message_bytes (0: defaults)
    payload_bytes: int = 0
    max_payload_bytes: int = 0
    max_message_bytes: int = 0
    skew_ms: int = 0  # initial skew of each region, uniform in +-skew_ms
    drift_ppm: float = 0.0
    clock_steps: int = 0
    clock_step_ms: int = 30_000
    # how many regions' clocks are off (by +-skew_ms, alternately ahead and behind) and
    # stepped; 0: every region gets a skew uniform in +-skew_ms (the earlier nemesis)
    skewed_regions: int = 0
    # checkers (0: off): no region lags another's durable records longer than this while
    # both are up (needs an intact network), and no LWW winner beat a concurrent
    # acknowledged write made more than lww_bound_s later (README "Clocks and conflicts")
    stall_bound_s: float = 0.0
    lww_bound_s: float = 0.0
    # region failover: "" (none), "origin-dies" (a region dies for good under load),
    # "cut-off" (a region loses its peers, not its receivers), "flapping" (a region is cut
    # off and back again and again), "two-die" (two regions die for good). The workload
    # then publishes to never-deleted endpoints with always-healthy receivers, and the
    # run checks that every acknowledged event reached every endpoint it fanned out to.
    failover: str = ""
    failover_after_s: float = 60.0
    # rolling upgrade (issue 40): every region starts as the previous release (it reads
    # and announces the baseline only, core.capabilities) and is restarted on this
    # release one at a time, at times drawn in upgrade_s; force_new_form writes every
    # feature a node reads whatever its peers announced (no gating: refusals follow)
    rolling_upgrade: bool = False
    upgrade_s: list[float] = field(default_factory=lambda: [20.0, 200.0])
    force_new_form: bool = False
    # after the upgrades, a region goes back to the previous release this many times
    # (each at a time after upgrade_s, back on this release 10..60 s later)
    rollbacks: int = 0
    heal_budget_s: float = 900.0  # convergence must happen this soon after healing
    sample_s: float = 1.0

    def __post_init__(self) -> None:
        if not 3 <= self.regions <= 7:
            raise ValueError("regions must be 3..7")
        if self.mode not in ("stream", "datagram"):
            raise ValueError("mode must be 'stream' or 'datagram'")
        if not 0 <= self.skewed_regions < self.regions:
            raise ValueError("skewed_regions must be 0..regions-1")
        if self.stall_bound_s and (self.partitions or self.failover):
            raise ValueError("stall_bound_s needs an intact network (no partitions, failover)")
        if self.failover not in FAILOVER_MODES:
            raise ValueError(f"failover must be one of {FAILOVER_MODES}")
        bad = set(self.partition_kinds) - set(PARTITION_KINDS)
        if bad:
            raise ValueError(f"unknown partition kinds {sorted(bad)}")

    def with_seed(self, seed: int) -> Options:
        return dataclasses.replace(self, seed=seed)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        d = self.as_dict()
        return " ".join(f"{k}={d[k]}" for k in d)

    @classmethod
    def explore(cls, seed: int) -> Options:
        """Options whose fault mix is drawn from ``seed`` (sized for wide sweeps)."""
        r = derive_rng(seed, "options")
        o = cls(seed=seed, scenario="explore", regions=r.randint(3, 7))
        o.chaos_s = r.choice([120.0, 240.0, 480.0])
        o.ops_per_region = r.randint(10, 30)
        o.tenants = r.randint(1, 3)
        o.endpoints_per_tenant = r.randint(1, 4)
        o.latency_ms = [r.choice([1.0, 5.0, 20.0]), r.choice([40.0, 120.0, 300.0])]
        if r.random() < 0.5:
            o.partitions = r.randint(1, 4)
            o.partition_kinds = sorted(r.sample(PARTITION_KINDS, r.randint(1, 3)))
        if r.random() < 0.3:
            o.loss = r.choice([0.001, 0.01, 0.05])
        if r.random() < 0.4:
            o.crashes = r.randint(1, 3)
        if r.random() < 0.2:
            o.lost_disks = 1
        if r.random() < 0.3:
            o.skew_ms = r.choice([500, 5_000, 45_000, 120_000])
            o.drift_ppm = r.choice([0.0, 100.0, 2000.0])
        if r.random() < 0.2:
            o.clock_steps = r.randint(1, 3)
        return o


def load_scenario(path: str | Path, seed: int | None = None) -> Options:
    """Options from a scenario file: ``name``, ``description``, ``seed``, ``[options]``
    (and, for files in sim/regressions, ``known_bug``: why the seed still fails).

    Raises FileNotFoundError, tomllib.TOMLDecodeError, or ValueError for unknown keys."""
    path = Path(path)
    data = tomllib.loads(path.read_text())
    unknown = set(data) - {"name", "description", "seed", "options", "known_bug"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    opts = dict(data.get("options", {}))
    names = {f.name for f in dataclasses.fields(Options)} - {"seed", "scenario"}
    bad = set(opts) - names
    if bad:
        raise ValueError(f"{path}: unknown options {sorted(bad)}")
    chosen = seed if seed is not None else int(data.get("seed", 1))
    return Options(seed=chosen, scenario=str(data.get("name", path.stem)), **opts)
