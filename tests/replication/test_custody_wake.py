"""A region that becomes a custodian of a dead region's deliveries starts them at once,
not at its idle poll. Regions a, b, c; a is cut off; b writes the custody record that
hands a's deliveries to b and c; c, the custodian of the event's endpoint, must deliver
it within a patience half its 60 s idle poll, when:

- the record arrives by replication (a replicated ``c/`` key woke no claim round:
  ``DeliveryWorker._registry_changed``);
- c comes to suspect a only after the record arrived (a custody step that found an
  owner claimable since the last one woke none: ``Custody.step``);
- a's records, with the pending delivery, reach c after the record
  (``DeliveryWorker._committed``);
- the record arrives while a read of c's own due rows is under way (the wake-up was
  spent waiting for that read, which found nothing: ``DeliveryWorker._fetched``).

Each test waited for the idle poll before its fix."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from memnodes import eventually, make_node

from regionsync.core.custody import rendezvous
from regionsync.core.retry import AttemptOutcome, OutcomeKind
from regionsync.runtime.ports import OutboundRequest

IDLE_POLL_S = 60.0  # c's longest idle wait: far past the patience below
PATIENCE_S = 30.0


class CountingSender:
    """Counts requests per ``webhook-id`` and answers 204; with ``held``, never answers."""

    def __init__(self, held: bool = False) -> None:
        self.held = held
        self.sent: Counter[str] = Counter()

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        self.sent[request.headers["webhook-id"]] += 1
        if self.held:
            await asyncio.Event().wait()
        return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)


class Cluster:
    """Regions a, b, c started: a's attempts never end; b writes the custody record
    ``b_failover_s`` after a is cut off; c (idle poll ``IDLE_POLL_S``, ready) writes
    none: its own custody step is off unless ``c_step_s`` is given. ``tenant``'s one
    endpoint is delivered by c once a's deliveries are handed to b and c."""

    def __init__(self, net, b_failover_s: float, c_failover_s: float, c_step_s: float | None):  # type: ignore[no-untyped-def]
        self.net = net
        self.held, self.c_sender = CountingSender(held=True), CountingSender()
        self.a = make_node(net, "a", ["b", "c"], sender=self.held, failover_after_s=30.0,
                           heartbeat_s=0.1, custody_interval_s=0.1)  # fmt: skip
        self.b = make_node(net, "b", ["a", "c"], failover_after_s=b_failover_s,
                           custody_interval_s=0.1, heartbeat_s=0.1)  # fmt: skip
        self.c = make_node(net, "c", ["a", "b"], sender=self.c_sender,
                           failover_after_s=c_failover_s, heartbeat_s=0.1,
                           custody_interval_s=c_step_s or IDLE_POLL_S,
                           extra={"delivery": {"poll_interval_s": IDLE_POLL_S}})  # fmt: skip
        self.tenant = ""

    async def start(self, started: list) -> None:  # type: ignore[type-arg]
        for n in (self.a, self.b, self.c):
            await n.start()
            started.append(n)

        async def ready() -> bool:  # c's custody step latches it (its own step may be off)
            await self.c.custody.step()
            return self.c.custody.ready

        await eventually(ready)
        for i in range(64):  # a tenant whose one endpoint c adopts (rendezvous over b, c)
            self.tenant = f"t{i}"
            await self.a.registry_ops.create_tenant(self.tenant, "T")
            ep = await self.a.registry_ops.create_endpoint(
                self.tenant, {"url": "https://h.example/"}
            )
            if rendezvous(("b", "c"), ep.id) == "c":
                break
        await eventually(lambda: self.c.catalog.registry.endpoint(ep.id) is not None)

    async def publish(self) -> str:
        """An event of ``tenant`` at a, its attempt in flight there and its delivery
        pending in c."""
        event, _ = await self.a.ingest.publish(self.tenant, "t", b"{}", None)
        await eventually(lambda: sum(self.held.sent.values()) == 1)

        async def pending_in_c() -> bool:
            return len(await self.c.store.deliveries_of_event(event.id)) == 1

        await eventually(pending_in_c)
        return event.id

    def cut_a(self) -> None:
        for other in ("b", "c"):
            self.net.partition("a", other)

    async def delivered_by_c(self, event_id: str) -> None:
        await eventually(lambda: "a" in self.c.catalog.custody, timeout_s=PATIENCE_S)
        assert self.c.catalog.custody["a"].by == "b"
        await eventually(lambda: self.c_sender.sent[event_id] == 1, timeout_s=PATIENCE_S)
        assert self.c.catalog.custody["a"].by == "b"  # c wrote none: no own write woke it


@pytest.mark.parametrize("c_failover_s", [1.0, 4.0], ids=["suspects-first", "record-first"])
async def test_a_custodian_named_by_a_peer_starts_the_adopted_deliveries(
    net, started, c_failover_s
) -> None:
    """b writes the record 2 s after a is cut off. With c_failover_s 1, c suspects a
    before it arrives; with 4, after (c's custody step then finds a claimable)."""
    cl = Cluster(net, 2.0, c_failover_s, 0.2 if c_failover_s > 2 else None)
    await cl.start(started)
    event_id = await cl.publish()
    cl.cut_a()
    await cl.delivered_by_c(event_id)


async def test_an_owners_delivery_arriving_after_the_custody_record_starts_at_once(
    net, started
) -> None:
    """a is cut off before its event's records leave it; then they reach c (as a late
    relay or a repair would bring them) after the record."""
    cl = Cluster(net, 1.0, 1.0, None)
    await cl.start(started)
    a, c = cl.a, cl.c
    seen = dict(c.writer.durable_vv)
    cl.cut_a()
    event, _ = await a.ingest.publish(cl.tenant, "t", b"{}", None)
    await eventually(lambda: "a" in c.catalog.custody, timeout_s=PATIENCE_S)
    late = [r for r in await a.store.records_after(seen, 1000) if r.origin == a.writer.actor]
    assert late and not await c.store.deliveries_of_event(event.id)
    assert await c.replica.apply_records(late) == []
    await cl.delivered_by_c(event.id)


async def test_a_custody_record_arriving_while_a_read_is_under_way_starts_them(
    net, started
) -> None:
    """The record arrives while c reads its own due rows (a slow query): the wake-up it
    gives finds that read under way, and the read, which began before the record, finds
    nothing. The read's end must claim and read again."""
    cl = Cluster(net, 2.0, 1.0, None)
    await cl.start(started)
    c = cl.c
    event_id = await cl.publish()
    await asyncio.sleep(0.2)  # c idle, its last read quiet
    read = c.store.due_deliveries
    armed = [True]

    async def slow_read(region, *args, **kwargs):  # type: ignore[no-untyped-def]
        rows = await read(region, *args, **kwargs)
        if region == "c" and armed[0]:
            armed[0] = False  # c/a arrives before this read of c's own rows returns
            await eventually(lambda: "a" in c.catalog.custody, timeout_s=PATIENCE_S)
            await asyncio.sleep(0.05)
        return rows

    c.store.due_deliveries = slow_read  # type: ignore[method-assign]
    cl.cut_a()
    c.queue.add()  # any addition at c (a retry, a resumed endpoint...): c reads
    await cl.delivered_by_c(event_id)
    assert not armed[0]
