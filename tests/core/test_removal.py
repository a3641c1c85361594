"""core/removal.py: removal records, refused Hellos, which actors retire and when."""

from __future__ import annotations

from regionsync.core.removal import (
    RETIRED_SEQ,
    RemovalRecord,
    fill_retired,
    hello_refusal,
    incarnations,
    prune_vv,
    removal_problem,
    retired_actors,
)

REC = RemovalRecord("c", 7, 1000, "a", "a:1", 5)
REMOVED = {"c": REC}


def test_record_round_trips_and_rejects_bad_values() -> None:
    assert RemovalRecord.from_value("c", REC.to_value()) == REC
    done = RemovalRecord("c", 7, 1000, "a", "a:1", 5, ("c:2", "c:7"))
    assert RemovalRecord.from_value("c", done.to_value()) == done
    other = {**done.to_value(), "retired": ["c:7", "a:1"]}  # only the region's own actors
    assert RemovalRecord.from_value("c", other) == RemovalRecord(
        "c", 7, 1000, "a", "a:1", 5, ("c:7",)
    )
    assert RemovalRecord.from_value("c", {**done.to_value(), "retired": "c:7"}) is None
    for bad in (None, [], {**REC.to_value(), "incarnation": -1},
                {**REC.to_value(), "by": 3}, {**REC.to_value(), "at": True}):  # fmt: skip
        assert RemovalRecord.from_value("c", bad) is None


def test_incarnations_of_a_region() -> None:
    assert incarnations({"c:7": 3, "c:2": 1, "cc:9": 1, "c:8": 0, "a:1": 4}, "c") == [2, 7]


def test_hello_refusals() -> None:
    assert hello_refusal(REMOVED, "b", 1, {"a:1": 9}) is None  # not removed
    assert "removed at incarnation 7" in (hello_refusal(REMOVED, "c", 7, {}) or "")
    assert "removed at incarnation 7" in (hello_refusal(REMOVED, "c", 3, {}) or "")
    old = hello_refusal(REMOVED, "c", 9, {"c:9": 1, "a:1": 4})
    assert old is not None and "a:1" in old and "wipe" in old
    assert hello_refusal(REMOVED, "c", 9, {"c:9": 2}) is None  # wiped: its own records only
    assert hello_refusal(REMOVED, "c", 9, {"a:1": 4}, admitted=True) is None


def test_retire_only_once_every_remaining_region_acknowledged() -> None:
    local = {"a:1": 8, "b:1": 3, "c:7": 4, "c:2": 2}
    both = {"a": {"a:1": 8, "c:7": 4, "c:2": 2}, "b": {"a:1": 6, "c:7": 4, "c:2": 2}}
    assert retired_actors(local, (), REMOVED, both) == {"c:7", "c:2"}
    # b has not acknowledged the removal record (a:1 <= by_seq 5)
    assert (
        retired_actors(local, (), REMOVED, {**both, "b": {"a:1": 5, "c:7": 4, "c:2": 2}}) == set()
    )
    # b holds a record of c:7 this node lacks: this node must get it first
    assert retired_actors(local, (), REMOVED, {**both, "b": {"a:1": 6, "c:7": 5, "c:2": 2}}) == {
        "c:2"
    }
    # b lacks a record of c:7
    assert retired_actors(local, (), REMOVED, {**both, "b": {"a:1": 6, "c:7": 3, "c:2": 2}}) == {
        "c:2"
    }
    # a region never heard from holds it back; retirement already decided stays
    assert retired_actors(local, (), REMOVED, {**both, "d": None}) == set()
    assert retired_actors(local, {"c:7"}, REMOVED, {**both, "d": None}) == {"c:7"}
    # the writer of the record has it; a newer incarnation (re-added) never retires
    assert retired_actors({"c:9": 1}, (), REMOVED, {"a": {}}) == set()
    assert retired_actors(local, (), {}, both) == set()


def test_wire_forms() -> None:
    retired = frozenset({"c:7"})
    assert prune_vv({"a:1": 1, "c:7": 4}, retired) == {"a:1": 1}
    assert fill_retired({"a:1": 1}, retired) == {"a:1": 1, "c:7": RETIRED_SEQ}


def test_removal_problems() -> None:
    assert removal_problem("a", "a", ["b"], {})[:2] == (409, "conflict")  # type: ignore[index]
    assert removal_problem("c", "a", ["c"], REMOVED)[:2] == (409, "conflict")  # type: ignore[index]
    assert removal_problem("z", "a", ["b"], {})[:2] == (404, "not_found")  # type: ignore[index]
    assert removal_problem("b", "a", ["b"], {}) is None


def test_stopped_processes_after_the_grace_only() -> None:
    from regionsync.core.removal import stopped_actors

    vv = {"pg:1": 3, "pg:2": 5, "pg:3": 1, "pg:4": 0}
    holders = {1: "h1", 2: "h2", 3: "h3", 4: "h4"}
    absent: dict[str, int] = {}
    live = frozenset({"h2"})
    # pg:3 is this process; pg:4 never wrote; pg:2 is connected
    assert stopped_actors("pg", "pg:3", vv, holders, live, absent, 1000, 500) == set()
    assert absent == {"pg:1": 1000}
    assert stopped_actors("pg", "pg:3", vv, holders, live, absent, 1499, 500) == set()
    assert stopped_actors("pg", "pg:3", vv, holders, live, absent, 1500, 500) == {"pg:1"}
    # back (reconnected): forgotten, and the grace starts again
    assert stopped_actors("pg", "pg:3", vv, holders, {"h1", "h2"}, absent, 1600, 500) == set()
    assert absent == {}


def test_settled_counts_and_the_marker() -> None:
    from regionsync.core.removal import parse_process_marker, settled_counts

    vv = {"pg:1": 3, "pg:2": 5}
    assert settled_counts(["pg:1", "pg:2"], vv, {"x": {"pg:1": 3, "pg:2": 4}}) == {"pg:1": 3}
    assert settled_counts(["pg:1"], vv, {"x": {"pg:1": 3}, "y": None}) == {}
    assert settled_counts(["pg:1"], vv, {}) == {"pg:1": 3}  # no peers: nobody to wait for
    assert parse_process_marker({"retired": [["pg:1", 3], ["bad"], ["pg:2", -1]]}) == {"pg:1": 3}
    assert parse_process_marker("x") == {} and parse_process_marker({"retired": 1}) == {}
