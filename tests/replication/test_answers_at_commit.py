"""A committed registry change is answered with what it committed (QA of 2026-12-02: a
``POST /v1/sources`` whose tenant was deleted in another region while the source's group
commit ran answered 404 ``no source``, though the source was committed).

The kind: every registry write re-read its object after awaiting durability, so a
concurrent remote delete that landed during the commit turned a committed change into a
404. Now the answer is the object as the change left it, taken when it was applied."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from memnodes import eventually, make_node

from regionsync.core.model import WriteBatch

# each op takes the node and the id of its endpoint
_OPS: dict[str, Callable[[Any, str], Awaitable[Any]]] = {
    "patch tenant": lambda n, ep: n.registry_ops.patch_tenant("t1", {"name": "Renamed"}),
    "create endpoint": lambda n, ep: n.registry_ops.create_endpoint(
        "t1", {"url": "https://example.com/hook", "event_types": ["a"]}
    ),
    "patch endpoint": lambda n, ep: n.registry_ops.patch_endpoint(
        "t1", ep, {"description": "changed"}
    ),
    "create source": lambda n, ep: n.registry_ops.create_source(
        {"tenant": "t1", "kind": "github", "secret": "s" * 32}
    ),
    "create event type": lambda n, ep: n.event_types.create("t1", {"name": "order.paid"}),
    "update event type": lambda n, ep: n.event_types.update(
        "t1", "order.made", {"deprecated": True}
    ),
}


@pytest.mark.parametrize("op", sorted(_OPS))
async def test_a_delete_landing_during_the_commit_does_not_turn_it_into_a_404(
    op: str, net, started
) -> None:
    a, b = make_node(net, "a", ["b"]), make_node(net, "b", ["a"])
    for n in (a, b):
        await n.start()
        started.append(n)
    await a.registry_ops.create_tenant("t1", "One")
    ep = await a.registry_ops.create_endpoint(
        "t1", {"url": "https://example.com/a", "event_types": ["a"]}
    )
    await a.event_types.create("t1", {"name": "order.made"})
    await eventually(lambda: b.catalog.registry.event_type("t1", "order.made") is not None)
    # region b deletes the tenant; its delta reaches a while a's change is being committed
    remote_delete = b.catalog.registry.delete_tenant("t1")

    def land(_batch: WriteBatch) -> None:
        a.writer.commit_observers.remove(land)
        a.catalog.apply(remote_delete)

    a.writer.commit_observers.append(land)
    answer = await _OPS[op](a, ep.id)
    assert answer is not None
    assert land not in a.writer.commit_observers  # the delete landed before the answer
    assert not a.catalog.registry.has_tenant("t1")
