"""Replay the conformance vectors in crdt/vectors/*.json (format: crdt/vectors/README.md)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from functools import reduce
from pathlib import Path
from typing import Any

import pytest

import crdt
from crdt import CRDT, LWWRegister, ORSet, PNCounter, Timestamp, VectorClock

VECTORS = Path(crdt.__file__).parent / "vectors"


def _lww(state: LWWRegister, op: dict[str, Any]) -> LWWRegister:
    assert op["op"] == "set", op
    return state.set(op["value"], actor=op["actor"], stamp=Timestamp.from_list(op["stamp"]))


def _orset(state: ORSet, op: dict[str, Any]) -> ORSet:
    if op["op"] == "add":
        return state.add(op["element"], actor=op["actor"])
    assert op["op"] == "remove", op
    return state.remove(op["element"])


def _pnc(state: PNCounter, op: dict[str, Any]) -> PNCounter:
    if op["op"] == "increment":
        return state.increment(op["actor"], op.get("n", 1))
    assert op["op"] == "decrement", op
    return state.decrement(op["actor"], op.get("n", 1))


def _vc(state: VectorClock, op: dict[str, Any]) -> VectorClock:
    assert op["op"] == "increment", op
    return state.increment(op["actor"])


# file -> (type, apply one op, JSON view of a value)
TYPES: dict[str, tuple[type[CRDT], Callable[[Any, dict[str, Any]], Any], Callable[[Any], Any]]] = {
    "lww_register.json": (LWWRegister, _lww, lambda s: s.value()),
    "orset.json": (ORSet, _orset, lambda s: s.elements()),
    "pncounter.json": (PNCounter, _pnc, lambda s: s.value()),
    "vector_clock.json": (VectorClock, _vc, lambda s: s.value()),
}


def _cases() -> list[Any]:
    params = []
    for filename in sorted(TYPES):
        for case in json.loads((VECTORS / filename).read_text(encoding="utf-8")):
            params.append(pytest.param(filename, case, id=f"{filename[:-5]}:{case['name']}"))
    return params


def test_every_vector_file_is_present_and_non_empty() -> None:
    assert sorted(p.name for p in VECTORS.glob("*.json")) == sorted(TYPES)


def replay(
    cls: type[CRDT], apply: Callable[[Any, dict[str, Any]], Any], case: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run each replica's ops in file order; return (delta by id, final state by replica)."""
    states: dict[str, Any] = {}
    deltas: dict[str, Any] = {}
    for name, ops in case["replicas"].items():
        state = cls.empty()
        for index, op in enumerate(ops):
            if op["op"] == "sync_from":
                source = op["replica"]
                assert source in states, f"sync_from {source!r}: must be an earlier replica"
                state = state.merge(states[source])
                continue
            delta = apply(state, op)
            deltas[f"{name}.{index}"] = delta
            state = state.merge(delta)
        states[name] = state
    return deltas, states


@pytest.mark.parametrize(("filename", "case"), _cases())
def test_vector(filename: str, case: dict[str, Any]) -> None:
    cls, apply, view = TYPES[filename]
    assert set(case) >= {"name", "description", "replicas", "deliveries", "expected_value"}
    deltas, states = replay(cls, apply, case)
    if case["deliveries"] == "all_permutations":
        orders: Any = itertools.permutations(deltas)
    else:
        orders = case["deliveries"]
    expected = case["expected_value"]
    results = set()
    count = 0
    for order in orders:
        assert set(order) == set(deltas), f"a delivery must cover every delta: {order}"
        state = reduce(lambda s, d: s.merge(deltas[d]), order, cls.empty())
        assert view(state) == expected, f"delivery order {order}"
        results.add(state.to_bytes())
        count += 1
    assert count > 0
    merged = reduce(lambda a, b: a.merge(b), states.values(), cls.empty())
    assert view(merged) == expected
    results.add(merged.to_bytes())
    assert len(results) == 1, "every delivery order must converge to the same bytes"
    if "expected_hex" in case:
        assert merged.to_bytes().hex() == case["expected_hex"]
