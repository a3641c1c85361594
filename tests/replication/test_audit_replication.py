"""The audit log (issue 14): an entry written in one region travels with its registry
change through the replication log and is readable, identical, in every region."""

from __future__ import annotations

from memnodes import eventually, make_node

from regionsync.runtime.audit import acting_as


async def _entries(node, tenant=None, since_ms=None, limit=100):
    rows, _ = await node.listing.audit(tenant, since_ms, None, limit)
    return [(a.id, a.region, a.who, a.op, a.object, a.tenant, a.detail) for a in rows]


async def test_audit_entry_written_in_one_region_is_readable_in_every_other(net, started) -> None:
    names = ["a", "b", "c"]
    nodes = [make_node(net, n, [p for p in names if p != n]) for n in names]
    for n in nodes:
        await n.start()
        started.append(n)
    a, b, c = nodes
    acting_as("token:ops")  # as the HTTP layer names a caller
    await a.registry_ops.create_tenant("acme", "Acme")
    ep = await a.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
    await eventually(lambda: b.catalog.registry.has_tenant("acme"))
    acting_as("config:admin")
    src = await b.registry_ops.create_source({"tenant": "acme", "kind": "github", "secret": "s"})
    await b.registry_ops.patch_endpoint("acme", ep.id, {"secret": None})

    async def c_has_b() -> bool:  # c's writes then come after b's in HLC order
        return len(await _entries(c)) == 4

    await eventually(c_has_b)
    await c.registry_ops.create_tenant("globex", "Globex")
    await c.registry_ops.patch_endpoint("acme", ep.id, {"paused": True, "description": "x"})

    want = [
        ("c", "config:admin", "endpoint.update", f"endpoint/{ep.id}", "acme", "description,paused"),
        ("c", "config:admin", "tenant.create", "tenant/globex", "globex", ""),
        ("b", "config:admin", "endpoint.rotate_secret", f"endpoint/{ep.id}", "acme", "secret"),
        ("b", "config:admin", "source.create", f"source/{src['id']}", "acme", ""),
        ("a", "token:ops", "endpoint.create", f"endpoint/{ep.id}", "acme", ""),
        ("a", "token:ops", "tenant.create", "tenant/acme", "acme", ""),
    ]

    async def same_everywhere() -> bool:
        got = [await _entries(n) for n in nodes]
        return all(g == got[0] for g in got) and [e[1:] for e in got[0]] == want

    await eventually(same_everywhere)
    # ids name the record that carried the change: origin actor (region:incarnation)/seq
    for entry in await _entries(a):
        assert entry[0].startswith(f"{entry[1]}:") and entry[0].rsplit("/", 1)[1].isdigit()
    # filters and paging, in a region that wrote none of acme's first entries
    assert [e[3] for e in await _entries(c, tenant="globex")] == ["tenant.create"]
    rows, nxt = await c.listing.audit(None, None, None, 4)
    rest, end = await c.listing.audit(None, None, nxt, 4)
    assert len(rows) == 4 and len(rest) == 2 and end is None
    assert [x.id for x in rows + rest] == [e[0] for e in await _entries(c)]
    newest = rows[0].hlc_wall_ms
    assert all(x.hlc_wall_ms >= newest for x in (await c.listing.audit(None, newest, None, 9))[0])


async def test_changes_the_node_makes_itself_are_not_audited(net, started) -> None:
    a = make_node(net, "a", [])
    await a.start()
    started.append(a)
    await a.registry_ops.create_tenant("acme", "Acme")
    await a.ingest.publish("acme", "t", b"{}", None)  # counters: not a registry change
    assert [(e[2], e[3]) for e in await _entries(a)] == [("node", "tenant.create")]


async def test_a_delivery_retry_is_audited_in_every_region(net, started) -> None:
    """Issue 38 kind 5: the retry's entry travels with its delivery record."""
    a, b = make_node(net, "a", ["b"]), make_node(net, "b", ["a"])
    for n in (a, b):
        await n.start()
        started.append(n)
    acting_as("token:tok_1:ops")
    await a.registry_ops.create_tenant("acme", "Acme")
    ep = await a.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
    event, _ = await a.ingest.publish("acme", "t", b"{}", None)
    (d,) = await a.store.deliveries_of_event(event.id)
    await a.recovery.retry_delivery("acme", d.id)
    want = (
        "a",
        "token:tok_1:ops",
        "delivery.retry",
        f"delivery/{d.id}",
        "acme",
        f"endpoint={ep.id}",
    )

    async def everywhere() -> bool:
        got = [await _entries(n) for n in (a, b)]
        return all(g and g[0][1:] == want for g in got)

    await eventually(everywhere)
