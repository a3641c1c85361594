"""Issue 38: a schema that loops without stepping into the payload is refused at
registration naming the place (it answered every publish with a 500 and a 155 KB
traceback); a payload's validation is bounded in steps (422 ``schema_too_costly``), never
a RecursionError; ``uniqueItems`` is linear."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from regionsync.core.event_types import (
    MAX_IN_PLACE,
    MAX_NESTING,
    SchemaViolation,
    ValidatorCache,
    check_schema,
    validate_payload,
)
from regionsync.errors import Unprocessable

STEPS = 100_000  # the default bound (config.IngestSettings.schema_max_steps)
# the issue's schema: each level of {"a": ...} is judged twice by #/$defs/m
EXPONENTIAL = {
    "$defs": {
        "n": {"allOf": [{"$ref": "#/$defs/m"}, {"$ref": "#/$defs/m"}]},
        "m": {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}},
    },
    "$ref": "#/$defs/n",
}


def nested(depth: int) -> Any:
    payload: Any = {}
    for _ in range(depth):
        payload = {"a": payload}
    return payload


def defs(root: str, **named: Any) -> dict[str, Any]:
    return {"$defs": named, "$ref": root}


LOOPS = [
    ({"$ref": "#"}, "#"),
    (defs("#/$defs/a", a={"$ref": "#/$defs/b"}, b={"$ref": "#/$defs/a"}), "#/$defs/a"),
    (defs("#/$defs/a", a={"$ref": "#/$defs/a"}), "#/$defs/a"),
    ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}},
     "#/$defs/a"),
    ({"allOf": [{"$ref": "#"}]}, "#"),
    ({"$dynamicAnchor": "n", "$ref": "#/$defs/x", "$defs": {"x": {"$dynamicRef": "#n"}}}, "#"),
    ({"anyOf": [{"type": "string"}, {"$ref": "#"}]}, "#"),
    ({"oneOf": [{"$ref": "#"}]}, "#"),
    ({"not": {"$ref": "#"}}, "#"),
    ({"not": {"$ref": "#/not"}}, "#/not"),
    ({"if": {"$ref": "#"}}, "#"),
    ({"if": True, "then": {"$ref": "#"}}, "#"),
    ({"if": False, "else": {"$ref": "#"}}, "#"),
    ({"dependentSchemas": {"x": {"$ref": "#"}}}, "#"),
    (defs("#/$defs/a", a={"$anchor": "A", "allOf": [{"$ref": "#A"}]}), "#/$defs/a"),
    (defs("#/$defs/a", a={"anyOf": [{"$ref": "#/$defs/b"}]}, b={"allOf": [{"$ref": "#/$defs/c"}]},
          c={"$ref": "#/$defs/a"}), "#/$defs/a"),
    ({"properties": {"enum": {"$ref": "#/properties/enum"}}}, "#/properties/enum"),
    ({"properties": {"a": {"allOf": [{"$ref": "#/properties/a"}]}}}, "#/properties/a"),
]  # fmt: skip
RECURSIVE = [
    {"type": "object", "properties": {"a": {"$ref": "#"}}},
    {"items": {"$ref": "#"}},
    {"prefixItems": [{"$ref": "#"}]},
    {"additionalProperties": {"$ref": "#"}},
    {"patternProperties": {"^a": {"$ref": "#"}}},
    {"propertyNames": {"$ref": "#"}},
    {"contains": {"$ref": "#"}},
    {"unevaluatedProperties": {"$ref": "#"}},
    defs("#/$defs/t", t={"properties": {"l": {"$ref": "#/$defs/t"}, "r": {"$ref": "#/$defs/t"}}}),
    defs("#/$defs/a", a={"$ref": "#/$defs/b"}, b={"items": {"$ref": "#/$defs/a"}}),
    {"$dynamicAnchor": "n", "properties": {"c": {"$dynamicRef": "#n"}}},
    EXPONENTIAL,  # registers: its cost is bounded at publish
]  # fmt: skip


@pytest.mark.parametrize(("schema", "where"), LOOPS)
def test_a_loop_that_never_steps_into_the_payload_is_refused_naming_it(
    schema: dict[str, Any], where: str
) -> None:
    with pytest.raises(Unprocessable) as info:
        check_schema(schema)
    exc = info.value
    assert (exc.status, exc.code, exc.field) == (422, "invalid_schema", "schema")
    assert f"at {where}: a loop of references" in exc.detail, exc.detail


@pytest.mark.parametrize("schema", RECURSIVE)
def test_recursion_through_the_payload_registers_and_validates(schema: dict[str, Any]) -> None:
    validator = ValidatorCache().get(check_schema(schema))
    for payload in (nested(6), [[[]]], {"a": [{"a": 1}], "ab": "x"}):
        try:
            validate_payload(validator, payload, STEPS)
        except SchemaViolation:
            pass


@pytest.mark.parametrize(("schema", "where"), LOOPS)
def test_a_looping_schema_stored_before_the_check_is_a_422_at_publish(
    schema: dict[str, Any], where: str
) -> None:
    """Such a schema replicated from an older node (or stored before this check) answers
    a 4xx at publish naming the place: it raised RecursionError (or a PanicException from
    the ``rpds`` extension), a 500 with a traceback per request."""
    for _ in range(2):  # compiled once, refused each time
        with pytest.raises(Unprocessable) as info:
            ValidatorCache().get(json.dumps(schema))
        exc = info.value
        assert (exc.status, exc.code, exc.field) == (422, "schema_unusable", "event_type")
        assert f"at {where}: a loop of references" in exc.detail


@pytest.mark.parametrize(
    ("schema", "deep"),
    [
        (RECURSIVE[0], nested(400)),
        (RECURSIVE[1], json.loads("[" * 400 + "]" * 400)),
        (RECURSIVE[2], json.loads("[" * 400 + "]" * 400)),
        (RECURSIVE[3], nested(400)),
        (RECURSIVE[6], json.loads("[" * 400 + "]" * 400)),
        (RECURSIVE[8], json.loads('{"l":' * 400 + "{}" + "}" * 400)),
        (RECURSIVE[10], json.loads('{"c":' * 400 + "{}" + "}" * 400)),
    ],
)
def test_a_payload_nested_deeper_than_validation_follows_is_a_422(schema: Any, deep: Any) -> None:
    """Recursion through the payload nests applicators as deep as the payload is: past
    MAX_NESTING a 422, before Python's stack runs out (a RecursionError was a 500)."""
    validator = ValidatorCache().get(check_schema(schema))
    with pytest.raises(Unprocessable) as info:
        validate_payload(validator, deep, 10**7)
    assert (info.value.code, info.value.field) == ("schema_too_costly", "payload")
    assert f"more than {MAX_NESTING} deep" in info.value.detail


