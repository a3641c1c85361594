"""One law suite for every CRDT type (the `spec` fixture from conftest.py)."""

from __future__ import annotations

from functools import reduce
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import crdt
from crdt import CRDT, DecodeError, LWWRegister, ORSet, PNCounter, VectorClock, decode

LAWS = settings(settings.get_profile("crdt"))


def join(states: list[Any], empty: Any) -> Any:
    return reduce(lambda a, b: a.merge(b), states, empty)


def draw_states(data: st.DataObject, spec: Any, n: int) -> list[Any]:
    history = data.draw(spec.histories, label="history")
    pool = history.pool(spec)
    return [data.draw(st.sampled_from(pool), label=f"state{i}") for i in range(n)]


@LAWS
@given(data=st.data())
def test_merge_is_commutative(spec: Any, data: st.DataObject) -> None:
    a, b = draw_states(data, spec, 2)
    assert a.merge(b) == b.merge(a)
    assert a.merge(b).to_bytes() == b.merge(a).to_bytes()


@LAWS
@given(data=st.data())
def test_merge_is_associative(spec: Any, data: st.DataObject) -> None:
    a, b, c = draw_states(data, spec, 3)
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@LAWS
@given(data=st.data())
def test_merge_is_idempotent_with_empty_as_identity(spec: Any, data: st.DataObject) -> None:
    (a,) = draw_states(data, spec, 1)
    assert a.merge(a) == a
    assert a.merge(spec.cls.empty()) == a
    assert spec.cls.empty().merge(a) == a


@LAWS
@given(data=st.data())
def test_delta_applied_to_its_origin_state_is_the_mutation(spec: Any, data: st.DataObject) -> None:
    (state,) = draw_states(data, spec, 1)
    op = data.draw(spec.ops, label="op")
    actor = data.draw(st.sampled_from(crdt_actors()), label="actor")
    before = state.to_bytes()
    delta = spec.apply(state, op, actor)
    after = state.merge(delta)
    assert state.to_bytes() == before, "a mutator changed its receiver"
    assert type(delta) is spec.cls
    assert after.value() == spec.model(state.value(), op, actor)
    assert after.merge(delta) == after  # re-delivery is harmless
    assert state.merge(after) == after  # the mutation is an inflation


@LAWS
@given(data=st.data())
def test_replicas_applying_the_same_deltas_in_any_order_converge(
    spec: Any, data: st.DataObject
) -> None:
    history = data.draw(spec.histories, label="history")
    n = len(history.deltas)
    finals = []
    for i in range(3):
        order = data.draw(st.permutations(range(n)), label=f"order{i}")
        dups = data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=3 if n else 0))
        sequence = [history.deltas[k] for k in [*order, *dups]]
        finals.append(join(sequence, spec.cls.empty()))
    expected = join(history.replicas, spec.cls.empty())
    for state in finals:
        assert state == expected
        assert state.to_bytes() == expected.to_bytes()
        assert state.value() == expected.value()


@LAWS
@given(data=st.data())
def test_encoding_round_trips_and_dispatches(spec: Any, data: st.DataObject) -> None:
    (state,) = draw_states(data, spec, 1)
    raw = state.to_bytes()
    assert isinstance(raw, bytes)
    again = spec.cls.from_bytes(raw)
    assert again == state and hash(again) == hash(state)
    assert again.to_bytes() == raw
    assert again.value() == state.value()
    assert type(decode(raw)) is spec.cls and decode(raw) == state
    tag, version, _ = msgpack.unpackb(raw)
    assert (tag, version) == (spec.cls.TAG, 1)
    for other in ALL_TYPES:
        if other is not spec.cls:
            with pytest.raises(DecodeError):
                other.from_bytes(raw)


@LAWS
@given(garbage=st.binary(max_size=48))
def test_garbage_bytes_raise_decode_error(spec: Any, garbage: bytes) -> None:
    for fn in (decode, spec.cls.from_bytes):
        try:
            state = fn(garbage)
        except DecodeError:
            continue
        assert state.to_bytes() == garbage  # only the canonical encoding is accepted


