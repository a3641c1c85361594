"""The compiled predicate agrees with the reference evaluator on random filters and
payloads (hypothesis, derandomized), and validation accepts exactly what compiles."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regionsync.core.filter_compiler import compile_filter
from regionsync.core.filters import explain, reference_match, validate_filter
from regionsync.errors import Unprocessable

PROFILE = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=600,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

NAMES = st.sampled_from(["a", "b", "c"])
PATHS = st.sampled_from(["a", "b", "c", "a.b", "b.c", "a.b.c", "c.a"])
TEXT = st.text(alphabet="ab\u00e9e\u0301\u542f\U0001f680 ", max_size=3)
NUMBERS = st.integers(-3, 3) | st.sampled_from([0.0, 1.0, 1.5, -2.5])
SCALARS = st.none() | st.booleans() | NUMBERS | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda ch: st.lists(ch, max_size=3) | st.dictionaries(NAMES, ch, max_size=3),
    max_leaves=8,
)
OPERATOR_ENTRIES = st.one_of(
    st.tuples(st.sampled_from(["$eq", "$neq", "$contains"]), VALUES),
    st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), NUMBERS | TEXT),
    st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(VALUES, max_size=3)),
    st.tuples(st.just("$exist"), st.booleans()),
    st.tuples(st.sampled_from(["$startsWith", "$endsWith"]), TEXT),
)
LEAF_DOCS = st.lists(st.tuples(PATHS, VALUES) | OPERATOR_ENTRIES, min_size=1, max_size=3).map(dict)


def _extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    entry = st.one_of(
        st.tuples(PATHS, VALUES | children),
        st.tuples(st.sampled_from(["$and", "$or"]), st.lists(children, min_size=1, max_size=3)),
        st.tuples(st.just("$not"), children),
        OPERATOR_ENTRIES,
    )
    return st.lists(entry, min_size=1, max_size=3).map(dict)


def _valid(doc: Any) -> bool:
    try:
        validate_filter(doc)
    except Unprocessable:
        return False
    return True


FILTERS = st.recursive(LEAF_DOCS, _extend, max_leaves=10).filter(_valid)
PAYLOADS = st.dictionaries(NAMES, VALUES, max_size=3) | VALUES


@PROFILE
@given(doc=FILTERS, payload=PAYLOADS)
def test_compiled_predicate_agrees_with_reference(doc: dict[str, Any], payload: Any) -> None:
    expected = reference_match(doc, payload)
    assert compile_filter(doc)(payload) is expected
    matched, failed = explain(doc, payload)
    assert matched is expected and (failed is None) is expected


@PROFILE
@given(doc=FILTERS, payloads=st.lists(PAYLOADS, min_size=2, max_size=6))
def test_one_compiled_predicate_serves_many_payloads(
    doc: dict[str, Any], payloads: list[Any]
) -> None:
    predicate = compile_filter(doc)
    assert [predicate(p) for p in payloads] == [reference_match(doc, p) for p in payloads]


@settings(derandomize=True, database=None, deadline=None, max_examples=200)
@given(
    doc=st.recursive(
        SCALARS | st.sampled_from(["$eq", "$or", "$not", "$gt", "$in", "$regex", "a.b", ""]),
        lambda ch: (
            st.lists(ch, max_size=4)
            | st.dictionaries(
                st.sampled_from(["a", "a.b", "$and", "$or", "$not", "$eq", "$in", "$x", ".a", ""]),
                ch,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_validation_never_crashes_and_compile_follows_it(doc: Any) -> None:
    try:
        validate_filter(doc)
    except Unprocessable as exc:
        assert exc.field is not None and exc.field.startswith("filter")
        return
    predicate = compile_filter(doc)
    assert predicate({"a": 1}) is reference_match(doc, {"a": 1})
