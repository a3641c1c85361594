"""Registry semantics over CRDTs: views, deltas, convergence, record bodies."""

from __future__ import annotations

import itertools

import msgpack
import pytest

from crdt import LWWRegister, ORSet, Timestamp
from regionsync.core.matching import SubscriptionIndex
from regionsync.core.model import Delivery, DeliveryStatus, Event, status_join
from regionsync.core.records import decode_body, encode_body
from regionsync.core.registry import Registry, key_type

A, B = "eu-central-1:1", "us-east-1:1"
EP_FIELDS = {"url": "https://x.example/h", "secret": "whsec_" + "A" * 32, "paused": False}


def _replay(deltas_in_order: list[dict]) -> Registry:
    reg = Registry()
    for d in deltas_in_order:
        reg.apply(d)
    return reg


def _setup() -> tuple[Registry, list[dict]]:
    reg = Registry()
    log: list[dict] = []

    def do(d: dict) -> None:
        reg.apply(d)
        log.append(d)

    do(reg.create_tenant("acme", "Acme", 1000, A, Timestamp(1000, 0)))
    do(reg.create_endpoint("ep1", "acme", EP_FIELDS, ["a", "b"], 1001, A, Timestamp(1001, 0)))
    return reg, log


def test_views() -> None:
    reg, _ = _setup()
    t = reg.tenant("acme")
    assert t is not None and t.name == "Acme" and t.usage["events_published"] == 0
    ep = reg.endpoint("ep1", "acme")
    assert ep is not None and ep.event_types == ("a", "b") and ep.state == "active"
    assert reg.endpoint("ep1", "other") is None
    index = SubscriptionIndex(reg.endpoints("acme"))
    assert index.match("acme", "a", {}) == ["ep1"]
    assert index.match("acme", "z", {}) == []


def test_concurrent_type_add_and_remove_both_hold() -> None:
    reg, log = _setup()
    # two regions start from the same state and change the subscription concurrently
    add = reg.patch_endpoint("ep1", {}, ["c"], [], 2000, A, Timestamp(2000, 0))
    rem = reg.patch_endpoint("ep1", {}, [], ["a"], 2000, B, Timestamp(2000, 0))
    for order in ([add, rem], [rem, add]):
        r = _replay(log + order)
        ep = r.endpoint("ep1")
        assert ep is not None and ep.event_types == ("b", "c")


def test_replacing_event_types_removes_unlisted() -> None:
    reg, _ = _setup()
    reg.apply(reg.patch_endpoint("ep1", {"event_types": ["b", "z"]}, [], [], 3, A, Timestamp(3, 0)))
    ep = reg.endpoint("ep1")
    assert ep is not None and ep.event_types == ("b", "z")


def test_delete_endpoint_and_tenant() -> None:
    reg, _ = _setup()
    reg.apply(reg.delete_endpoint("ep1", "acme"))
    assert reg.endpoint("ep1") is None and reg.endpoints("acme") == []
    reg.apply(reg.delete_tenant("acme"))
    assert reg.tenant("acme") is None


def test_recreated_tenant_starts_without_old_endpoints() -> None:
    reg, _ = _setup()
    reg.apply(reg.delete_tenant("acme"))
    reg.apply(reg.create_tenant("acme", "Again", 5, A, Timestamp(5, 0)))
    assert reg.endpoints("acme") == []


def test_recreated_endpoint_id_keeps_new_types_and_a_later_description() -> None:
    """An older release's records may still re-create an endpoint id (the API generates
    ids now): the new types survive the merge with the old life's dots
    (sim/regressions/registry-recreate-endpoint-dot-reuse.toml), and the re-creation's
    fields win over every write it had seen, whatever their stamps."""
    reg, log = _setup()
    patch = reg.patch_endpoint("ep1", {"description": "old"}, [], [], 9, B, Timestamp(9_000, 0))
    reg.apply(patch)
    log.append(patch)
    delete = reg.delete_endpoint("ep1", "acme")
    reg.apply(delete)
    again = reg.create_endpoint(
        "ep1", "acme", {**EP_FIELDS, "description": "new"}, ["c"], 2, A, Timestamp(2, 0)
    )
    for order in itertools.permutations([delete, again]):
        ep = _replay(log + list(order)).endpoint("ep1", "acme")
        # the create saw the old types and description: both are superseded
        assert ep is not None and ep.event_types == ("c",) and ep.description == "new"


