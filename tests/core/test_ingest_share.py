"""core.ingest_share: a tenant's share of the write path while other tenants publish."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from regionsync.core.ingest_share import CONTENDED_S, IngestShare


def started(share: IngestShare, tenant: str, n: int, now: float, first: int = 0) -> list[bool]:
    return [share.ask(tenant, first + i, now) for i in range(n)]


def test_a_tenant_alone_is_never_held_back() -> None:
    share = IngestShare(cap=2)
    assert started(share, "a", 10, 0.0) == [True] * 10
    assert share.inflight == {"a": 10} and not share.waiting


def test_while_another_tenant_is_in_flight_a_tenant_gets_its_cap_and_the_rest_wait() -> None:
    share = IngestShare(cap=2)
    assert share.ask("b", 100, 0.0)
    assert started(share, "a", 4, 0.0) == [True, True, False, False]
    assert list(share.waiting["a"]) == [2, 3]
    assert share.ask("b", 101, 0.0)  # the other tenant under its cap is not held back
    assert share.done("a", 0.1) == [("a", 2)]  # one of its own ends: its next starts
    assert share.done("a", 0.2) == [("a", 3)]
    assert not share.waiting and share.inflight == {"a": 2, "b": 2}


def test_another_tenants_recent_publish_counts_for_contended_s() -> None:
    share = IngestShare(cap=1)
    assert share.ask("b", 100, 0.0)
    assert share.done("b", 0.5) == []
    assert started(share, "a", 2, 0.6) == [True, False]  # b published 0.1 s ago
    assert share.done("a", 0.5 + CONTENDED_S) == [("a", 1)]  # b's end is still recent
    assert not share.contended("a", 0.5 + CONTENDED_S + 0.01)
    assert started(share, "a", 3, 0.5 + CONTENDED_S + 0.01, first=2) == [True] * 3


def test_when_the_node_stops_being_shared_a_tenants_next_end_starts_all_its_waiters() -> None:
    share = IngestShare(cap=1)
    assert share.ask("b", 100, 0.0)
    assert started(share, "a", 4, 0.0) == [True, False, False, False]
    assert share.done("b", 0.0) == []  # b's end: a is still at its cap, b seen just now
    assert share.done("a", 2 * CONTENDED_S) == [("a", 1), ("a", 2), ("a", 3)]


def test_a_new_publish_queues_behind_its_tenants_waiters_even_when_it_could_start() -> None:
    share = IngestShare(cap=1)
    assert share.ask("b", 100, 0.0)
    assert started(share, "a", 2, 0.0) == [True, False]
    assert share.done("b", 0.0) == []
    # b is gone long ago, but a's waiter came first: the newcomer waits behind it
    assert share.ask("a", 9, 5.0) is False
    assert share.done("a", 5.0) == [("a", 1), ("a", 9)]


def test_a_withdrawn_waiter_never_starts() -> None:
    share = IngestShare(cap=1)
    assert share.ask("b", 100, 0.0)
    assert started(share, "a", 3, 0.0) == [True, False, False]
    share.withdraw("a", 1)
    share.withdraw("a", 77)  # not waiting (already started or unknown): nothing
    assert share.done("a", 0.1) == [("a", 2)]
    share.withdraw("a", 2)  # started already: nothing to withdraw
    assert not share.waiting and share.inflight == {"a": 1, "b": 1}


def test_no_cap_means_no_share() -> None:
    share = IngestShare(cap=0)
    assert share.ask("b", 100, 0.0)
    assert started(share, "a", 50, 0.0) == [True] * 50


def test_done_of_the_last_publish_forgets_the_tenants_count() -> None:
    share = IngestShare(cap=3)
    assert share.ask("a", 1, 0.0)
    assert share.done("a", 0.1) == []
    assert share.inflight == {}


ops = st.lists(
    st.tuples(
        st.sampled_from(["ask", "done", "withdraw", "wait"]),
        st.sampled_from(["a", "b", "c"]),
        st.floats(0.0, 0.7),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(cap=st.integers(1, 3), steps=ops)
def test_random_traffic_keeps_the_share_and_loses_no_waiter(cap: int, steps) -> None:
    share, now, ticket = IngestShare(cap=cap), 0.0, 0
    running: dict[str, int] = {}
    queued: dict[str, list[int]] = {}

    def start(grants: list[tuple[str, int]]) -> None:
        for tenant, t in grants:
            assert queued[tenant][0] == t  # in arrival order, per tenant
            queued[tenant].pop(0)
            running[tenant] = running.get(tenant, 0) + 1
            assert running[tenant] <= cap or not share.contended(tenant, now)

    for op, tenant, dt in steps:
        now += dt
        if op == "ask":
            ticket += 1
            if share.ask(tenant, ticket, now):
                assert not queued.get(tenant)
                running[tenant] = running.get(tenant, 0) + 1
                assert running[tenant] <= cap or not share.contended(tenant, now)
            else:
                queued.setdefault(tenant, []).append(ticket)
        elif op == "done" and running.get(tenant):
            running[tenant] -= 1
            start(share.done(tenant, now))
        elif op == "withdraw" and queued.get(tenant):
            share.withdraw(tenant, queued[tenant].pop())
        assert {t: n for t, n in running.items() if n} == share.inflight
        assert {t: q for t, q in queued.items() if q} == {
            t: list(q) for t, q in share.waiting.items()
        }
        for t in share.waiting:  # the invariant that keeps waiters moving
            assert share.inflight.get(t, 0) >= cap
    while any(running.values()):  # every publish ends: every waiter starts
        tenant = next(t for t, n in running.items() if n)
        running[tenant] -= 1
        now += 0.01
        start(share.done(tenant, now))
    assert not share.waiting and not any(queued.values())
