"""Payloads judged by JSON Schemas: Draft 2020-12 through the ``jsonschema`` package,
its regular expressions on RE2, every keyword metered (core.event_types uses it; the
checks a schema passes at registration are core.schema_checks).

Regular expressions (``pattern``, ``patternProperties``) run on RE2 (google-re2), whose
matching time is linear in the input: a tenant's pattern such as ``^(a+)+$`` cannot stall
the node with a backtracking blow-up (QA of 2026-12-02: 4.2 s on the event loop for a
28-character string with Python's ``re``). ECMA-262's ``\\uXXXX`` escapes become RE2's
``\\x{XXXX}``. A pattern RE2 does not take (backreferences, lookaround) is refused at
registration, as is ``unevaluatedProperties`` in a schema with ``patternProperties``
(jsonschema matches those with Python's ``re``).

A payload's validation counts its steps and how deep its subschemas nest, within bounds
the caller gives (``validate_payload``): a schema whose work doubles per level of the
payload is refused once it has spent them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError, best_match
from referencing.exceptions import Unresolvable

from ..errors import Unprocessable

__all__ = [
    "IN_PLACE_MANY",
    "IN_PLACE_ONE",
    "MAX_NESTING",
    "STEPPING_MANY",
    "STEPPING_ONE",
    "SchemaValidator",
    "SchemaViolation",
    "pointer",
    "re2_pattern",
    "re2_reason",
    "validate_payload",
]


class SchemaViolation(Unprocessable):
    """A payload that does not conform to its event type's schema (422
    ``schema_violation``). ``path`` is the JSON Pointer of the failing value in the
    payload (``""`` for the payload itself), ``schema_path`` the pointer of the failing
    keyword in the schema."""

    code = "schema_violation"

    def __init__(self, detail: str, path: str, schema_path: str):
        super().__init__(detail, field="payload")
        self.path, self.schema_path = path, schema_path
        self.extra = {"path": path, "schema_path": schema_path}


def pointer(parts: Iterable[str | int]) -> str:
    """The JSON Pointer (RFC 6901) of a path: ``["items", 0, "a/b"]`` -> ``/items/0/a~1b``."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is a 422, not a line on stderr


_U_ESCAPE = re.compile(r"\\(\\|u([0-9A-Fa-f]{4}))")


def _ecma_to_re2(pattern: str) -> str:
    """ECMA-262's ``\\uXXXX`` escapes (JSON Schema patterns use them) as RE2's
    ``\\x{XXXX}``; an escaped backslash stays as it is."""
    return _U_ESCAPE.sub(lambda m: m[0] if m[2] is None else "\\x{" + m[2] + "}", pattern)


@functools.lru_cache(maxsize=4096)
def re2_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2; raises ``re2.error`` for syntax RE2 does not take."""
    return re2.compile(_ecma_to_re2(pattern), _RE2_OPTIONS)


def re2_reason(exc: Exception) -> str:
    """RE2's own reason for refusing a pattern (``invalid perl operator: (?=``)."""
    reason = exc.args[0] if exc.args else ""
    return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterable[ValidationError]:
    # jsonschema's ``pattern`` with RE2 in place of re.search (same message)
    if validator.is_type(instance, "string") and not re2_pattern(patrn).search(instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, pattern_properties: Mapping[str, Any], instance: Any, schema: Any
) -> Iterable[ValidationError]:
    # jsonschema's ``patternProperties`` with RE2 in place of re.search
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in pattern_properties.items():
        rx = re2_pattern(patrn)
        for k, v in instance.items():
            if rx.search(k):
                yield from validator.descend(v, subschema, path=k, schema_path=patrn)


def _additional_properties(
    validator: Any, ap: Any, instance: Any, schema: Any
) -> Iterable[ValidationError]:
    # jsonschema's ``additionalProperties`` with RE2 for the patternProperties it skips
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = [re2_pattern(p) for p in schema.get("patternProperties", {})]
    extras = [
        k for k in instance if k not in properties and not any(rx.search(k) for rx in patterns)
    ]
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        joined = ", ".join(repr(each) for each in sorted(extras))
        if patterns:
            regexes = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} do not match any of the regexes: {regexes}")
        else:
            yield ValidationError(f"Additional properties are not allowed ({joined} unexpected)")


def _unique_items(validator: Any, ui: Any, instance: Any, schema: Any) -> Iterable[ValidationError]:
    # jsonschema's ``uniqueItems`` in linear time (its fallback compares every pair)
    if ui and validator.is_type(instance, "array"):
        seen = set()
        for each in instance:
            key = _hashable(each)
            if key in seen:
                yield ValidationError(f"{instance!r} has non-unique elements")
                return
            seen.add(key)