def test_hash_converges_in_any_order() -> None:
    _, log = _setup()
    reg = _replay(log)
    more = [
        reg.patch_endpoint("ep1", {"description": "x"}, [], [], 9, A, Timestamp(9, 0)),
        reg.patch_endpoint("ep1", {"description": "y"}, ["q"], [], 9, B, Timestamp(9, 0)),
        reg.count("acme", "events_published", 3, A),
        reg.count("acme", "events_published", 2, B),
    ]
    hashes = {_replay(log + list(p)).state_hash() for p in itertools.permutations(more)}
    assert len(hashes) == 1
    final = _replay(log + more)
    ep = final.endpoint("ep1")
    # equal HLC stamps and concurrent: the higher actor (us-east-1) wins
    assert ep is not None and ep.description == "y"
    t = final.tenant("acme")
    assert t is not None and t.usage["events_published"] == 5


def test_apply_rejects_wrong_type_for_key() -> None:
    with pytest.raises(TypeError):
        Registry().apply({"tenants": LWWRegister.empty()})
    with pytest.raises(TypeError):
        Registry().apply({"bogus/key": ORSet.empty()})


def test_key_types() -> None:
    assert key_type("tenants") is ORSet
    assert key_type("e/ep_1/url") is LWWRegister
    assert key_type("e/ep 1/url") is None
    assert key_type("t/acme/usage/nope") is None


def test_record_body_round_trip() -> None:
    reg, log = _setup()
    ev = Event("evt_1", "acme", "a", b'{"x":1}', "eu-central-1", 5)
    d = Delivery("dlv_1", "evt_1", "ep1", "acme", DeliveryStatus.DELIVERED, 1, None, "eu", 5, 6)
    body = encode_body(log[1], ev, d)
    out = decode_body("event", body)
    assert out.event == ev and out.delivery == d and out.registry == log[1]
    assert encode_body(log[1], ev, d) == body  # canonical


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("nope", encode_body({"tenants": ORSet.empty()})),
        ("registry", b"\xc1garbage"),
        ("registry", msgpack.packb([1, 2])),
        ("registry", msgpack.packb({"registry": {"tenants": b"junk"}})),
        ("registry", msgpack.packb({"registry": {"../etc": ORSet.empty().to_bytes()}})),
        ("registry", msgpack.packb({"registry": {"tenants": LWWRegister.empty().to_bytes()}})),
        ("event", msgpack.packb({"event": {"id": 1}})),
        ("event", msgpack.packb({"registry": {}})),
        ("delivery", msgpack.packb({"delivery": {"status": "weird"}})),
        ("registry", msgpack.packb({"registry": {}, "extra": 1})),
    ],
)
def test_malformed_bodies_rejected(kind: str, body: bytes) -> None:
    with pytest.raises(ValueError):
        decode_body(kind, body)


def test_status_join_is_a_semilattice() -> None:
    states = list(DeliveryStatus)
    for a, b, c in itertools.product(states, repeat=3):
        assert status_join(a, b) == status_join(b, a)
        assert status_join(a, status_join(b, c)) == status_join(status_join(a, b), c)
        assert status_join(a, a) == a
    assert status_join(DeliveryStatus.PENDING, DeliveryStatus.DELIVERED) is (
        DeliveryStatus.DELIVERED
    )


def test_endpoint_views_are_cached_until_their_keys_tenants_or_endpoint_sets_change() -> None:
    from crdt import Timestamp
    from regionsync.core.registry import Registry

    reg, actor = Registry(), "r:1"
    reg.apply(reg.create_tenant("acme", "Acme", 1, actor, Timestamp(1, 0)))
    fields = {"url": "https://hooks.example.com/x", "secret": "whsec_" + "A" * 44}
    reg.apply(reg.create_endpoint("ep_1", "acme", fields, ["a"], 2, actor, Timestamp(2, 0)))
    first = reg.endpoint("ep_1")
    assert first is not None and reg.endpoint("ep_1") is first  # cached
    assert reg.endpoint("ep_1", "other") is None and reg.endpoint("nope") is None
    assert "nope" not in reg._views  # ids that are not live do not grow the cache
    reg.apply(reg.patch_endpoint("ep_1", {"description": "d"}, (), (), 3, actor, Timestamp(3, 0)))
    second = reg.endpoint("ep_1")
    assert second is not None and second.description == "d" and second is not first
    reg.apply(reg.count("acme", "events_published", 1, actor))  # a counter keeps the cache
    assert reg.endpoint("ep_1") is second
    reg.apply(reg.delete_endpoint("ep_1", "acme"))
    assert reg.endpoint("ep_1") is None
    reg.apply(reg.create_endpoint("ep_2", "acme", fields, ["a"], 4, actor, Timestamp(4, 0)))
    assert reg.endpoint("ep_2") is not None
    reg.apply(reg.delete_tenant("acme"))
    assert reg.endpoint("ep_2") is None


