"""Issue 44: usage counter moves wait in the store's carry between records
(``ingest.usage_record_ms``). A carry is recorded once: not before the actor check, not
twice after a failed commit, and by a clean stop also where the store keeps no carry."""

from __future__ import annotations

import pytest
from memnodes import make_node, start

from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.core.model import WriteBatch
from regionsync.core.records import decode_body
from regionsync.runtime.node import Node

SLOW = {"ingest": {"usage_record_ms": 60_000}}  # only the first commit records at once


def published(node: Node) -> int:
    view = node.catalog.registry.tenant("acme")
    return -1 if view is None else view.usage["events_published"]


async def test_no_usage_record_before_the_actor_check(
    net: MemoryNetwork, started: list[Node]
) -> None:
    """A carry loaded at start is recorded only once the actor is checked: a record
    under an actor a peer has seen more of would reuse its seqs."""
    store = MemoryStore()
    await store.open("a", new_incarnation=5)
    await store.commit(WriteBatch(usage={("acme", "events_published"): 2}))
    await store.close()
    # b is not up: the actor check waits for its Hello (replication.actor_check_s)
    (a,) = await start(started, make_node(net, "a", ["b"], store, SLOW, actor_check_s=60))
    assert not a.writer.actor_checked.is_set()
    await a.writer.record_usage()  # commits, and records nothing
    assert [r for r in await store.records_after({}, 100) if r.kind == "registry"] == []
    assert await store.load_usage_carry() == {("acme", "events_published"): 2}


class FailNext(MemoryStore):
    def __init__(self, carry: bool = True) -> None:
        super().__init__()
        self.fail_next, self.carry = False, carry

    async def commit(self, batch: WriteBatch) -> None:
        if self.fail_next:
            self.fail_next = False
            raise OSError("disk full")
        await super().commit(batch)

    async def load_usage_carry(self) -> dict[tuple[str, str], int] | None:
        return await super().load_usage_carry() if self.carry else None


@pytest.mark.parametrize("carry", [True, False], ids=["carry-kept", "no-carry"])
async def test_a_failed_record_of_the_carry_is_shown_once_and_recorded_later(
    net: MemoryNetwork, started: list[Node], carry: bool
) -> None:
    store = FailNext(carry)
    (a,) = await start(started, make_node(net, "a", [], store, SLOW))
    await a.registry_ops.create_tenant("acme", "A")
    key = ("acme", "events_published")
    await a.writer.submit(WriteBatch(usage={key: 1}))  # the first commit records at once
    async with a.writer.lock:  # committed under the lock: carried
        await a.writer.submit(WriteBatch(usage={key: 2}))
    assert published(a) == 3
    store.fail_next = True
    with pytest.raises(OSError):
        await a.writer.record_usage()  # its record was applied in memory, then lost
    assert published(a) == 3  # shown once, not as the lost record and the carry
    (reload,) = [t for t in a._tasks if t.get_name() == "reload"]
    with pytest.raises(OSError):  # refused until the reload (GroupCommitter.resume)
        await a.writer.submit(WriteBatch(usage={key: 4}))
    await reload
    assert published(a) == 3
    await a.writer.submit(WriteBatch(usage={key: 4}))
    assert published(a) == 7
    await a.writer.record_usage()
    records = [r for r in await store.records_after({}, 100) if r.kind == "registry"]
    last = decode_body("registry", records[-1].body).registry
    assert last["t/acme/usage/events_published"].value() == 7 == published(a)


async def test_a_clean_stop_records_moves_a_store_without_carry_holds_in_memory(
    net: MemoryNetwork, started: list[Node]
) -> None:
    """Where the store keeps no carry (PostgreSQL), moves a held lock kept out of their
    commit's record are recorded by a clean stop (and the periodic task), not lost."""
    store = FailNext(carry=False)
    (a,) = await start(started, make_node(net, "a", [], store))
    await a.registry_ops.create_tenant("acme", "A")
    key = ("acme", "deliveries_succeeded")
    async with a.writer.lock:
        await a.writer.submit(WriteBatch(usage={key: 1}))
    assert published_as(a, "deliveries_succeeded") == 1
    await a.stop()
    started.remove(a)
    (a2,) = await start(started, make_node(net, "a", [], store))
    assert published_as(a2, "deliveries_succeeded") == 1


def published_as(node: Node, counter: str) -> int:
    view = node.catalog.registry.tenant("acme")
    return -1 if view is None else view.usage[counter]
