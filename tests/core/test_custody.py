"""Custody rules (core.custody): suspicion from gossiped contact, custody records, the
rendezvous successor per endpoint, hand-back."""

from __future__ import annotations

from collections import Counter

import pytest

from regionsync.core.custody import CustodyRecord, custody_writes, rendezvous, suspected

PEERS = ("b", "c", "d")
AFTER = 60_000


def test_rendezvous_is_stable_and_spreads_per_endpoint() -> None:
    picks = [rendezvous(["b", "c", "d"], f"ep_{i}") for i in range(3000)]
    assert picks == [rendezvous(["d", "c", "b"], f"ep_{i}") for i in range(3000)]  # order-free
    share = Counter(picks)
    assert set(share) == {"b", "c", "d"} and min(share.values()) > 800
    # removing one candidate moves only the endpoints it held (highest random weight)
    for i, p in enumerate(picks):
        if p != "d":
            assert rendezvous(["b", "c"], f"ep_{i}") == p
    with pytest.raises(ValueError):
        rendezvous([], "ep")


def test_suspected_by_gossip_not_by_one_link() -> None:
    now = 1_000_000
    heard = {"b": now - AFTER - 1, "c": now - 5, "d": now - AFTER}  # d exactly at the limit
    assert suspected(now, PEERS, heard, 0, AFTER) == {"b"}
    # a peer never heard counts from the node's start
    assert suspected(now, PEERS, {}, now - 10, AFTER) == frozenset()
    assert suspected(now, PEERS, {}, now - AFTER - 1, AFTER) == set(PEERS)


def test_writes_adopt_a_suspect_rewrite_dead_successors_and_hand_back() -> None:
    none: dict[str, CustodyRecord] = {}
    w = custody_writes("a", PEERS, frozenset({"b"}), none, True, 7)
    assert w == {"b": CustodyRecord(("a", "c", "d"), 7, "a")}
    # already adopted with live successors: nothing to write (no churn)
    assert custody_writes("a", PEERS, frozenset({"b"}), w, True, 8) == {}
    # a successor died too: rewritten without it
    w2 = custody_writes("a", PEERS, frozenset({"b", "c"}), w, True, 9)
    assert w2 == {"b": CustodyRecord(("a", "d"), 9, "a"), "c": CustodyRecord(("a", "d"), 9, "a")}
    # the owner hands back once caught up, not before
    mine = {"a": CustodyRecord(("b", "c", "d"), 1, "b")}
    assert custody_writes("a", PEERS, frozenset(), mine, False, 10) == {}
    assert custody_writes("a", PEERS, frozenset(), mine, True, 10) == {
        "a": CustodyRecord(("a", "b", "c", "d"), 10, "a")
    }


def test_custodian_and_record_values() -> None:
    rec = CustodyRecord(("c", "d"), 5, "c")
    assert rec.custodian("b", "ep_1") == rendezvous(["c", "d"], "ep_1")
    assert CustodyRecord(("b", "c"), 5, "c").custodian("b", "ep_1") == "b"  # owner is live
    assert CustodyRecord.from_value(rec.to_value()) == rec
    for bad in (None, 3, {"live": "c", "since": 1, "by": "c"}, {"live": [1], "since": 1, "by": "c"},
                {"live": ["c"], "since": "1", "by": "c"},
                {"live": ["c"], "since": True, "by": "c"}):  # fmt: skip
        assert CustodyRecord.from_value(bad) is None


def test_lagging_origins_are_those_a_peer_holds_more_of() -> None:
    """An origin a peer's Hello holds more of lags (a refused record is inside this
    node's version vector, so it never does); excluded origins never do."""
    from regionsync.core.custody import lagging

    theirs = {"a:1": 9, "c:1": 5, "b:1": 4}
    assert lagging({"a:1": 9, "c:1": 2}, theirs, ("b:1",)) == ["c:1"]
    assert lagging({"a:1": 9}, theirs, ()) == ["b:1", "c:1"]
