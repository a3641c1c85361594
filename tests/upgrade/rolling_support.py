"""What the rolling-upgrade tests measure while regions restart: the replication stall
between every pair of running regions (``StallMeter``) and a publish and registry load
that remembers what was acknowledged (``Load``)."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["Load", "StallMeter"]


@dataclass
class StallMeter:
    """Per ordered pair of regions (src, dst): how long a record of src's own actor,
    once src holds it, takes to reach dst, counted only while both run (a restart is not a
    stall; the clock of a waiting record starts again when both are up). ``observe``
    takes one sample of every running region's ``/v1/cluster`` (its ``actor`` and
    ``version_vector``); ``worst`` is the longest wait so far, from the first sample that
    saw a record at src and not at dst (a shorter wait than the sampling's counts as 0),
    records still missing included. A peer that refuses src's records never catches up:
    the wait grows until the test's end. A process of a PostgreSQL region is an entry of
    its own, and each start is a new actor: its waits start again with it."""

    up_since: dict[str, float] = field(default_factory=dict)  # region -> monotonic s
    waiting: dict[tuple[str, str], list[tuple[int, float]]] = field(default_factory=dict)
    worst_s: float = 0.0
    worst_pair: tuple[str, str] | None = None
    samples: int = 0  # pair comparisons made (the test checks the meter looked)
    seen_waiting: int = 0  # records seen at their source and not yet at a peer
    actor_of: dict[str, str] = field(default_factory=dict)  # region -> its actor last seen

    def up(self, region: str, now: float) -> None:
        self.up_since[region] = now

    def down(self, region: str) -> None:
        self.up_since.pop(region, None)

    def observe(self, views: dict[str, dict[str, Any]], now: float) -> None:
        """``views``: region -> its cluster view, for regions that answered."""
        for src, dst in itertools.permutations(views, 2):
            if src not in self.up_since or dst not in self.up_since:
                continue
            self.samples += 1
            actor = views[src]["actor"]
            if self.actor_of.setdefault(src, actor) != actor:  # a new incarnation
                self.actor_of[src] = actor
                for pair in [p for p in self.waiting if p[0] == src]:
                    del self.waiting[pair]
            have = views[src]["version_vector"].get(actor, 0)
            got = views[dst]["version_vector"].get(actor, 0)
            queue = self.waiting.setdefault((src, dst), [])
            if have > got and (not queue or queue[-1][0] < have):
                queue.append((have, now))
                self.seen_waiting += 1
            while queue and queue[0][0] <= got:
                queue.pop(0)
            if queue:
                since = max(queue[0][1], self.up_since[src], self.up_since[dst])
                if now - since > self.worst_s:
                    self.worst_s, self.worst_pair = now - since, (src, dst)

    async def run(self, client: httpx.AsyncClient, http: dict[str, str], every_s: float) -> None:
        """Sample until cancelled."""

        async def view(region: str) -> tuple[str, dict[str, Any] | None]:
            try:
                resp = await client.get(f"{http[region]}/v1/cluster", timeout=2.0)
            except httpx.HTTPError:
                return region, None
            return region, resp.json() if resp.status_code == 200 else None

        while True:  # every region at once: the views are close to one moment
            got = await asyncio.gather(*(view(r) for r in list(self.up_since)))
            self.observe({r: v for r, v in got if v is not None}, time.monotonic())
            await asyncio.sleep(every_s)


@dataclass
class Load:
    """Events published round-robin to the running targets (``up``), a registry change
    (a tenant created, renamed) every ``registry_every`` publishes. ``acked``: ids of
    events answered 202; ``server_errors``: (target, status) of 5xx answers from a target
    still up when it answered (a target is taken out of ``up`` before it stops)."""

    client: httpx.AsyncClient
    base: dict[str, str]  # target -> base URL
    tenant: str
    up: set[str] = field(default_factory=set)
    registry_every: int = 10
    acked: set[str] = field(default_factory=set)
    server_errors: list[tuple[str, int]] = field(default_factory=list)
    tenants: set[str] = field(default_factory=set)
    refused: int = 0  # requests to a target going down (not acknowledged, not counted)
    acked_by: dict[str, int] = field(default_factory=dict)  # target -> events acknowledged
    # held while no registry change may be made (publishes go on): while a process of
    # the previous release starts (test_postgres_rolling_upgrade.Region.replace)
    registry_gate: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def run(self, pause_s: float) -> None:
        for i in itertools.count():
            targets = sorted(self.up)
            if targets:
                await self._one(i, targets[i % len(targets)])
            await asyncio.sleep(pause_s)

    async def _one(self, i: int, target: str) -> None:
        base = self.base[target]
        try:
            if i % self.registry_every == 0 and not self.registry_gate.locked():
                async with self.registry_gate:
                    tid = f"reg-{i}"
                    resp = await self.client.post(
                        f"{base}/v1/tenants", json={"id": tid, "name": tid}
                    )
                    if resp.status_code == 201:
                        self.tenants.add(tid)
                        resp = await self.client.patch(
                            f"{base}/v1/tenants/{tid}", json={"name": f"{tid} renamed"}
                        )
            else:
                resp = await self.client.post(
                    f"{base}/v1/tenants/{self.tenant}/events",
                    json={"event_type": "upgrade.load", "payload": {"i": i, "via": target}},
                )
                if resp.status_code == 202:
                    self.acked.add(resp.json()["id"])
                    self.acked_by[target] = self.acked_by.get(target, 0) + 1
        except httpx.HTTPError:
            self.refused += 1
            return
        if resp.status_code >= 500 and target in self.up:
            self.server_errors.append((target, resp.status_code))
