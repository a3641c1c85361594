"""The rolling-upgrade test's stall meter (rolling_support.StallMeter) is not vacuous: a
peer that refuses a region's records (its version vector stops at what it had) shows a
stall that grows until the end, while a restart of either region is not counted."""

from __future__ import annotations

from rolling_support import StallMeter


def view(actor: str, vv: dict[str, int]) -> dict[str, object]:
    return {"actor": actor, "version_vector": vv}


def test_a_peer_refusing_records_is_a_stall_that_grows() -> None:
    m = StallMeter()
    m.up("a", 0.0), m.up("b", 0.0)
    for t in range(0, 30):
        # a writes on; b stopped taking a's records at 5 (refused, in order, from there)
        m.observe({"a": view("a:1", {"a:1": 5 + t}), "b": view("b:1", {"a:1": 5})}, float(t))
    assert m.worst_pair == ("a", "b")
    assert m.worst_s == 28.0  # the record a held at t=1 (its 6th) never reached b


def test_records_that_arrive_within_a_sample_are_no_stall() -> None:
    m = StallMeter()
    m.up("a", 0.0), m.up("b", 0.0)
    for t in range(0, 30):
        m.observe({"a": view("a:1", {"a:1": t}), "b": view("b:1", {"a:1": t})}, float(t))
    assert m.worst_s == 0.0


def test_a_restart_is_not_a_stall_but_a_wait_after_it_is() -> None:
    m = StallMeter()
    m.up("a", 0.0), m.up("b", 0.0)
    m.observe({"a": view("a:1", {"a:1": 3}), "b": view("b:1", {"a:1": 2})}, 0.0)
    m.down("b")  # b restarts for 20 s: a's records wait, uncounted
    for t in range(1, 21):
        m.observe({"a": view("a:1", {"a:1": 3})}, float(t))
    m.up("b", 20.0)
    m.observe({"a": view("a:1", {"a:1": 3}), "b": view("b:1", {"a:1": 2})}, 21.0)
    assert m.worst_s == 1.0  # counted from b's return, not from t=0
    m.observe({"a": view("a:1", {"a:1": 3}), "b": view("b:1", {"a:1": 3})}, 22.0)
    assert m.worst_s == 1.0