def _hashable(value: Any) -> Any:
    """A JSON value as a hashable that is equal exactly when the values are equal in JSON
    Schema's sense (``1 == 1.0``, ``true != 1``, objects regardless of key order)."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, list):
        return ("array", tuple(_hashable(e) for e in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, _hashable(e)) for k, e in value.items()))
    return value  # a number or a string (never equal to each other)


class _OverBudget(Exception):
    """A validation spent its steps (``validate_payload``)."""


class _Steps:
    __slots__ = ("depth", "left", "limit")

    def __init__(self, limit: int):
        self.limit, self.left, self.depth = limit, limit, 0


_STEPS: ContextVar[_Steps | None] = ContextVar("schema_steps", default=None)


def _size(value: Any) -> int:
    return len(value) if isinstance(value, dict | list) else 0


# applicators that apply a subschema to the same payload value (in place), and those
# that step into a member or element of it
IN_PLACE_ONE = ("not", "if", "then", "else")
IN_PLACE_MANY = ("allOf", "anyOf", "oneOf", "dependentSchemas")
STEPPING_ONE = ("additionalProperties", "items", "contains", "propertyNames",
                 "unevaluatedProperties", "unevaluatedItems")  # fmt: skip
STEPPING_MANY = ("properties", "patternProperties", "prefixItems")

_PER_MEMBER = frozenset({
    "propertyNames", "unevaluatedProperties", "items", "prefixItems", "contains",
    "unevaluatedItems", "uniqueItems"})  # fmt: skip
_PER_VALUE = frozenset({"properties", "dependentSchemas", "enum", "required",
                        "dependentRequired"})  # fmt: skip
_WEIGHED = _PER_MEMBER | _PER_VALUE | {"pattern", "patternProperties", "additionalProperties"}


def _weight(keyword: str, value: Any, instance: Any, schema: Any) -> int:
    """A keyword's steps beyond its first: one per member, element or listed value it
    goes through (a pattern: per 64 characters)."""
    if keyword in _PER_MEMBER:
        return _size(instance)
    if keyword in _PER_VALUE:
        return _size(value)
    if keyword == "pattern":
        return len(instance) // 64 if isinstance(instance, str) else 0
    patterns = value if keyword == "patternProperties" else schema.get("patternProperties")
    return _size(instance) * (_size(patterns) + (keyword == "additionalProperties"))


_APPLICATORS = frozenset(IN_PLACE_ONE + IN_PLACE_MANY + STEPPING_ONE + STEPPING_MANY
                         + ("$ref", "$dynamicRef"))  # fmt: skip
MAX_NESTING = 100  # applicators within applicators (up to 5 stack frames each, of 1,000)


def _metered(keyword: str, fn: Any) -> Any:
    """``fn`` (a keyword's validation) that first spends its steps from ``_STEPS``, and
    for an applicator counts how deep it nests."""
    weighed, applies = keyword in _WEIGHED, keyword in _APPLICATORS

    def metered(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        steps = _STEPS.get()
        if steps is None:
            return fn(validator, value, instance, schema)
        steps.left -= 1 + (_weight(keyword, value, instance, schema) if weighed else 0)
        if steps.left < 0:
            raise _OverBudget(f"takes more than {steps.limit} steps")
        errors = fn(validator, value, instance, schema)
        return _nested(steps, errors) if applies and errors is not None else errors

    return metered


def _nested(steps: _Steps, errors: Iterable[ValidationError]) -> Iterable[ValidationError]:
    # the errors of an applicator, counted as one level deeper while they are produced
    if steps.depth >= MAX_NESTING:
        raise _OverBudget(f"nests subschemas more than {MAX_NESTING} deep")
    steps.depth += 1
    try:
        yield from errors
    finally:
        steps.depth -= 1


# Draft 2020-12 with its regular expressions on RE2 (the module docstring), uniqueItems
# in linear time, and every keyword metered (``validate_payload``)
SchemaValidator = validators.extend(
    Draft202012Validator,
    {
        keyword: _metered(keyword, fn)
        for keyword, fn in (
            Draft202012Validator.VALIDATORS
            | {
                "pattern": _pattern,
                "patternProperties": _pattern_properties,
                "additionalProperties": _additional_properties,
                "uniqueItems": _unique_items,
            }
        ).items()
    },
)


def validate_payload(validator: Any, payload: Any, max_steps: int) -> None:
    """Raise SchemaViolation for the most relevant error (``jsonschema``'s
    ``best_match``) if ``payload`` does not conform; return None if it does.

    The validation takes at most ``max_steps`` steps (a keyword applied to a value is one,
    plus one per member, element or listed value it goes through) and nests applicators
    at most MAX_NESTING deep; beyond, 422 ``schema_too_costly`` (field ``payload``). A
    schema the validator cannot use is a 422 too, never a 500.
    """
    token = _STEPS.set(_Steps(max_steps))
    try:
        error = best_match(validator.iter_errors(payload))
    except (_OverBudget, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, _OverBudget) else "nests too deeply"
        raise Unprocessable(
            f"validating the payload against its event type's schema {reason}; send a "
            "smaller or flatter payload, or simplify the schema", field="payload",
            code="schema_too_costly") from None  # fmt: skip
    except Unresolvable as exc:  # refused at registration; kept as a 422, never a 500
        raise Unprocessable(f"the event type's schema does not resolve: {exc}",
                            field="event_type", code="schema_unusable") from None  # fmt: skip
    except re2.error as exc:  # stored before patterns were checked for RE2 at registration
        raise Unprocessable(f"the event type's schema has a pattern RE2 does not take: {exc}",
                            field="event_type", code="schema_unusable") from None  # fmt: skip
    except Exception as exc:  # whatever else the validator raises: a 422, never a 500
        raise Unprocessable(f"the event type's schema cannot be applied: "
                            f"{type(exc).__name__}: {str(exc)[:200]}", field="event_type",
                            code="schema_unusable") from None  # fmt: skip
    finally:
        _STEPS.reset(token)
    if error is None:
        return
    path = pointer(error.absolute_path)
    raise SchemaViolation(
        f"payload at {path or '/'} violates the schema: {error.message}",
        path,
        pointer(error.absolute_schema_path),
    )