@pytest.mark.parametrize(("value", "rate"), [(5, 5.0), (2.5, 2.5), (True, None), ("5", None)])
def test_publish_rate_reads_only_numbers(value: object, rate: float | None) -> None:
    """A replicated register holding a bool (or any non-number) is no rate override."""
    reg, _ = _setup()
    reg.apply(reg.patch_tenant("acme", {"publish_rate_per_s": value}, A, Timestamp(2000, 0)))
    assert reg.publish_rate("acme") == rate


def _reference_hash(reg: Registry) -> str:
    """The documented rule, computed from scratch: sha256 over (len, key, len, bytes) of
    every non-empty state, keys sorted."""
    import hashlib

    h = hashlib.sha256()
    for key in sorted(reg._states):
        state = reg._states[key]
        if state == type(state).empty():
            continue
        data = state.to_bytes()
        h.update(len(key).to_bytes(4, "big") + key.encode())
        h.update(len(data).to_bytes(4, "big") + data)
    return h.hexdigest()


def test_state_hash_follows_new_keys_changes_and_states_that_become_empty() -> None:
    reg, actor = Registry(), "r:1"
    assert reg.state_hash() == _reference_hash(reg)
    steps = [  # deltas made from the state at their turn
        lambda: reg.create_tenant("b", "B", 1, actor, Timestamp(1, 0)),
        lambda: reg.create_tenant("a", "A", 2, actor, Timestamp(2, 0)),  # sorts before
        lambda: reg.create_endpoint("ep", "a", EP_FIELDS, ["x"], 3, actor, Timestamp(3, 0)),
        lambda: reg.count("a", "events_published", 1, actor),  # a counter key appears
        lambda: reg.delete_endpoint("ep", "a"),  # the endpoint set becomes empty
        lambda: reg.delete_tenant("b"),
    ]
    seen = {reg.state_hash()}
    for step in steps:
        reg.apply(step())
        assert reg.state_hash() == _reference_hash(reg)
        assert reg.states() == {k: v for k, v in reg._states.items() if v != type(v).empty()}
        seen.add(reg.state_hash())
    assert len(seen) == len(steps) + 1


def test_usage_counters_are_shown_never_below_zero() -> None:
    """Two regions recording one delivery's success concurrently (a custody change with
    an attempt in flight) each take it off ``backlog``: the PN-Counter undershoots, and
    the tenant showed ``backlog: -1`` (QA of 2026-12-02). The converged counter keeps its
    value; the view shows 0."""
    reg = Registry()
    reg.apply(reg.create_tenant("acme", "Acme", 1, A, Timestamp(1, 0)))
    reg.apply(reg.count("acme", "backlog", 1, A))  # one pending delivery
    reg.apply(reg.count("acme", "backlog", -1, A))  # delivered, recorded in region A
    reg.apply(reg.count("acme", "backlog", -1, B))  # and by its custodian B
    reg.apply(reg.count("acme", "deliveries_succeeded", 2, B))
    t = reg.tenant("acme")
    assert t is not None and t.usage["backlog"] == 0 and t.usage["deliveries_succeeded"] == 2
    assert reg.usage("acme", "backlog") == -1


def _lww(value: str, ms: int) -> LWWRegister:
    return LWWRegister.empty().set(value, actor="a", stamp=Timestamp(ms, 0))


def test_registry_digest_is_kept_by_apply_and_order_free() -> None:
    """Issue 42: ``digest`` is kept by every apply (O(1) to read), equal over the same
    states whatever the order they came in, equal to one loaded from the store and to one
    worked out from scratch, and blind to empty states, like ``state_hash``."""
    deltas = {f"e/ep{i}/url": _lww(f"https://x/{i}", i + 1) for i in range(50)}
    a, b = Registry(), Registry()
    a.digest()  # worked out (empty) first, then kept by each apply
    for key in sorted(deltas):
        a.apply({key: deltas[key]})
    b.apply(dict(reversed(list(deltas.items()))))
    assert a.digest() == b.digest()
    loaded = Registry.from_bytes({k: v.to_bytes() for k, v in deltas.items()})
    assert loaded._digest is not None and loaded.digest() == a.digest()
    assert Registry(a.states()).digest() == a.digest()  # from scratch
    before = a.digest()
    a.apply({"e/gone/event_types": ORSet.empty()})  # an empty state counts as absent
    assert a.digest() == before
    a.apply({"e/ep7/url": _lww("https://y/", 10_000)})
    assert a.digest() != before
    b.apply({"e/ep7/url": _lww("https://y/", 10_000)})
    assert a.digest() == b.digest()
    assert Registry().digest() != before
