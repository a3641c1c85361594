"""A failed commit and the reload after it (Node._reload, GroupCommitter.resume): a
write built on the failed state is refused rather than committed (it would skip the
failed seq, and the reload would then hand its seq out again, so a later acknowledged
write's record was dropped from the log), and nothing commits while the state is read."""

from __future__ import annotations

import asyncio

import pytest
from memnodes import FailOnce, make_node

from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.runtime.node import Node


async def test_no_write_built_on_a_failed_commit_lands_and_no_seq_is_reused(
    net: MemoryNetwork, started: list[Node]
) -> None:
    store = FailOnce(fail_after_s=0.01)
    node = make_node(net, "a", [], store=store)
    started.append(node)
    await node.start()
    await node.registry_ops.create_tenant("t0", "A")
    store.fail_next = store.slow = True
    first = asyncio.create_task(node.registry_ops.create_tenant("t1", "fails"))
    await asyncio.sleep(0)  # t1 submitted
    async with node.writer.lock:  # a writer holding the lock as t1's commit fails
        second = asyncio.create_task(node.registry_ops.create_tenant("t2", "on t1's state"))
        await asyncio.sleep(0.05)  # t1 fails meanwhile; t2 and the reload wait for the lock
    (r1,) = await asyncio.gather(first, return_exceptions=True)
    (r2,) = await asyncio.gather(second, return_exceptions=True)
    assert isinstance(r1, OSError)
    assert isinstance(r2, OSError)  # refused: built on t1's state, before the reload
    for task in [t for t in node._tasks if t.get_name() == "reload"]:
        await asyncio.wait_for(task, 5)
    store.slow = False
    await node.registry_ops.create_tenant("t3", "after")
    await node.registry_ops.create_tenant("t4", "after")

    actor = node.writer.actor
    own = [r for r in await store.records_after({}, 100) if r.origin == actor]
    assert [r.seq for r in own] == list(range(1, len(own) + 1))  # no gap, none reused
    for tenant in ("t0", "t3", "t4"):  # every acknowledged write has its record
        assert any(tenant.encode() in r.body for r in own), tenant
    assert not node.catalog.registry.has_tenant("t1")
    assert not node.catalog.registry.has_tenant("t2")
    assert (await store.load_version_vector())[actor] == node.writer.version_vector[actor]


@pytest.mark.parametrize("fails", [1, 3])
async def test_a_reload_that_fails_is_tried_again_and_writes_resume(
    net: MemoryNetwork, started: list[Node], fails: int
) -> None:
    """The committer refuses batches until a reload succeeds, so a reload that cannot
    read the store is tried again (every second) rather than leaving the node refusing."""

    class Unreadable(FailOnce):
        left = fails

        async def load_version_vector(self) -> dict[str, int]:
            if self.left:
                self.left -= 1
                raise OSError("store away")
            return await super().load_version_vector()

    store = Unreadable()
    node = make_node(net, "a", [], store=store)
    started.append(node)
    store.left = 0
    await node.start()
    store.left, store.fail_next = fails, True
    with pytest.raises(OSError):
        await node.registry_ops.create_tenant("t1", "fails")
    with pytest.raises(OSError):  # refused until the reload succeeds
        await node.registry_ops.create_tenant("t2", "refused")
    for task in [t for t in node._tasks if t.get_name() == "reload"]:
        await asyncio.wait_for(task, 10)
    await node.registry_ops.create_tenant("t3", "after")
    assert node.catalog.registry.has_tenant("t3")
