"""Issue 17: usage moves ride with their group commit; a failed commit drops its own
events' moves with them but keeps the moves of earlier, durable events still carried."""

from __future__ import annotations

import pytest
from memnodes import FailOnce, make_node

from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.core.model import WriteBatch
from regionsync.runtime.node import Node


async def test_failed_commit_drops_its_moves_and_keeps_carried_ones(
    net: MemoryNetwork, started: list[Node]
) -> None:
    store = FailOnce()
    node = make_node(net, "a", [], store=store)
    started.append(node)
    await node.start()
    await node.registry_ops.create_tenant("acme", "A")
    writer, key = node.writer, ("acme", "events_published")

    def published() -> int:
        view = node.catalog.registry.tenant("acme")
        assert view is not None
        return view.usage["events_published"]

    async with writer.lock:  # committed under the lock: carried
        await writer.submit(WriteBatch(usage={key: 5}))
    store.fail_next = True
    with pytest.raises(OSError):
        await writer.submit(WriteBatch(usage={key: 100}))
    # the node reloads its state from the store after a failed commit: wait for that
    reload = [t for t in node._tasks if t.get_name() == "reload"]
    assert len(reload) == 1
    await reload[0]
    await writer.submit(WriteBatch(usage={key: 1}))
    assert published() == 6