msgpack_objects = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.binary(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


@LAWS
@given(data=st.data())
def test_wrong_shapes_raise_decode_error(spec: Any, data: st.DataObject) -> None:
    tag = data.draw(st.sampled_from([spec.cls.TAG, spec.cls.TAG, "nope", 7]))
    version = data.draw(st.sampled_from([1, 1, 1, 0, 2, "1", 1.0]))
    body = data.draw(msgpack_objects)
    raw = msgpack.packb([tag, version, body], use_bin_type=True)
    for fn in (decode, spec.cls.from_bytes):
        try:
            state = fn(raw)
        except DecodeError:
            continue
        assert state.to_bytes() == raw


@LAWS
@given(data=st.data())
def test_corrupted_encodings_raise_decode_error(spec: Any, data: st.DataObject) -> None:
    (state,) = draw_states(data, spec, 1)
    raw = bytearray(state.to_bytes())
    i = data.draw(st.integers(0, len(raw) - 1))
    how = data.draw(st.sampled_from(["flip", "truncate", "extend"]))
    if how == "flip":
        raw[i] ^= data.draw(st.integers(1, 255))
    elif how == "truncate":
        del raw[i:]
    else:
        raw += data.draw(st.binary(min_size=1, max_size=3))
    try:
        decoded = decode(bytes(raw))
    except DecodeError:
        return
    assert decoded.to_bytes() == bytes(raw)


def test_merge_with_another_type_raises_type_error(spec: Any) -> None:
    for other in ALL_TYPES:
        if other is not spec.cls:
            with pytest.raises(TypeError):
                spec.cls.empty().merge(other.empty())


def test_every_type_implements_the_protocol(spec: Any) -> None:
    empty = spec.cls.empty()
    assert isinstance(empty, CRDT)
    assert empty == spec.cls.empty() and hash(empty) == hash(spec.cls.empty())
    with pytest.raises(AttributeError):
        empty.anything = 1  # immutable


def test_public_surface_is_exactly_all() -> None:
    assert sorted(crdt.__all__) == sorted(
        [
            "COUNTER_MAX",
            "CRDT",
            "HLC",
            "CausalContext",
            "ClockDriftError",
            "DecodeError",
            "Dot",
            "InvalidTextError",
            "InvariantViolation",
            "LOGICAL_MAX",
            "RETIRED",
            "LWWRegister",
            "ORSet",
            "PNCounter",
            "Timestamp",
            "VectorClock",
            "WALL_MS_MAX",
            "decode",
            "prune",
            "prune_all",
        ]
    )
    public = {n for n in vars(crdt) if not n.startswith("_")}
    assert public == set(crdt.__all__)


ALL_TYPES: list[type[CRDT]] = [VectorClock, LWWRegister, ORSet, PNCounter]


def crdt_actors() -> list[str]:
    return ["us-east-1:1", "eu-west-1:1", "ap-south-1:2", "us-east-1:2"]


def _packed(*obj: Any) -> bytes:
    return msgpack.packb(list(obj), use_bin_type=True)


# Hand-made malformed encodings: right tag, wrong body (plus a few with no body at all).
BAD = {
    "vc": [
        [["a", 0]],
        [["a", -1]],
        [["a", True]],
        [["a", 1.0]],
        [[1, 1]],
        [["", 1]],
        [["b", 1], ["a", 1]],
        [["a", 1], ["a", 2]],
        [["a", 1, 2]],
        {"a": 1},
        None,
    ],
    "pnc": [
        [[], []],  # valid; kept out below
        [[["a", 0]], []],
        [[["a", 1]]],
        [[], [["a", -3]]],
        [[], [["b", 1], ["a", 1]]],
        [{"a": 1}, []],
    ],
    "orset": [
        [[["x", [["a", 1]]]], [[], []]],  # dot outside context
        [[["x", [["a", 1]]], ["y", [["a", 1]]]], [[["a", 1]], []]],  # shared dot
        [[[True, [["a", 1]]]], [[["a", 1]], []]],  # bool element
        [[[1.5, [["a", 1]]]], [[["a", 1]], []]],  # float element
        [[[["x"], [["a", 1]]]], [[["a", 1]], []]],  # list element
        [[["x", []]], [[["a", 1]], []]],  # empty dot list
        [[["x", [["a", 0]]]], [[["a", 1]], []]],  # dot counter 0
        [[], [[["a", 2]], [["a", 1]]]],  # cloud dot under the vector
        [[], [[], [["a", 1]]]],  # contiguous cloud dot not compacted
        [[["b", [["a", 2]]], ["a", [["a", 1]]]], [[["a", 2]], []]],  # unsorted elements
        [[], [[["a", 1]]]],
        [[]],
    ],
    "lww": [
        [[[["a", 1]], [1], "a", "v"]],  # short stamp
        [[[["a", 1]], [1, -1], "a", "v"]],
        [[[["a", 1]], [1, 0], "", "v"]],
        [[[["a", 1]], [1, 0], 5, "v"]],
        [[[["a", 1]], [1, 0], "a"]],
        [[[["a", 1]], [1, 0], "a", "v"], [[["a", 2]], [0, 0], "a", "w"]],  # dominated write
        [[[["a", 1]], [1, 0], "a", "v"], [[["a", 1]], [1, 0], "a", "v"]],  # duplicate write
        [[[["a", 1]], [1, 0], "a", {"b": 1, "a": 2}]],  # unsorted map keys
        {"a": 1},
    ],
}


@pytest.mark.parametrize(
    "raw",
    [
        _packed(tag, 1, body)
        for tag, bodies in BAD.items()
        for body in bodies
        if (tag, body) != ("pnc", [[], []])
    ]
    + [
        b"",
        b"\xc1",
        msgpack.packb([]),
        msgpack.packb({"vc": 1}),
        msgpack.packb(["vc", 1]),
        msgpack.packb(["vc", 1, [], 0]),
        msgpack.packb(["vc", 2, []]),
        msgpack.packb(["vc", True, []]),
        msgpack.packb([b"vc", 1, []], use_bin_type=True),
        msgpack.packb(["zz", 1, []]),
        msgpack.packb(["lww", 1, [[[["a", 1]], [1, 0], "a", msgpack.ExtType(1, b"x")]]]),
        msgpack.packb(["lww", 1, [[[["a", 1]], [1, 0], "a", {1: "x"}]]]),
        msgpack.packb(["vc", 1, []]) + b"\x00",
        b"\x93\xa2vc\x01\x91\x92\xa1a\xce\x00\x00\x00\x01",  # non-minimal int width
        b"\x93\xa2vc\x01\x90"[:-1],
    ],
)
def test_hand_made_bad_encodings_raise_decode_error(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(raw)
    for cls in ALL_TYPES:
        with pytest.raises(DecodeError):
            cls.from_bytes(raw)


def test_decode_rejects_non_bytes_as_caller_error() -> None:
    with pytest.raises(TypeError):
        decode("not bytes")  # type: ignore[arg-type]
