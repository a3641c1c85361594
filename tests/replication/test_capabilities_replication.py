"""Capability negotiation between real nodes (issue 40): a region on the previous release
(reading the baseline only) holds the new forms back; upgrading it raises the set, rolling
it back lowers it again, and nothing is refused at any step."""

from __future__ import annotations

from memnodes import eventually, make_node

from regionsync.adapters.memory_store import MemoryStore
from regionsync.core.capabilities import ALL, BASELINE, RELEASE, announced
from regionsync.core.records import decode_body
from regionsync.runtime.node import Node

NEW = announced(ALL)


async def _registry_bodies(node: Node) -> list[bytes]:
    recs = await node.store.records_after({}, 10_000)
    return [r.body for r in recs if r.kind == "registry" and r.origin == node.writer.actor]


async def test_upgrade_and_rollback_move_the_feature_set(net, started) -> None:
    names = ["a", "b", "c"]
    peers = {n: [p for p in names if p != n] for n in names}
    c_store = MemoryStore()
    a = make_node(net, "a", peers["a"])
    b = make_node(net, "b", peers["b"])
    c = make_node(net, "c", peers["c"], store=c_store, reads=BASELINE)  # 0.1.0
    for n in (a, b, c):
        await n.start()
        started.append(n)
    await eventually(lambda: all(p in a.capabilities.heard for p in ("b", "c")))
    view = a.view.cluster()
    by = {p["region"]: p for p in view["peers"]}
    assert by["c"]["version"] == "" and by["c"]["features"] == []
    assert by["b"]["version"] == RELEASE and by["b"]["features"] == NEW
    assert view["capabilities"]["effective"] == [] and view["capabilities"]["held_back_by"] == ["c"]
    await a.registry_ops.create_tenant("acme", "Acme")
    await eventually(lambda: c.catalog.registry.has_tenant("acme"))
    assert all(b"_writer" not in body for body in await _registry_bodies(a))

    # c upgraded: every region reads optional-fields, a writes the _writer section
    await c.stop()
    c = make_node(net, "c", peers["c"], store=c_store)
    await c.start()
    started.append(c)
    await eventually(lambda: a.capabilities.enabled("optional-fields"))
    await a.registry_ops.create_tenant("globex", "Globex")
    await eventually(lambda: c.catalog.registry.has_tenant("globex"))
    bodies = await _registry_bodies(a)
    assert decode_body("registry", bodies[-1]).writer == RELEASE
    assert a.view.cluster()["capabilities"]["held_back_by"] == []

    # c rolled back to 0.1.0: the set drops at its Hello, a writes the older form again,
    # and what a wrote in the new form before reaches c stripped of it, never refused
    await c.stop()
    c = make_node(net, "c", peers["c"], store=c_store, reads=BASELINE)
    await a.registry_ops.create_tenant("initech", "Initech")  # written while c is down
    await c.start()
    started.append(c)
    await eventually(lambda: not a.capabilities.enabled("optional-fields"))
    await a.registry_ops.create_tenant("umbrella", "Umbrella")
    await eventually(lambda: c.catalog.registry.has_tenant("umbrella"))
    assert c.catalog.registry.has_tenant("initech")
    assert b"_writer" not in (await _registry_bodies(a))[-1]
    assert all(not n.replica.refusals for n in (a, b, c))
    assert c.counters["records_rejected"] == 0


async def test_a_region_holding_the_set_back_is_reported_once(net, started, caplog) -> None:
    a = make_node(net, "a", ["c"], extra={"operational_webhooks": {"tenant": "ops"}},
                  upgrade_held_back_after_s=0.2)  # fmt: skip
    c = make_node(net, "c", ["a"], reads=BASELINE)
    for n in (a, c):
        await n.start()
        started.append(n)
    published: list[tuple[str, dict]] = []

    async def publish(tenant: str, event_type: str, payload: dict, event_id: str | None) -> dict:
        published.append((event_type, payload))
        return payload  # accepted (None: an event of that id was held already)

    a.ops.publish = publish
    await eventually(lambda: len(published) == 1)
    event_type, payload = published[0]
    assert event_type == "cluster.upgrade_held_back"
    assert payload["regions"] == ["c"] and payload["missing"] == {"c": NEW}
    assert payload["effective"] == [] and payload["region"] == "a"
    assert "held back" in caplog.text
