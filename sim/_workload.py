"""The workload: registry changes and publishes in every region, recorded as a history.

Each operation is recorded when invoked and when it completes: ``ok`` (acknowledged),
``fail`` (refused with a client error, or the region was down: no effect), or ``unknown``
(the region crashed or the client gave up while it ran: it may or may not have happened).
Alongside, each operation keeps the node's version vector when invoked and when
acknowledged, which lets the checker tell when one write surely saw another.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from typing import Any

from regionsync.errors import ClientError

from ._cluster import SimCluster
from ._receivers import KINDS
from ._world import derive_rng

__all__ = ["EVENT_TYPES", "History", "Op", "Workload"]

EVENT_TYPES = ("order.created", "order.paid", "user.signup", "ping")
_RECEIVER_WEIGHTS = {"fast": 60, "slow": 10, "flaky": 15, "gone": 5, "tarpit": 10}
_CLIENT_TIMEOUT_S = 30.0


@dataclass
class Op:
    id: int
    region: str
    # create_tenant, create_endpoint, patch_types, patch_description, delete_endpoint, publish
    kind: str
    args: dict[str, Any]
    invoke_t: float
    status: str = "invoked"  # invoked | ok | fail | unknown
    complete_t: float | None = None
    actor: str = ""
    vv_before: dict[str, int] = field(default_factory=dict)
    vv_after: dict[str, int] = field(default_factory=dict)
    result: str = ""  # event id of a publish, error text of a failure
    lost_with_disk: bool = False

    def line(self) -> str:
        args = json.dumps(self.args, sort_keys=True)
        return (
            f"op {self.id} {self.region} {self.kind} {args} {self.status} "
            f"{self.invoke_t:.6f} {self.complete_t} {self.result}"
        )


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.unexpected: list[str] = []

    def by_status(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for op in self.ops:
            out[op.status] = out.get(op.status, 0) + 1
        return dict(sorted(out.items()))


class Workload:
    """Runs ``ops_per_region`` operations per region spread over ``chaos_s``."""

    def __init__(self, seed: int, cluster: SimCluster, history: History, opts: Any):
        self.seed = seed
        self.cluster = cluster
        self.history = history
        self.opts = opts
        self.inflight: dict[str, dict[asyncio.Task[None], Op]] = {n: {} for n in cluster.regions}
        self.tenants = [f"t{i}" for i in range(opts.tenants)]
        self.touched: dict[str, set[str]] = {n: set() for n in cluster.regions}
        self.endpoints = [
            (t, f"{t}-e{j}") for t in self.tenants for j in range(opts.endpoints_per_tenant)
        ]

    def start(self) -> None:
        self.drivers = [asyncio.create_task(self._drive(n)) for n in sorted(self.cluster.regions)]

    async def stop(self) -> None:
        """No new operations; wait for those in flight (a client times out after 30 s)."""
        for d in self.drivers:
            d.cancel()
        await asyncio.gather(*self.drivers, return_exceptions=True)
        pending = [t for n in sorted(self.inflight) for t in self.inflight[n]]
        await asyncio.gather(*pending, return_exceptions=True)

    def abort_region(self, region: str) -> None:
        """The region crashed: every operation in flight there becomes unknown."""
        for task in list(self.inflight[region]):
            task.cancel()

    async def _drive(self, region: str) -> None:
        rng = derive_rng(self.seed, "workload", region)
        loop = asyncio.get_running_loop()
        gap = self.opts.chaos_s / max(self.opts.ops_per_region, 1)
        # every region first creates the tenants it will use, so most later ops can land
        for n in range(self.opts.ops_per_region):
            await asyncio.sleep(rng.expovariate(1 / gap) if n else rng.uniform(0, 2))
            if loop.time() >= self.opts.chaos_s:
                break
            while len(self.inflight[region]) >= self.opts.inflight_per_region:  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # a client with a bounded connection pool
            op = self._choose(region, rng, first=n == 0)
            task = asyncio.create_task(self._execute(op))
            self.inflight[region][task] = op
            task.add_done_callback(lambda t, r=region: self.inflight[r].pop(t, None))

    def _choose(self, region: str, rng: random.Random, first: bool) -> Op:
        loop = asyncio.get_running_loop()
        opid = len(self.history.ops)
        if first or rng.random() < 0.04:
            kind, args = "create_tenant", {"tenant": rng.choice(self.tenants)}
        else:
            kind = rng.choices(
                [
                    "create_endpoint",
                    "patch_types",
                    "patch_description",
                    "delete_endpoint",
                    "publish",
                ],
                weights=[16, 14, 14, 0 if self.opts.failover else 8, 44],
            )[0]
            tenant, eid = rng.choice(self.endpoints)
            args = {"tenant": tenant}
            if (
                kind == "create_endpoint"
                and not self.opts.recreate_endpoints
                and eid in self.touched[region]
            ):
                kind = "publish"
            if kind != "publish":
                self.touched[region].add(eid)
            if kind == "create_endpoint":
                rkind = rng.choices(list(_RECEIVER_WEIGHTS), list(_RECEIVER_WEIGHTS.values()))[0]
                if self.opts.failover:
                    rkind = "fast"  # every delivery can succeed: none may be missing
                assert rkind in KINDS
                args.update(
                    endpoint=eid,
                    url=f"https://{rkind}-{rng.randint(0, 3)}.receivers.sim/hook/{eid}",
                    event_types=sorted(rng.sample(EVENT_TYPES, rng.randint(0, 2))),
                    description=f"d{opid}",
                )
            elif kind == "patch_types":
                picked = rng.sample(EVENT_TYPES, rng.randint(1, 3))
                cut = rng.randint(0, len(picked))
                args.update(endpoint=eid, add=sorted(picked[:cut]), remove=sorted(picked[cut:]))
            elif kind == "patch_description":
                args.update(endpoint=eid, description=f"d{opid}")
            elif kind == "delete_endpoint":
                args.update(endpoint=eid)
            else:
                payload = f'{{"op":{opid}}}'
                if self.opts.payload_bytes:  # a JSON string fills it up to that many bytes
                    pad = self.opts.payload_bytes - len(payload) - len(',"pad":""')
                    payload = f'{{"op":{opid},"pad":"{"p" * max(pad, 0)}"}}'
                args.update(event_type=rng.choice(EVENT_TYPES), payload=payload)
        op = Op(opid, region, kind, args, loop.time())
        self.history.ops.append(op)
        return op

    async def _execute(self, op: Op) -> None:
        loop = asyncio.get_running_loop()
        node = self.cluster.regions[op.region].node
        if node is None or not node.started:
            op.status, op.result, op.complete_t = "fail", "unavailable", loop.time()
            return
        op.actor = node.writer.actor
        op.vv_before = dict(node.writer.version_vector)
        a = op.args
        try:
            async with asyncio.timeout(_CLIENT_TIMEOUT_S):
                if op.kind == "create_tenant":
                    await node.registry_ops.create_tenant(a["tenant"], f"Tenant {a['tenant']}")
                elif op.kind == "create_endpoint":
                    body = {k: a[k] for k in ("url", "event_types", "description")}
                    await node.registry_ops.create_endpoint(
                        a["tenant"], {"id": a["endpoint"], **body}
                    )
                elif op.kind == "patch_types":
                    body = {"event_types_add": a["add"], "event_types_remove": a["remove"]}
                    await node.registry_ops.patch_endpoint(a["tenant"], a["endpoint"], body)
                elif op.kind == "patch_description":
                    body = {"description": a["description"]}
                    await node.registry_ops.patch_endpoint(a["tenant"], a["endpoint"], body)
                elif op.kind == "delete_endpoint":
                    await node.registry_ops.delete_endpoint(a["tenant"], a["endpoint"])
                else:
                    event, _ = await node.ingest.publish(
                        a["tenant"], a["event_type"], a["payload"].encode(), None
                    )
                    op.result = event.id
        except ClientError as exc:
            op.status, op.result = "fail", f"{type(exc).__name__}: {exc}"
        except (asyncio.CancelledError, TimeoutError, ConnectionError) as exc:
            op.status, op.result = "unknown", type(exc).__name__
        except Exception as exc:  # the node raised something no client should see
            op.status, op.result = "unknown", f"{type(exc).__name__}: {exc}"
            if node.started:
                self.history.unexpected.append(f"op {op.id} {op.kind}: {op.result}")
        else:
            op.status = "ok"
            op.vv_after = dict(node.writer.version_vector)
        op.complete_t = loop.time()
