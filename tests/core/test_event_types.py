"""Event-type catalogs in the pure core: definitions checked, schemas compiled once,
payloads judged with the JSON Pointer of the failing value, strict-mode rules, and the
catalog as registry state (created, updated, deprecated, removed, merged)."""

from __future__ import annotations

import pytest

from crdt import Timestamp
from regionsync.core.event_types import (
    EventTypeView,
    SchemaViolation,
    ValidatorCache,
    check_event_type_fields,
    check_schema,
    check_subscriptions,
    pointer,
    publish_schema,
    validate_payload,
)
from regionsync.core.registry import Registry
from regionsync.errors import Unprocessable

ORDER = {
    "type": "object",
    "required": ["id", "items"],
    "properties": {
        "id": {"type": "string"},
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
    },
    "$defs": {"item": {"type": "object", "required": ["id"], "properties": {
        "id": {"type": "integer"}}}},
}  # fmt: skip


STEPS = 100_000  # the default bound (config.IngestSettings.schema_max_steps)


def judge(
    types: dict[str, EventTypeView] | None,
    strict: bool,
    name: str,
    payload: object,
    cache: ValidatorCache,
) -> None:
    """Publish's judgement: the type's schema (core.event_types.publish_schema), then the
    payload against it."""
    schema = publish_schema(types, strict, name)
    if schema is not None:
        validate_payload(cache.get(schema), payload, STEPS)


def view(name: str = "order.paid", schema: object = ORDER, deprecated: bool = False):
    fields = check_event_type_fields({"name": name, "schema": schema}, create=True)
    return EventTypeView("acme", name, "", fields["schema"], deprecated, None, 1, 1)


def test_pointer_escapes_per_rfc_6901() -> None:
    assert pointer([]) == ""
    assert pointer(["items", 0, "id"]) == "/items/0/id"
    assert pointer(["a/b", "m~n"]) == "/a~1b/m~0n"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": "a b"}, "name"),
        ({"name": "x.*"}, "name"),
        ({"name": "x" * 129}, "name"),
        ({"name": "x", "color": 1}, "color"),
        ({"name": "x", "description": 3}, "description"),
        ({"name": "x", "description": "d" * 1025}, "description"),
        ({"name": "x", "deprecated": "yes"}, "deprecated"),
        ({"name": "x", "schema": "string"}, "schema"),
        ({"name": "x", "schema": {"type": "strin"}}, "schema"),
        ({"name": "x", "schema": {"minLength": -1}}, "schema"),
        ({"name": "x", "schema": {"$ref": "https://example.com/s.json"}}, "schema"),
        ({"name": "x", "schema": {"$ref": "#/$defs/missing"}}, "schema"),
    ],
)
def test_bad_definitions_name_the_field(body: dict, field: str) -> None:
    with pytest.raises(Unprocessable) as info:
        check_event_type_fields(body, create=True)
    assert info.value.field == field and info.value.status == 422


def test_invalid_schema_detail_names_the_keyword_location() -> None:
    with pytest.raises(Unprocessable) as info:
        check_event_type_fields(
            {"name": "x", "schema": {"properties": {"a": {"type": 5}}}}, create=True
        )
    assert info.value.code == "invalid_schema"
    assert "/properties/a/type" in info.value.detail


def test_definition_fields_and_canonical_schema_text() -> None:
    got = check_event_type_fields(
        {"name": "a.b", "description": "d", "schema": {"type": "object", "title": "t"},
         "deprecated": True}, create=True,
    )  # fmt: skip
    assert got == {"name": "a.b", "description": "d", "deprecated": True,
                   "schema": '{"title":"t","type":"object"}'}  # fmt: skip
    assert check_event_type_fields({"schema": None}, create=False) == {"schema": None}
    assert check_event_type_fields({"schema": True}, create=False) == {"schema": "true"}
    with pytest.raises(Unprocessable) as info:
        check_event_type_fields({"name": "a"}, create=False)  # a name is not updated
    assert info.value.field == "name"


def test_conforming_payload_passes_and_violations_name_the_path() -> None:
    cache = ValidatorCache()
    types = {"order.paid": view()}
    ok = {"id": "o1", "items": [{"id": 1}, {"id": 2}]}
    judge(types, False, "order.paid", ok, cache)
    with pytest.raises(SchemaViolation) as info:
        judge(types, False, "order.paid", {"id": "o1", "items": [{"id": "x"}]}, cache)
    exc = info.value
    assert (exc.status, exc.code, exc.field) == (422, "schema_violation", "payload")
    assert exc.path == "/items/0/id"
    assert exc.schema_path.endswith("/properties/id/type")
    assert exc.extra == {"path": exc.path, "schema_path": exc.schema_path}
    with pytest.raises(SchemaViolation) as info:
        judge(types, False, "order.paid", {"items": []}, cache)
    assert info.value.path == ""  # the payload itself misses "id"
    with pytest.raises(SchemaViolation):
        judge(types, False, "order.paid", [1], cache)


