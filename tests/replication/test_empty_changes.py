"""A change that changes nothing must not stop replication (QA of 2026-12-02: an empty
``PATCH /v1/tenants/{t}`` wrote a registry record with no registry section; every peer
refused it, and since records apply in order per origin, nothing its region wrote after
it reached them again, anti-entropy included).

The kind: the local write path could log a record the peers' decoder refuses. Now a
change without deltas logs nothing, every local registry record is checked with the
peers' decoder before it is applied, and a registry record without a registry section
(written before this fix) decodes as an empty change, so logs that hold one heal."""

from __future__ import annotations

import pytest
from memnodes import eventually, make_node

from crdt import ORSet
from regionsync.core.model import Record, WriteBatch
from regionsync.core.records import encode_body
from regionsync.runtime.audit import audit_section


async def _pair(net, started):
    a, b = make_node(net, "a", ["b"]), make_node(net, "b", ["a"])
    for n in (a, b):
        await n.start()
        started.append(n)
    return a, b


async def _log_raw(node, body: bytes) -> int:
    """Log a registry record of ``body`` as the node's next own record, past every check
    (what an older version or a bug could have logged); returns its sequence number."""
    async with node.writer.local_lock():
        stamp, actor = node.writer.stamp(), node.writer.actor
        seq = node.writer.version_vector[actor] + 1
        record = Record(actor, seq, "registry", body, (stamp.wall_ms, stamp.logical))
        node.writer.version_vector[actor] = seq
        durable = node.writer.submit(WriteBatch(records=[record], version_vector={actor: seq}))
    await durable
    return seq


async def test_an_empty_patch_logs_nothing_and_later_changes_replicate(net, started) -> None:
    a, b = await _pair(net, started)
    await a.registry_ops.create_tenant("t1", "One")
    await a.event_types.create("t1", {"name": "order.paid"})
    await eventually(lambda: b.catalog.registry.event_type("t1", "order.paid") is not None)
    seq = a.writer.version_vector[a.writer.actor]
    view = await a.registry_ops.patch_tenant("t1", {})
    assert view.name == "One" and a.writer.version_vector[a.writer.actor] == seq  # no record
    # the neighbours: an empty PATCH of an event type still records its updated_at
    await a.event_types.update("t1", "order.paid", {})
    await a.registry_ops.create_tenant("t2", "Two")
    await eventually(lambda: b.catalog.registry.has_tenant("t2"))
    assert b.counters["records_rejected"] == 0
    rows, _ = await a.listing.audit("t1", None, None, 10)
    assert "tenant.update" not in [r.op for r in rows]


async def test_a_logged_registry_record_without_registry_section_heals(net, started) -> None:
    """A record as the old code wrote it for an empty PATCH (audit only) is applied by
    the peers as an empty change, and what follows it replicates."""
    a, b = await _pair(net, started)
    await a.registry_ops.create_tenant("t1", "One")
    # the old record, logged as the old code did
    await _log_raw(a, encode_body(audit=audit_section("tenant.update", "tenant/t1", "t1", "")))
    await a.registry_ops.create_tenant("t2", "Two")
    await eventually(lambda: b.catalog.registry.has_tenant("t2"))
    assert b.counters["records_rejected"] == 0
    rows, _ = await b.listing.audit("t1", None, None, 10)
    assert [r.op for r in rows] == ["tenant.update", "tenant.create"]


async def test_a_registry_record_the_peers_would_refuse_is_not_logged(net, started) -> None:
    a, _ = await _pair(net, started)
    await a.registry_ops.create_tenant("t1", "One")
    vv, tenants = dict(a.writer.version_vector), a.catalog.registry.tenant_ids()
    bad = {"tenants": ORSet().add("t\x00bad", actor=a.writer.actor)}  # not an id
    async with a.writer.local_lock():
        with pytest.raises(ValueError, match="peers would refuse"):
            a.writer.commit_local("registry", a.writer.stamp(), bad)
    assert a.writer.version_vector == vv and a.catalog.registry.tenant_ids() == tenants


async def test_a_record_the_peer_refuses_is_moved_past(net, started) -> None:
    """Whatever record a peer refuses (an older version's bug, a bit flip), its origin's
    later records must not stop there: the peer moves its version vector past it (issue
    41), and both sides show the refusal."""
    a, b = await _pair(net, started)
    await a.registry_ops.create_tenant("t1", "One")
    await eventually(lambda: b.catalog.registry.has_tenant("t1"))
    # a record no decoder takes: an unknown registry key
    seq = await _log_raw(a, encode_body(registry={"no/such/key": ORSet()}))
    await a.registry_ops.create_tenant("t2", "Two")
    await eventually(lambda: b.catalog.registry.has_tenant("t2"))
    assert b.counters["records_rejected"] == 1  # once: not resent, not repaired in a loop
    assert b.writer.version_vector.get(a.writer.actor, 0) > seq
    note = b.replica.refusals[a.writer.actor]
    assert (note.count, note.skipped, note.last_seq) == (1, 1, seq)
    await eventually(lambda: a.writer.actor in a.peers["b"].refused)
    assert a.peers["b"].refused[a.writer.actor]["last_seq"] == seq
    await a.registry_ops.create_tenant("t3", "Three")  # and the log flows again
    await eventually(lambda: b.catalog.registry.has_tenant("t3"))


async def _create_as_an_older_release(node, tenant: str, eid: str, event_types: list[str]):
    """Create endpoint ``eid`` as a release before issue 37 did for a caller-chosen id:
    the registry's own deltas, committed and replicated as any local change. Ids are
    generated now, but a region not yet upgraded can still re-create a deleted one."""
    fields = {"url": "https://h.example/hook", "secret": "whsec_" + "A" * 44}
    async with node.writer.local_lock():
        stamp = node.writer.stamp()
        deltas = node.catalog.registry.create_endpoint(
            eid, tenant, fields, event_types, stamp.wall_ms, node.writer.actor, stamp
        )
        durable = node.writer.commit_local("registry", stamp, deltas)
    await durable
    return node.catalog.endpoint(tenant, eid)


async def test_a_re_created_endpoint_starts_without_the_old_subscriptions(net, started) -> None:
    """QA 2026-12-02: delete an endpoint subscribed to a, b and create its id again with
    m: it was subscribed to a, b and m in every region (the set was never emptied)."""
    a, b = await _pair(net, started)
    await a.registry_ops.create_tenant("rx", "Rx")
    url = {"url": "https://h.example/hook"}
    r1 = (await a.registry_ops.create_endpoint("rx", {**url, "event_types": ["a", "b"]})).id
    await a.registry_ops.delete_endpoint("rx", r1)
    again = await _create_as_an_older_release(a, "rx", r1, ["m"])
    assert sorted(again.event_types) == ["m"]
    await eventually(lambda: b.catalog.registry.has_tenant("rx"))

    def on_b() -> list[str] | None:
        try:
            return sorted(b.catalog.endpoint("rx", r1).event_types)
        except Exception:
            return None

    await eventually(lambda: on_b() == ["m"])
    # the same re-created in the other region, after it saw the delete
    await b.registry_ops.delete_endpoint("rx", r1)
    await _create_as_an_older_release(b, "rx", r1, ["z"])
    assert sorted(b.catalog.endpoint("rx", r1).event_types) == ["z"]
    await eventually(lambda: sorted(a.catalog.endpoint("rx", r1).event_types) == ["z"])
    # an endpoint created with no types at all (every type) after one that had some
    await a.registry_ops.delete_endpoint("rx", r1)
    fresh = await _create_as_an_older_release(a, "rx", r1, [])
    assert list(fresh.event_types) == []
