"""Filter semantics as a table: every row is checked against the reference evaluator and
the compiled predicate, so the table pins the semantics and both implementations."""

from __future__ import annotations

from typing import Any

import pytest

from regionsync.core.filter_compiler import compile_filter
from regionsync.core.filters import explain, json_equal, reference_match

ISSUE = {
    "project": {"key": "FOO", "name": "Föö"},
    "priority": "Critical",
    "score": 7,
    "ratio": 0.5,
    "draft": False,
    "assignee": None,
    "labels": [{"name": "bug"}, {"name": "ui"}],
    "tags": ["urgent", "support"],
    "nums": [1, 5, 9],
    "matrix": [[1, 2], [3]],
    "title": "Crash on 启动 🚀",
}

# (filter, payload, expected)
ROWS: list[tuple[Any, Any, bool]] = [
    # match-all
    (None, ISSUE, True),
    ({}, ISSUE, True),
    ({}, None, True),
    # plain value = $eq, implicit AND
    ({"priority": "Critical"}, ISSUE, True),
    ({"priority": "critical"}, ISSUE, False),
    ({"project.key": "FOO", "priority": "Critical"}, ISSUE, True),
    ({"project.key": "FOO", "priority": "Low"}, ISSUE, False),
    ({"project": {"key": "FOO"}}, ISSUE, True),
    ({"project": {"key": "BAR"}}, ISSUE, False),
    ({"project": {"key": {"$eq": "FOO"}, "name": "Föö"}}, ISSUE, True),
    # numbers, bools, type strictness
    ({"score": 7}, ISSUE, True),
    ({"score": 7.0}, ISSUE, True),
    ({"score": "7"}, ISSUE, False),
    ({"draft": False}, ISSUE, True),
    ({"draft": 0}, ISSUE, False),
    ({"score": True}, {"score": 1}, False),
    ({"score": 1}, {"score": True}, False),
    ({"score": {"$gt": 6}}, ISSUE, True),
    ({"score": {"$gt": 7}}, ISSUE, False),
    ({"score": {"$gte": 7}}, ISSUE, True),
    ({"score": {"$lt": 7.5}}, ISSUE, True),
    ({"score": {"$lte": 6.99}}, ISSUE, False),
    ({"score": {"$gte": 5, "$lt": 10}}, ISSUE, True),
    ({"priority": {"$gt": 1}}, ISSUE, False),
    ({"score": {"$gt": "1"}}, ISSUE, False),
    ({"draft": {"$lt": 1}}, ISSUE, False),
    ({"assignee": {"$lt": 1}}, ISSUE, False),
    ({"priority": {"$gt": "Blocker"}}, ISSUE, True),
    ({"priority": {"$lt": "Blocker"}}, ISSUE, False),
    # nulls and missing fields
    ({"assignee": None}, ISSUE, True),
    ({"missing": None}, ISSUE, False),
    ({"assignee": {"$exist": True}}, ISSUE, True),
    ({"assignee": {"$exist": False}}, ISSUE, False),
    ({"missing": {"$exist": False}}, ISSUE, True),
    ({"missing": {"$exist": True}}, ISSUE, False),
    ({"missing": {"$neq": "x"}}, ISSUE, True),
    ({"missing": {"$nin": ["x"]}}, ISSUE, True),
    ({"missing": {"$in": ["x"]}}, ISSUE, False),
    ({"missing": {"$gt": 0}}, ISSUE, False),
    ({"missing": {"$startsWith": ""}}, ISSUE, False),
    ({"missing": {"$contains": "x"}}, ISSUE, False),
    ({"missing": {"$not": {"$eq": 1}}}, ISSUE, True),
    ({"assignee": {"$neq": None}}, ISSUE, False),
    ({"missing": {"$neq": None}}, ISSUE, True),
    ({"score": {"$neq": None}}, ISSUE, True),
    ({"project.key.deeper": "x"}, ISSUE, False),
    ({"priority.x": {"$exist": False}}, ISSUE, True),
    ({"a.b": 1}, {"a": None}, False),
    # arrays: any element, whole array, traversal, negations
    ({"tags": "urgent"}, ISSUE, True),
    ({"tags": "nope"}, ISSUE, False),
    ({"tags": ["urgent", "support"]}, ISSUE, True),
    ({"tags": ["support", "urgent"]}, ISSUE, False),
    ({"tags": {"$neq": "urgent"}}, ISSUE, False),
    ({"tags": {"$neq": "nope"}}, ISSUE, True),
    ({"tags": {"$in": ["x", "support"]}}, ISSUE, True),
    ({"tags": {"$nin": ["x", "support"]}}, ISSUE, False),
    ({"tags": {"$startsWith": "sup"}}, ISSUE, True),
    ({"nums": {"$gt": 8}}, ISSUE, True),
    ({"nums": {"$gt": 9}}, ISSUE, False),
    # each operator picks its own element (as MongoDB without $elemMatch): 5 > 2, 1 < 4
    ({"nums": {"$gt": 2, "$lt": 4}}, ISSUE, True),
    ({"labels.name": "bug"}, ISSUE, True),
    ({"labels": {"name": "ui"}}, ISSUE, True),
    ({"labels.name": "feature"}, ISSUE, False),
    ({"labels.name": {"$neq": "bug"}}, ISSUE, False),
    ({"labels.name": {"$exist": True}}, ISSUE, True),
    ({"labels.color": {"$exist": True}}, ISSUE, False),
    ({"matrix": [3]}, ISSUE, True),
    ({"matrix": 3}, ISSUE, False),
    ({"tags": {"$contains": "urgent"}}, ISSUE, True),
    ({"tags": {"$contains": "urg"}}, ISSUE, False),
    ({"nums": {"$contains": 5.0}}, ISSUE, True),
    ({"nums": {"$contains": True}}, {"nums": [1]}, False),
    ({"matrix": {"$contains": [1, 2]}}, ISSUE, True),
    ({"tags": {"$eq": []}}, {"tags": []}, True),
    ({"tags": "x"}, {"tags": []}, False),
    ({"tags": {"$neq": "x"}}, {"tags": []}, True),
    # strings and unicode
    ({"title": {"$contains": "启动"}}, ISSUE, True),
    ({"title": {"$endsWith": "🚀"}}, ISSUE, True),
    ({"title": {"$startsWith": "crash"}}, ISSUE, False),
    ({"project.name": "Föö"}, ISSUE, True),
    ({"project.name": "Fo\u0308o\u0308"}, ISSUE, False),  # NFD is not NFC: no normalisation
    ({"priority": {"$contains": "it"}}, ISSUE, True),
    ({"score": {"$contains": "7"}}, ISSUE, False),
    ({"score": {"$startsWith": "7"}}, ISSUE, False),
    ({"priority": {"$endsWith": "cal"}}, ISSUE, True),
    ({"title": {"$gt": "Crash"}}, ISSUE, True),
    # objects as values
    ({"project": {"$eq": {"key": "FOO", "name": "Föö"}}}, ISSUE, True),
    ({"project": {"$eq": {"key": "FOO"}}}, ISSUE, False),
    ({"project": {"$in": [{"name": "Föö", "key": "FOO"}]}}, ISSUE, True),
    ({"x": {"$eq": {}}}, {"x": {}}, True),
    # logic
    ({"$or": [{"priority": "Low"}, {"score": 7}]}, ISSUE, True),
    ({"$or": [{"priority": "Low"}, {"score": 8}]}, ISSUE, False),
    ({"$and": [{"priority": "Critical"}, {"score": {"$gte": 7}}]}, ISSUE, True),
    ({"$and": [{"priority": "Critical"}, {"score": {"$gte": 8}}]}, ISSUE, False),
    ({"$not": {"priority": "Low"}}, ISSUE, True),
    ({"$not": {"priority": "Critical"}}, ISSUE, False),
    ({"priority": {"$not": {"$in": ["Low", "Medium"]}}}, ISSUE, True),
    ({"project": {"$or": [{"key": "BAR"}, {"name": {"$startsWith": "F"}}]}}, ISSUE, True),
    ({"$not": {"$or": [{"a": 1}, {"b": 1}]}}, {"c": 1}, True),
    # payloads that are not objects
    ({"a": 1}, None, False),
    ({"a": 1}, [{"a": 1}, {"a": 2}], True),
    ({"a": {"$exist": False}}, "text", True),
    ({"$eq": 5}, 5, True),
    ({"$in": [1, 2]}, [3, 2], True),
    ({"a": {"$neq": 1}}, 42, True),
]