def test_validators_are_compiled_once_per_schema() -> None:
    cache = ValidatorCache(capacity=2)
    types = {"a": view("a"), "b": view("b")}  # the same schema text
    for _ in range(5):
        for name in ("a", "b"):
            judge(types, False, name, {"id": "x", "items": []}, cache)
    assert cache.compiles == 1
    cache.get('{"type":"string"}')
    cache.get('{"type":"number"}')  # capacity 2: the order schema is evicted
    judge(types, False, "a", {"id": "x", "items": []}, cache)
    assert cache.compiles == 4


def test_unknown_types_pass_unless_strict_and_no_schema_accepts_anything() -> None:
    types = {"order.paid": view(), "free": view("free", None)}
    assert publish_schema(None, False, "anything") is None
    assert publish_schema(types, False, "other") is None
    assert publish_schema(types, True, "free") is None
    assert publish_schema(types, True, "order.paid") == types["order.paid"].schema
    for catalog in (types, None, {}):
        with pytest.raises(Unprocessable) as info:
            publish_schema(catalog, True, "other")
        assert (info.value.code, info.value.field) == ("unknown_event_type", "event_type")


def test_strict_subscriptions() -> None:
    known = ["order.paid", "order.refunded", "user.created"]
    check_subscriptions(["*", "order.*", "user.created"], known)
    check_subscriptions([], [])
    for bad in (["order.paid", "order.shipped"], ["invoice.*"], ["user"]):
        with pytest.raises(Unprocessable) as info:
            check_subscriptions(bad, known)
        assert info.value.field == "event_types" and info.value.code == "unknown_event_type"
        assert bad[-1] in info.value.detail


def _stamp(ms: int) -> Timestamp:
    return Timestamp(ms, 0)


def test_catalog_as_registry_state() -> None:
    reg = Registry()
    reg.apply(reg.create_tenant("acme", "Acme", 1, "us:1", _stamp(1)))
    assert reg.event_types("acme") == [] and not reg.strict_event_types("acme")
    fields = check_event_type_fields({"name": "order.paid", "schema": ORDER}, create=True)
    reg.apply(reg.put_event_type("acme", "order.paid", fields, 5, "us:1", _stamp(5), True))
    got = reg.event_type("acme", "order.paid")
    assert got is not None and got.schema == fields["schema"] and not got.deprecated
    assert (got.created_at_ms, got.updated_at_ms) == (5, 5)
    reg.apply(reg.put_event_type("acme", "order.paid", {"deprecated": True}, 9, "us:1",
                                 _stamp(9), False))  # fmt: skip
    got = reg.event_type("acme", "order.paid")
    assert got is not None and got.deprecated and got.deprecated_at_ms == 9
    assert got.schema == fields["schema"]  # untouched fields stay
    reg.apply(reg.put_event_type("acme", "order.paid", {"deprecated": True}, 12, "us:1",
                                 _stamp(12), False))  # fmt: skip
    assert reg.event_type("acme", "order.paid").deprecated_at_ms == 9  # type: ignore[union-attr]
    reg.apply(reg.patch_tenant("acme", {"strict_event_types": True}, "us:1", _stamp(13)))
    assert reg.strict_event_types("acme") and reg.tenant("acme").strict_event_types  # type: ignore[union-attr]
    reg.apply(reg.delete_event_type("acme", "order.paid"))
    assert reg.event_type("acme", "order.paid") is None and reg.event_types("acme") == []


def test_catalog_replicates_and_dies_with_its_tenant() -> None:
    us, eu = Registry(), Registry()
    d = us.create_tenant("acme", "Acme", 1, "us:1", _stamp(1))
    us.apply(d), eu.apply(d)
    fields = check_event_type_fields({"name": "a", "schema": {"type": "object"}}, create=True)
    d = us.put_event_type("acme", "a", fields, 2, "us:1", _stamp(2), True)
    us.apply(d), eu.apply(d)
    assert eu.event_type("acme", "a") == us.event_type("acme", "a")
    assert eu.state_hash() == us.state_hash()
    # deleting the tenant removes its types; a re-created tenant starts with none
    eu.apply(eu.delete_tenant("acme"))
    eu.apply(eu.create_tenant("acme", "Acme", 3, "eu:1", _stamp(3)))
    assert eu.event_types("acme") == []
    # a type written under the old life of the id and merged late stays invisible
    eu.apply(d)
    assert eu.event_type("acme", "a") is None


