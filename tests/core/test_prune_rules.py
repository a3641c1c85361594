"""core/pruning.py and the compacted stopped-process marker (core/removal.py)."""

from __future__ import annotations

import msgpack

from crdt import RETIRED, LWWRegister, ORSet, PNCounter, Timestamp
from regionsync.core.pruning import (
    SINK,
    acknowledged_everywhere,
    compact_retired,
    prune_arriving,
    prune_stored,
    retired_entries,
)
from regionsync.core.removal import ProcessMarker, compact, parse_process_marker

GONE, LIVE = "c:1", "a:1"


def never(actor: str) -> bool:
    return False


def test_stored_states_lose_the_actor_and_keep_their_value() -> None:
    reg = LWWRegister.empty().set("v", actor=GONE, stamp=Timestamp(1, 0))
    reg = reg.merge(reg.set("w", actor=LIVE, stamp=Timestamp(2, 0)))
    assert GONE not in prune_stored(reg, [GONE]).clock and prune_stored(reg, [GONE]).value() == "w"
    counter = PNCounter({GONE: 5, LIVE: 2}, {GONE: 1})
    assert prune_stored(counter, [GONE]) == PNCounter({SINK: 5, LIVE: 2}, {SINK: 1})
    # collapsing a second actor adds to the sink (deterministic, sorted order)
    assert prune_stored(PNCounter({"b:1": 1, GONE: 5}), [GONE, "b:1"]).p == {SINK: 6}


def test_an_or_set_arriving_with_a_pruned_actors_removed_element_is_stripped() -> None:
    s = ORSet.empty()
    s = s.merge(s.add("x", actor=GONE))
    late = s  # a peer that never saw the removal below
    s = s.merge(s.remove("x"))
    stored = prune_stored(s, [GONE])
    assert stored.context.max(GONE) == 0
    held = {GONE}.__contains__
    incoming, _ = prune_arriving(late, stored, held, held, held)
    assert "x" not in stored.merge(incoming).value()
    # a replica that never held the actor's dots (joined later) keeps what arrives
    incoming, _ = prune_arriving(late, ORSet.empty(), held, held, never)
    assert "x" in ORSet.empty().merge(incoming).value()


def test_a_counter_pruned_elsewhere_prunes_the_stored_one_first() -> None:
    stored = PNCounter({GONE: 3, LIVE: 1})
    pruned_elsewhere = PNCounter({SINK: 3, LIVE: 1})
    retired = {GONE}.__contains__
    incoming, new_stored = prune_arriving(pruned_elsewhere, stored, never, retired, never)
    assert new_stored is not None and new_stored.merge(incoming).value() == 4
    # a delta of a live actor (no sink) leaves the stored state alone
    _, untouched = prune_arriving(PNCounter({LIVE: 2}), stored, never, retired, never)
    assert untouched is None


def test_acknowledged_everywhere_waits_for_every_peer() -> None:
    snap = {LIVE: 4, GONE: 9, "b:1": 2}
    retired = {GONE}.__contains__
    assert not acknowledged_everywhere(snap, {"b": {LIVE: 4, "b:1": 2}, "d": None}, retired)
    assert not acknowledged_everywhere(snap, {"b": {LIVE: 3, "b:1": 2}}, retired)
    assert acknowledged_everywhere(snap, {"b": {LIVE: 4, "b:1": 2}}, retired)


def test_a_marker_stays_bounded_over_a_thousand_process_starts() -> None:
    marker, sizes = ProcessMarker({}), []
    pruned: set[str] = set()
    for inc in range(2, 1002):  # process 1 lives on; 1000 start, write, stop, retire
        actor = f"pg:{inc}"
        marker = ProcessMarker({**marker.retired, actor: 3}, marker.floor, marker.keep)
        pruned.add(actor)  # pruned here once every region acknowledged
        marker = compact(marker, "pg", pruned.__contains__, alive={1, inc + 1})
        sizes.append(len(msgpack.packb(marker.to_value())))
    assert max(sizes) < 64 and marker.floor == 1001 and marker.keep == frozenset({1})
    assert marker.covers("pg", "pg:500") and not marker.covers("pg", "pg:1")
    assert not marker.covers("pg", "pg:1002") and not marker.covers("pg", "other:5")
    # an older reader sees the explicit entries only (fewer retired, never a wrong one)
    assert parse_process_marker(marker.to_value()) == {}
    assert ProcessMarker.from_value(marker.to_value()) == marker
    assert ProcessMarker.from_value({"retired": [], "floor": -1}) == ProcessMarker({})


def test_per_actor_counter_entries_are_compacted_alike_on_both_sides() -> None:
    counter = PNCounter({GONE: 5, LIVE: 2}, {GONE: 1})
    kept = prune_stored(counter, [GONE], per_actor=True)
    assert kept == PNCounter({RETIRED + GONE: 5, LIVE: 2}, {RETIRED + GONE: 1})
    assert retired_entries(kept) == {GONE} and kept.value() == counter.value()
    compacted = compact_retired(kept, [GONE])
    assert compacted == PNCounter({SINK: 5, LIVE: 2}, {SINK: 1})
    retired = pruned = {GONE}.__contains__
    # a compacted full state reaches one that still keeps the retired entry: it is
    # compacted first (4, not 8)
    incoming, stored = prune_arriving(compacted, kept, pruned, retired, never, True)
    assert stored is not None and stored.merge(incoming).value() == counter.value()
    # the other way round: the arriving retired entry is folded into the sink
    incoming, stored = prune_arriving(kept, compacted, pruned, retired, never, True)
    assert stored is None and compacted.merge(incoming) == compacted
    # an arriving plain entry of an actor pruned here becomes its retired entry
    incoming, _ = prune_arriving(counter, kept, pruned, retired, never, True)
    assert incoming == kept
    # a state still holding the actor (plain) never makes the stored entry compact
    stale = PNCounter({GONE: 5, LIVE: 2, SINK: 1}, {GONE: 1})
    _, stored = prune_arriving(stale, kept, never, never, never, True)
    assert stored is None and kept.merge(stale).value() == counter.value() + 1
