"""Filter validation: 422 naming the offending place, limits, and a no-eval check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from regionsync.core import filter_compiler, filters
from regionsync.core.filter_compiler import compile_filter
from regionsync.core.filters import (
    MAX_DEPTH,
    MAX_NODES,
    MAX_STRING,
    explain,
    validate_filter,
)
from regionsync.errors import Unprocessable


def _nested(depth: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"k": 1}
    for _ in range(depth - 1):
        doc = {"k": doc}
    return doc


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ([], "filter"),
        ("priority", "filter"),
        ({"project": {"key": {"$gt": True}}}, "filter.project.key.$gt"),
        ({"project.key": {"$gt": None}}, "filter.project.key.$gt"),
        ({"a": {"$in": "x"}}, "filter.a.$in"),
        ({"a": {"$nin": {"x": 1}}}, "filter.a.$nin"),
        ({"a": {"$exist": 1}}, "filter.a.$exist"),
        ({"a": {"$startsWith": 1}}, "filter.a.$startsWith"),
        ({"a": {"$endsWith": None}}, "filter.a.$endsWith"),
        ({"a": {"$regex": "^x"}}, "filter.a.$regex"),
        ({"a": {"$like": "x"}}, "filter.a.$like"),
        ({"$or": []}, "filter.$or"),
        ({"$or": {"a": 1}}, "filter.$or"),
        ({"$and": [{"a": 1}, 3]}, "filter.$and[1]"),
        ({"$and": [{"a": 1}, {"b": {"$gt": []}}]}, "filter.$and[1].b.$gt"),
        ({"$not": []}, "filter.$not"),
        ({"$not": {}}, "filter.$not"),
        ({"a": {}}, "filter.a"),
        ({"a..b": 1}, "filter.a..b"),
        ({".a": 1}, "filter..a"),
        ({"a.$eq": 1}, "filter.a.$eq"),
        ({"": 1}, "filter"),
        ({"a": float("nan")}, "filter.a"),
        ({"a": {"$eq": [1, float("inf")]}}, "filter.a.$eq[1]"),
        ({"a": {"$eq": b"bytes"}}, "filter.a.$eq"),
        ({"a": "x" * (MAX_STRING + 1)}, "filter.a"),
        ({"x" * (MAX_STRING + 1): 1}, "filter"),
        ({"a": {"$in": [1, 2, {3: 4}]}}, "filter.a.$in[2]"),
        # QA 2026-12-02: integers msgpack cannot hold were a 500 (the registry encodes)
        ({"a": {"$eq": 2**64}}, "filter.a.$eq"),
        ({"a": -(2**63) - 1}, "filter.a"),
        ({"a": {"$in": [1, 12345678901234567890123]}}, "filter.a.$in[1]"),
    ],
)
def test_invalid_filters_name_the_offending_path(doc: Any, field: str) -> None:
    with pytest.raises(Unprocessable) as info:
        validate_filter(doc)
    assert info.value.field == field
    assert info.value.status == 422
    with pytest.raises(Unprocessable):
        compile_filter(doc)
    with pytest.raises(Unprocessable):
        explain(doc, {})


def test_depth_limit_is_inclusive() -> None:
    validate_filter(_nested(MAX_DEPTH))
    with pytest.raises(Unprocessable) as info:
        validate_filter(_nested(MAX_DEPTH + 1))
    assert info.value.field == "filter" + ".k" * MAX_DEPTH


def test_depth_counts_operand_arrays_and_logic_lists() -> None:
    # root(1) > $or list(2) > doc(3) > a(4) > $in list(5) ... within the limit
    validate_filter({"$or": [{"a": {"$in": [[[1]]]}}]})
    with pytest.raises(Unprocessable):
        validate_filter({"$or": [{"a": {"$in": [[[[[1]]]]]}}]})


def test_node_limit() -> None:
    validate_filter({"a": {"$in": list(range(MAX_NODES - 3))}})
    with pytest.raises(Unprocessable) as info:
        validate_filter({"a": {"$in": list(range(MAX_NODES))}})
    assert info.value.field is not None and info.value.field.startswith("filter.a.$in")


def test_the_integer_bounds_are_valid() -> None:
    validate_filter({"a": {"$in": [-(2**63), 2**64 - 1]}})


def test_valid_filters_pass() -> None:
    validate_filter(None)
    validate_filter({})
    validate_filter({"a": {"$eq": {}}, "b": [], "c": None, "d": {"$in": []}})
    validate_filter({"priority": {"$gte": 1, "$lt": 5.5}, "$not": {"x": {"$exist": True}}})
    validate_filter({"a": "x" * MAX_STRING})


def test_module_never_uses_eval_or_exec() -> None:
    for module in (filters, filter_compiler):
        source = Path(module.__file__).read_text(encoding="utf-8")
        for word in ("eval(", "exec(", "compile(", "__import__"):
            assert word not in source


def test_predicate_never_raises_on_odd_payloads() -> None:
    predicate = compile_filter(
        {"a.b": {"$gt": 1}, "c": {"$contains": "x"}, "$not": {"d": {"$in": [[1], {"e": 1}]}}}
    )
    for payload in (None, 1, "s", [], [[]], {"a": [[{"b": 2}]]}, {"a": "b"}, {"c": 5}):
        assert predicate(payload) in (True, False)