# -- regular expressions on RE2 (QA of 2026-12-02: ReDoS through a schema pattern) -------

_EVIL = "^(a+)+$"  # exponential in Python's re on "aaa...a!"
_SLOW_INPUT = "a" * 5000 + "!"  # Python's re would not finish this in a lifetime


@pytest.mark.parametrize(
    "schema, payload",
    [
        ({"type": "object", "properties": {"s": {"type": "string", "pattern": _EVIL}}},
         {"s": _SLOW_INPUT}),
        ({"type": "object", "patternProperties": {_EVIL: {"type": "integer"}}},
         {_SLOW_INPUT: "x", "a": "x"}),
        ({"type": "object", "patternProperties": {_EVIL: True}, "additionalProperties": False},
         {_SLOW_INPUT: 1}),
        ({"type": "object", "propertyNames": {"pattern": _EVIL}}, {_SLOW_INPUT: 1}),
    ],
)  # fmt: skip
def test_a_backtracking_pattern_cannot_stall_validation(schema, payload) -> None:  # type: ignore[no-untyped-def]
    """Each of these took Python's ``re`` exponential time (27 characters: 4.2 s); RE2
    answers at once, with the same verdict jsonschema gives."""
    validator = ValidatorCache().get(check_schema(schema))
    with pytest.raises(SchemaViolation):
        validate_payload(validator, payload, STEPS)


def test_patterns_keep_their_meaning_on_re2() -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": r"^ord_[0-9a-f]{4}$"}},
        "patternProperties": {r"^x-": {"type": "string"}},
        "additionalProperties": False,
    }
    validator = ValidatorCache().get(check_schema(schema))
    validate_payload(validator, {"id": "ord_beef", "x-trace": "t"}, STEPS)
    for bad in ({"id": "ord_BEEF"}, {"id": "ord_beef", "x-n": 1}, {"id": "ord_beef", "y": 1}):
        with pytest.raises(SchemaViolation):
            validate_payload(validator, bad, STEPS)


@pytest.mark.parametrize(
    "schema, where",
    [
        ({"properties": {"s": {"pattern": r"(a)\1"}}}, "/properties/s/pattern"),
        ({"patternProperties": {r"(?=x)y": {}}}, "/patternProperties"),
        (
            {"patternProperties": {"^a": {}}, "unevaluatedProperties": False},
            "unevaluatedProperties",
        ),
    ],
)
def test_patterns_re2_cannot_run_are_refused_at_registration(schema, where: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Unprocessable) as exc:
        check_schema(schema)
    assert exc.value.field == "schema" and where in str(exc.value)


def test_pattern_like_data_is_not_a_pattern() -> None:
    check_schema({"const": {"pattern": r"(a)\1"}, "examples": [{"pattern": "(?=x)"}]})


def test_a_stored_schema_with_a_pattern_re2_refuses_is_a_422_at_publish() -> None:
    """A schema stored before registration checked its patterns for RE2 (or replicated
    from such a node) answers 422 ``schema_unusable``, never a 500."""
    stored = '{"properties":{"s":{"pattern":"(a)\\\\1"}}}'
    validator = ValidatorCache().get(stored)
    with pytest.raises(Unprocessable) as exc:
        validate_payload(validator, {"s": "aa"}, STEPS)
    assert (exc.value.code, exc.value.field) == ("schema_unusable", "event_type")


def test_ecma_unicode_escapes_in_patterns_run_on_re2() -> None:
    """JSON Schema patterns are ECMA-262 regexes, whose ``\\uXXXX`` RE2 spells
    ``\\x{XXXX}`` (they were refused at registration once patterns went to RE2)."""
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string", "pattern": "^\\u00e9+$"},
            "t": {"type": "string", "pattern": "^[\\u0041-\\u005A]+$"},
            "u": {"type": "string", "pattern": "^\\\\u0041$"},  # an escaped backslash
        },
    }
    validator = ValidatorCache().get(check_schema(schema))
    validate_payload(validator, {"s": "éé", "t": "ABC", "u": "\\u0041"}, STEPS)
    for bad in ({"s": "e"}, {"t": "abc"}, {"u": "A"}):
        with pytest.raises(SchemaViolation):
            validate_payload(validator, bad, STEPS)


def test_a_refused_pattern_names_re2s_reason() -> None:
    with pytest.raises(Unprocessable) as exc:
        check_schema({"properties": {"s": {"pattern": "a{1001}"}}})
    assert "/properties/s/pattern" in str(exc.value) and "repetition" in str(exc.value)
