"""Invariant checks (core/invariants.py): the mechanism, then each check of the pure core
fed the value it guards against (these tests fail if the check is removed)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace

import pytest

from regionsync.core import invariants
from regionsync.core.custody import custody_writes
from regionsync.core.invariants import InvariantViolation, check
from regionsync.core.lanes import Lane, TokenBucket
from regionsync.core.model import Record
from regionsync.core.peer_session import (
    Acked,
    Phase,
    Ready,
    Repaired,
    Session,
    SessionPolicy,
    step,
)
from regionsync.core.peering import check_read


@pytest.fixture
def logged() -> Iterator[None]:
    """Production's mode for one test."""
    invariants.set_mode("log")
    try:
        yield
    finally:
        invariants.set_mode("raise")


# -- the mechanism -------------------------------------------------------------------


def test_a_check_that_holds_says_so_and_notes_nothing() -> None:
    assert check(True, "never %s", "formatted") is True
    assert not invariants.broken


def test_the_tests_raise_and_note(violations: Counter[str]) -> None:
    assert invariants.mode() == "raise"  # tests/conftest.py
    with pytest.raises(InvariantViolation, match="^lane x is at -1$"):
        check(False, "lane %s is at %d", "x", -1)
    assert violations == {"lane %s is at %d": 1}
    assert issubclass(InvariantViolation, AssertionError)


def test_production_logs_powers_of_two_and_goes_on(
    logged: None, violations: Counter[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, "regionsync.invariants"):
        results = [check(False, "count %d below zero", -i) for i in range(1, 10)]
    assert results == [False] * 9  # the caller may fall back
    assert [r.getMessage() for r in caplog.records] == [
        f"invariant broken ({n} times): count -{n} below zero" for n in (1, 2, 4, 8)
    ]
    assert violations == {"count %d below zero": 9}


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="'off'"):
        invariants.set_mode("off")  # type: ignore[arg-type]


def test_checks_do_not_depend_on_python_dash_o() -> None:
    """Run under -O (asserts stripped) in production's mode: the check still notes, and
    the environment variable turns raising on."""
    code = (
        "from regionsync.core import invariants as i\n"
        "assert False, 'asserts are on'\n"
        "print(i.mode(), i.check(False, 'x'), dict(i.broken))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "REGIONSYNC_INVARIANTS"}
    out = subprocess.run([sys.executable, "-O", "-c", code], env=env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "log False {'x': 1}"
    env["REGIONSYNC_INVARIANTS"] = "raise"
    out = subprocess.run([sys.executable, "-O", "-c", code], env=env, capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 1 and "InvariantViolation: x" in out.stderr


# -- lanes ---------------------------------------------------------------------------


def test_a_lane_released_more_than_admitted(violations: Counter[str]) -> None:
    lane = Lane(TokenBucket.new(10, 0.0))
    assert lane.admit(10, 1, 0.0)
    lane.release()
    with pytest.raises(InvariantViolation, match="lane released with no attempt"):
        lane.release()


def test_a_lane_released_more_than_admitted_stays_at_zero_in_production(
    logged: None, violations: Counter[str]
) -> None:
    lane = Lane(TokenBucket.new(10, 0.0))
    lane.release()
    assert lane.inflight == 0 and sum(violations.values()) == 1


# -- custody -------------------------------------------------------------------------


def test_custody_never_adopts_a_region_for_itself(violations: Counter[str]) -> None:
    # "a" suspecting itself (suspected() only names peers): its record would name it live
    with pytest.raises(InvariantViolation, match="custody of suspected a adopted by"):
        custody_writes("a", ("b",), frozenset({"a"}), {}, True, 7)


# -- the replication session ---------------------------------------------------------

POLICY = SessionPolicy(
    batch_records=4, max_message_bytes=256 * 1024, window_batches=2, ack_timeout_s=10.0,
    linger_ms=0.0, heartbeat_s=5.0, digest_interval_s=30.0, reconnect_min_s=0.1,
    reconnect_max_s=10.0,
)  # fmt: skip


def test_a_repair_never_moves_the_peers_vector_back(violations: Counter[str]) -> None:
    s = Session("b", "b:1", POLICY, phase=Phase.REPAIRING, acked={"a": 5, "c": 2})
    after, actions = step(s, Repaired({"a": 6, "c": 2}), 0.0)  # forwards: fine
    assert actions == [Acked({"a": 6, "c": 2})]
    with pytest.raises(InvariantViolation, match="repair moved b's a back to 3"):
        step(s, Repaired({"a": 3}), 0.0)


def test_no_batch_goes_out_past_the_window(violations: Counter[str]) -> None:
    s = Session("b", "b:1", POLICY, phase=Phase.SENDING, actor="b:7", inflight=1)
    after, _ = step(s, Ready(), 0.0)
    assert after.inflight == 2
    with pytest.raises(InvariantViolation, match="past the window"):
        step(replace(after, phase=Phase.SENDING), Ready(), 0.0)


def rec(origin: str, seq: int) -> Record:
    return Record(origin, seq, "registry", b"\x80", (1000 + seq, 0))


def test_a_log_read_is_past_after_and_in_order_per_origin(violations: Counter[str]) -> None:
    after = {"a": 3, "b:7": 1 << 62}
    check_read(after, [rec("a", 4), rec("c", 1), rec("a", 6), rec("c", 2)])  # gaps may be
    with pytest.raises(InvariantViolation, match="read a#3 after a#3"):
        check_read(after, [rec("a", 3)])  # the peer holds it
    with pytest.raises(InvariantViolation, match="read b:7#9"):
        check_read(after, [rec("b:7", 9)])  # the peer's own records
    with pytest.raises(InvariantViolation, match="read a#4 after a#5"):
        check_read(after, [rec("a", 5), rec("a", 4)])  # ``sent`` would go back
