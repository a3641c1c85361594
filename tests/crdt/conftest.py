"""Type specs for the generic CRDT law suite, multi-replica histories and the hypothesis profile.

Each CRDT type contributes only a `TypeSpec`: its empty state, a strategy of operations,
a function applying an operation (as an actor) to a state and returning the delta, and a
sequential model of the value. The laws in test_crdt_laws.py are written once, over the
`spec` fixture, which is parametrized with every spec below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from crdt import CRDT, LWWRegister, ORSet, PNCounter, Timestamp, VectorClock

# Deterministic and fast; registered (not loaded) so other suites keep their own profile.
settings.register_profile(
    "crdt",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=120,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Region:incarnation actors, one per replica. Compared as plain strings.
ACTORS = ("us-east-1:1", "eu-west-1:1", "ap-south-1:2")

Op = tuple[Any, ...]


@dataclass
class TypeSpec:
    """What one CRDT type contributes to the generic suite."""

    name: str
    cls: type[CRDT]
    ops: st.SearchStrategy[Op]
    apply: Callable[[Any, Op, str], Any]  # (state, op, actor) -> delta
    model: Callable[[Any, Op, str], Any]  # (value before, op, actor) -> value after
    histories: st.SearchStrategy[History] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.histories = history_strategy(self)


@dataclass
class History:
    """Final replica states and every delta produced, in production order."""

    replicas: list[Any]
    deltas: list[Any]

    def pool(self, spec: TypeSpec) -> list[Any]:
        """Interesting states: replicas, deltas, the bottom and the full join."""
        everything = reduce(lambda a, b: a.merge(b), self.replicas, spec.cls.empty())
        return [*self.replicas, *self.deltas, spec.cls.empty(), everything]


def run_history(spec: TypeSpec, steps: list[Op]) -> History:
    """Replay a generated schedule of ops and partial syncs over len(ACTORS) replicas.

    ("op", r, op): replica r applies op as its own actor and keeps the delta.
    ("state", src, dst): dst merges src's full state.
    ("delta", dst, k): dst merges the k-th delta produced so far (any origin, any order).
    """
    replicas = [spec.cls.empty() for _ in ACTORS]
    deltas: list[Any] = []
    for step in steps:
        kind = step[0]
        if kind == "op":
            _, r, op = step
            delta = spec.apply(replicas[r], op, ACTORS[r])
            deltas.append(delta)
            replicas[r] = replicas[r].merge(delta)
        elif kind == "state":
            _, src, dst = step
            replicas[dst] = replicas[dst].merge(replicas[src])
        elif deltas:
            _, dst, k = step
            replicas[dst] = replicas[dst].merge(deltas[k % len(deltas)])
    return History(replicas, deltas)


def history_strategy(spec: TypeSpec, max_steps: int = 14) -> st.SearchStrategy[History]:
    replica = st.integers(0, len(ACTORS) - 1)
    step = st.one_of(
        st.tuples(st.just("op"), replica, spec.ops),
        st.tuples(st.just("op"), replica, spec.ops),  # ops twice as likely as syncs
        st.tuples(st.just("state"), replica, replica),
        st.tuples(st.just("delta"), replica, st.integers(0, 63)),
    )
    return st.lists(step, max_size=max_steps).map(lambda steps: run_history(spec, steps))


# -- VectorClock ------------------------------------------------------------------------------


def _vc_model(value: dict[str, int], op: Op, actor: str) -> dict[str, int]:
    return {**value, actor: value.get(actor, 0) + 1}


VC_SPEC = TypeSpec(
    name="vector_clock",
    cls=VectorClock,
    ops=st.just(("increment",)),
    apply=lambda state, op, actor: state.increment(actor),
    model=_vc_model,
)

# -- LWWRegister ------------------------------------------------------------------------------

register_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=4)
    | st.binary(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=5,
)
# Small stamp ranges so equal and inverted stamps (skewed clocks) are common.
stamps = st.builds(Timestamp, st.integers(0, 3), st.integers(0, 2))

LWW_SPEC = TypeSpec(
    name="lww_register",
    cls=LWWRegister,
    ops=st.tuples(
        st.just("set"), st.one_of(st.sampled_from(["x", "y", 1]), register_values), stamps
    ),
    apply=lambda state, op, actor: state.set(op[1], actor=actor, stamp=op[2]),
    model=lambda value, op, actor: op[1],
)

# -- ORSet ------------------------------------------------------------------------------------

# A small pool so adds and removes collide; "a" and b"a" and 1 are distinct elements.
elements = st.sampled_from(["a", "b", "", 1, 0, -(2**63), 2**64 - 1, b"a"])


def _orset_apply(state: ORSet, op: Op, actor: str) -> ORSet:
    return state.add(op[1], actor=actor) if op[0] == "add" else state.remove(op[1])


def _orset_model(value: frozenset[Any], op: Op, actor: str) -> frozenset[Any]:
    return value | {op[1]} if op[0] == "add" else value - {op[1]}


ORSET_SPEC = TypeSpec(
    name="orset",
    cls=ORSet,
    ops=st.tuples(st.sampled_from(["add", "add", "remove"]), elements),
    apply=_orset_apply,
    model=_orset_model,
)

# -- PNCounter --------------------------------------------------------------------------------


def _pnc_apply(state: PNCounter, op: Op, actor: str) -> PNCounter:
    kind, n = op
    return state.increment(actor, n) if kind == "increment" else state.decrement(actor, n)


PNC_SPEC = TypeSpec(
    name="pncounter",
    cls=PNCounter,
    ops=st.tuples(st.sampled_from(["increment", "decrement"]), st.integers(1, 5)),
    apply=_pnc_apply,
    model=lambda value, op, actor: value + op[1] if op[0] == "increment" else value - op[1],
)


def _pnc_retiring_apply(state: PNCounter, op: Op, actor: str) -> PNCounter:
    """As `_pnc_apply`, plus ("retire", k): the replica keeps ACTORS[k]'s totals under
    its retired entry (a node pruning a retired actor; the others may not have yet, and
    the actor may even write on: the merge still counts each total once)."""
    if op[0] == "retire":
        return state.retire(ACTORS[op[1]])
    return _pnc_apply(state, op, actor)


# Counters some replicas have pruned (issue 40): the merge laws hold over retired entries.
PNC_RETIRING_SPEC = TypeSpec(
    name="pncounter_retiring",
    cls=PNCounter,
    ops=st.one_of(
        st.tuples(st.sampled_from(["increment", "decrement"]), st.integers(1, 5)),
        st.tuples(st.just("retire"), st.integers(0, len(ACTORS) - 1)),
    ),
    apply=_pnc_retiring_apply,
    model=lambda value, op, actor: (
        value if op[0] == "retire" else value + op[1] if op[0] == "increment" else value - op[1]
    ),
)

SPECS = [VC_SPEC, LWW_SPEC, ORSET_SPEC, PNC_SPEC, PNC_RETIRING_SPEC]


@pytest.fixture(scope="session", params=SPECS, ids=[s.name for s in SPECS])
def spec(request: pytest.FixtureRequest) -> TypeSpec:
    """Every CRDT type's spec, one at a time."""
    return request.param
