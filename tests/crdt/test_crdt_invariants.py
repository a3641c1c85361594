"""The kernel's own invariants (crdt._invariants): always checked, whatever the node's
mode. Each test breaks the arithmetic a check guards (a carry that loses the logical
counter, a context that forgot its dots) and sees the check refuse the value."""

from __future__ import annotations

import pytest

import crdt._hlc
from crdt import HLC, CausalContext, InvariantViolation, ORSet, Timestamp


def _lossy_carry(wall_ms: int, logical: int) -> Timestamp:
    return Timestamp(wall_ms, 0)  # drops the logical counter


def test_a_local_stamp_is_after_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = HLC(last=Timestamp(5, 3))
    assert clock.now(5) == Timestamp(5, 4)
    monkeypatch.setattr(crdt._hlc, "_carry", _lossy_carry)
    with pytest.raises(InvariantViolation, match=r"not after the last stamp \(5, 4\)"):
        clock.now(5)
    assert clock.last == Timestamp(5, 4)  # unchanged


def test_an_observed_stamp_is_after_the_last_and_the_remote(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(crdt._hlc, "_carry", _lossy_carry)
    with pytest.raises(InvariantViolation, match="not after the last stamp"):
        HLC(last=Timestamp(9, 2)).observe(Timestamp(3, 0), 1)
    with pytest.raises(InvariantViolation, match=r"not after the remote stamp \(9, 2\)"):
        HLC().observe(Timestamp(9, 2), 1)
    assert HLC().observe(Timestamp(3, 0), 7) == Timestamp(7, 0)  # fine when wall moves


def _stale_max(ctx: CausalContext, actor: str, n: int) -> CausalContext:
    """``ctx`` whose index of highest dots says ``n`` for ``actor`` (its dots stay)."""
    object.__setattr__(ctx, "_cloud_max", {**ctx._cloud_max, actor: n})
    return ctx


def test_an_add_takes_a_fresh_dot() -> None:
    ctx = CausalContext({"a": 1}, [("a", 3), ("a", 4)])
    assert ORSet(None, ctx).add("x", actor="a").entries == {"x": frozenset({("a", 5)})}
    stale = ORSet(None, _stale_max(CausalContext({"a": 1}, [("a", 3), ("a", 4)]), "a", 3))
    with pytest.raises(InvariantViolation, match=r"new dot \('a', 4\) of 'x' is already"):
        stale.add("x", actor="a")  # (a, 4) was seen: a merge would drop this add


def test_an_add_puts_its_dot_in_the_deltas_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CausalContext, "from_dots", classmethod(lambda cls, dots: cls()))
    with pytest.raises(InvariantViolation, match=r"new dot \('a', 1\) of 'x' is not in"):
        ORSet().add("x", actor="a")
