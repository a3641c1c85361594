"""A client-chosen event id accepted by two regions before they exchanged it (an SDK's
retry that failed over during a partition): one event of that id everywhere, receivers
see only that id as ``webhook-id``, and the regions' states agree."""

from __future__ import annotations

from memnodes import converged, eventually, make_node, start

EID = "evt_01JEV7Q0T4G5Z8C3M9WBX2N6HR"


async def test_same_id_in_two_partitioned_regions_converges(net, started) -> None:
    a, b = await start(started, make_node(net, "a", ["b"]), make_node(net, "b", ["a"]))
    await a.registry_ops.create_tenant("acme", "Acme")
    ep = await a.registry_ops.create_endpoint("acme", {"url": "https://h.example/"})
    await eventually(lambda: converged(a, b))
    net.partition("a", "b")
    payload = b'{"order":7}'
    made = [await n.ingest.publish("acme", "order.paid", payload, None, event_id=EID)
            for n in (a, b)]  # fmt: skip
    assert [created for _, created in made] == [True, True]  # neither knew the other's
    assert {e.id for e, _ in made} == {EID}
    again, created = await a.ingest.publish("acme", "order.paid", payload, None, event_id=EID)
    assert again.id == EID and not created
    net.heal()
    await eventually(lambda: converged(a, b))

    async def same_state() -> bool:
        views = []
        for n in (a, b):
            event = await n.store.get_event(EID)
            assert event is not None and event.payload == payload
            deliveries = await n.store.deliveries_of_event(EID)
            views.append(sorted((d.id, d.event_id, d.endpoint_id) for d in deliveries))
        return views[0] == views[1] and len(views[0]) == 2

    await eventually(same_state)
    for n in (a, b):
        assert (await n.store.counts(n.region))["events"] == 1
        listed, _ = await n.listing.events(_query("acme"), None, 10)
        assert [e.id for e, _ in listed] == [EID]

    async def settled() -> bool:  # both deliveries delivered, the outcomes exchanged
        for n in (a, b):
            ds = await n.store.deliveries_of_event(EID)
            if [d.status.value for d in ds] != ["delivered", "delivered"]:
                return False
        trees = [await n.anti_entropy.state_tree() for n in (a, b)]
        return trees[0].replicated_root() == trees[1].replicated_root()

    await eventually(settled)
    sent = [r for n in (a, b) for r in n.sender.requests]  # type: ignore[attr-defined]
    # at most one duplicate per endpoint, each region its own, with the same webhook-id
    assert {r.headers["webhook-id"] for r in sent} == {EID} and len(sent) <= 2
    assert {r.url for r in sent} == {"https://h.example/"} and ep.id


def _query(tenant: str):  # noqa: ANN202 - EventQuery of all the tenant's events
    from regionsync.core.model import EventQuery

    return EventQuery(tenant)


def test_a_client_id_is_a_baseline_record() -> None:
    # a node of the previous release reads the event record of a client's id: the id has
    # the form of the node's own ids, and no record field was added (no capability)
    from regionsync.core.capabilities import BASELINE
    from regionsync.core.model import Event
    from regionsync.core.records import decode_body, encode_body

    event = Event(EID, "acme", "order.paid", b'{"order":7}', "a", 1_700_000_000_000)
    assert decode_body("event", encode_body(event=event), BASELINE).event == event