def test_what_one_value_is_judged_by_in_place_is_bounded_at_registration() -> None:
    def fan_out(levels: int) -> dict[str, Any]:
        named: dict[str, Any] = {f"l{levels}": {"type": "string"}}
        for i in range(levels):
            named[f"l{i}"] = {"allOf": [{"$ref": f"#/$defs/l{i + 1}"}] * 10}
        return defs("#/$defs/l0", **named)

    check_schema(fan_out(2))  # 111 subschemas judge the payload
    with pytest.raises(Unprocessable) as info:
        check_schema(fan_out(3))  # 1,111
    assert info.value.code == "invalid_schema"
    assert f"at #/$defs/l0: judges one payload value by more than {MAX_IN_PLACE}" in str(info.value)


def test_the_issues_exponential_schema_is_refused_within_the_step_bound() -> None:
    """Unbounded, depth 20 applies about 2**20 subschemas (depth 16 took 9 s in the
    issue); bounded, it stops after STEPS steps, well under a second here."""
    validator = ValidatorCache().get(check_schema(EXPONENTIAL))
    validate_payload(validator, nested(8), STEPS)  # about 4,600 steps
    started = time.monotonic()
    with pytest.raises(Unprocessable) as info:
        validate_payload(validator, nested(20), STEPS)
    assert time.monotonic() - started < 10
    exc = info.value
    assert (exc.status, exc.code, exc.field) == (422, "schema_too_costly", "payload")
    assert f"more than {STEPS} steps" in exc.detail
    with pytest.raises(Unprocessable):
        validate_payload(validator, nested(8), 100)  # the bound is the caller's


def test_a_keyword_weighs_the_values_it_goes_through() -> None:
    """One ``enum`` of 1,000 values applied to 200 elements is 200,000 comparisons."""
    validator = ValidatorCache().get(check_schema({"items": {"enum": list(range(1000))}}))
    validate_payload(validator, list(range(50)), STEPS)
    with pytest.raises(Unprocessable) as info:
        validate_payload(validator, list(range(200)), STEPS)
    assert info.value.code == "schema_too_costly"


def test_unique_items_is_exact_and_linear() -> None:
    validator = ValidatorCache().get(check_schema({"uniqueItems": True}))
    same = ([1, 1.0], [{"a": 1, "b": [2]}, {"b": [2.0], "a": 1}], [[0, None], [0, None]])
    for payload in same:
        with pytest.raises(SchemaViolation):
            validate_payload(validator, payload, STEPS)
    for payload in ([1, True], [0, False], [None, False], ["1", 1], [[1], [True]], [{}, []]):
        validate_payload(validator, payload, STEPS)
    # 20,000 distinct objects: jsonschema's fallback compared every pair (2 * 10**8)
    started = time.monotonic()
    validate_payload(validator, [{"i": i} for i in range(20_000)], STEPS)
    assert time.monotonic() - started < 10