def test_table_is_big_enough() -> None:
    assert len(ROWS) >= 60


@pytest.mark.parametrize(("doc", "payload", "expected"), ROWS)
def test_reference_and_compiled_agree_with_table(doc: Any, payload: Any, expected: bool) -> None:
    assert reference_match(doc, payload) is expected
    assert compile_filter(doc)(payload) is expected
    matched, failed = explain(doc, payload)
    assert matched is expected
    assert (failed is None) is expected


@pytest.mark.parametrize(
    ("doc", "payload", "clause"),
    [
        ({"project.key": "BAR"}, ISSUE, "project.key.$eq"),
        ({"project": {"key": {"$gt": "G"}}}, ISSUE, "project.key.$gt"),
        ({"priority": "Critical", "score": {"$gte": 8}}, ISSUE, "score.$gte"),
        ({"$or": [{"a": 1}, {"b": 2}]}, ISSUE, "$or"),
        ({"$and": [{"score": 7}, {"tags": {"$in": ["x"]}}]}, ISSUE, "$and[1].tags.$in"),
        ({"priority": {"$not": {"$eq": "Critical"}}}, ISSUE, "priority.$not"),
        ({"missing": {"$exist": True}}, ISSUE, "missing.$exist"),
        ({"tags": {"$neq": "urgent"}}, ISSUE, "tags.$neq"),
    ],
)
def test_explain_names_first_failed_clause(doc: Any, payload: Any, clause: str) -> None:
    assert explain(doc, payload) == (False, clause)


def test_explain_on_match() -> None:
    assert explain({"priority": "Critical"}, ISSUE) == (True, None)
    assert explain(None, ISSUE) == (True, None)


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1.0, True),
        (True, 1, False),
        (False, 0, False),
        (None, None, True),
        (None, False, False),
        ([1, [2]], [1.0, [2]], True),
        ([1], [True], False),
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ("é", "e\u0301", False),
    ],
)
def test_json_equal_is_type_strict(a: Any, b: Any, equal: bool) -> None:
    assert json_equal(a, b) is equal
    assert json_equal(b, a) is equal
