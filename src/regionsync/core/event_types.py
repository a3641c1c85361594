"""Event-type catalogs: definitions, their checks, and payloads checked against schemas.

Decides whether an event-type definition is acceptable, whether a payload conforms to its
type's JSON Schema, and whether a tenant in strict mode may publish a type or subscribe
to a pattern; never reads time, never awaits, never fetches a schema. Rules: JSON Schema
Draft 2020-12 through the ``jsonschema`` package (``format`` is an annotation, as the
draft's default vocabulary says; only local ``$ref`` such as ``#/$defs/x``); error
locations are JSON Pointers (RFC 6901) into the published payload.

Regular expressions (``pattern``, ``patternProperties``) run on RE2 (google-re2), whose
matching time is linear in the input: a tenant's pattern such as ``^(a+)+$`` cannot stall
the node with a backtracking blow-up (QA of 2026-12-02: 4.2 s on the event loop for a
28-character string with Python's ``re``). ECMA-262's ``\\uXXXX`` escapes become RE2's
``\\x{XXXX}``. A pattern RE2 does not take (backreferences, lookaround) is refused at
registration, as is ``unevaluatedProperties`` in a schema with ``patternProperties``
(jsonschema matches those with Python's ``re``).

A schema that loops back to a subschema without stepping into the payload (``{"$ref":
"#"}``, ``allOf`` to ``#``, a ``$dynamicRef`` cycle) is refused at registration naming the
place, as is one that judges a value by more than MAX_IN_PLACE subschemas (issue 38: they
recursed until Python's stack ran out, a 500 per publish). A payload's validation counts
its steps and how deep its subschemas nest, within bounds the caller gives
(``validate_payload``): a schema whose work doubles per level of the payload is refused
once it has spent them.
"""

from __future__ import annotations

import functools
import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from referencing import Registry as RefRegistry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from ..errors import Unprocessable

__all__ = [
    "EVENT_TYPE_FIELDS",
    "MAX_IN_PLACE",
    "MAX_NESTING",
    "EventTypeView",
    "SchemaValidator",
    "SchemaViolation",
    "ValidatorCache",
    "check_event_type_fields",
    "check_schema",
    "check_subscriptions",
    "pointer",
    "publish_schema",
    "validate_payload",
]

# stored per type as LWW registers under y/<tenant>/<name>/<field> (core.registry)
EVENT_TYPE_FIELDS = (
    "description",
    "schema",
    "deprecated",
    "deprecated_at",
    "created_at",
    "updated_at",
    "tenant_gen",
)
MAX_DESCRIPTION = 1024
NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")  # also an event type as published


def _matches(pattern: str, name: str) -> bool:
    # core.matching.pattern_matches (not imported: matching imports the registry, which
    # imports this module)
    return pattern == "*" or pattern == name or (
        pattern.endswith(".*") and name.startswith(pattern[:-1]))  # fmt: skip


@dataclass(frozen=True, slots=True)
class EventTypeView:
    """One type of a tenant's catalog. ``schema`` is the JSON Schema as canonical JSON
    text (sorted keys, no spaces) or None (any payload); ``deprecated_at_ms`` is when it
    was last marked deprecated (None while it is not)."""

    tenant: str
    name: str
    description: str
    schema: str | None
    deprecated: bool
    deprecated_at_ms: int | None
    created_at_ms: int
    updated_at_ms: int


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


def _refs(node: Any) -> Iterable[str]:
    """Every ``$ref`` / ``$dynamicRef`` string in a schema document."""
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            for key, value in cur.items():
                if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                    yield value
                else:
                    stack.append(value)
        elif isinstance(cur, list):
            stack.extend(cur)


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is a 422, not a line on stderr


_U_ESCAPE = re.compile(r"\\(\\|u([0-9A-Fa-f]{4}))")


def _ecma_to_re2(pattern: str) -> str:
    """ECMA-262's ``\\uXXXX`` escapes (JSON Schema patterns use them) as RE2's
    ``\\x{XXXX}``; an escaped backslash stays as it is."""
    return _U_ESCAPE.sub(lambda m: m[0] if m[2] is None else "\\x{" + m[2] + "}", pattern)


@functools.lru_cache(maxsize=4096)
def _re2(pattern: str) -> Any:
    """``pattern`` compiled by RE2; raises ``re2.error`` for syntax RE2 does not take."""
    return re2.compile(_ecma_to_re2(pattern), _RE2_OPTIONS)


def _re2_reason(exc: Exception) -> str:
    """RE2's own reason for refusing a pattern (``invalid perl operator: (?=``)."""
    reason = exc.args[0] if exc.args else ""
    return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterable[ValidationError]:
    # jsonschema's ``pattern`` with RE2 in place of re.search (same message)
    if validator.is_type(instance, "string") and not _re2(patrn).search(instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, pattern_properties: Mapping[str, Any], instance: Any, schema: Any
) -> Iterable[ValidationError]:
    # jsonschema's ``patternProperties`` with RE2 in place of re.search
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in pattern_properties.items():
        rx = _re2(patrn)
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
    patterns = [_re2(p) for p in schema.get("patternProperties", {})]
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
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf", "dependentSchemas")
_STEPPING_ONE = ("additionalProperties", "items", "contains", "propertyNames",
                 "unevaluatedProperties", "unevaluatedItems")  # fmt: skip
_STEPPING_MANY = ("properties", "patternProperties", "prefixItems")

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


_APPLICATORS = frozenset(_IN_PLACE_ONE + _IN_PLACE_MANY + _STEPPING_ONE + _STEPPING_MANY
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

_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})  # values, not schemas


def _regex_problems(schema: Any, where: str = "") -> Iterable[str]:
    """Where ``schema`` has a pattern RE2 refuses, or ``unevaluatedProperties`` next to
    ``patternProperties`` anywhere: one message each (JSON Pointer locations)."""
    stack = [(schema, where)]
    pattern_props = unevaluated = False
    while stack:
        cur, at = stack.pop()
        if isinstance(cur, dict):
            for key, value in cur.items():
                here = f"{at}/{key.replace('~', '~0').replace('/', '~1')}"
                if key in _DATA_KEYWORDS:
                    continue
                if key == "pattern" and isinstance(value, str):
                    try:
                        _re2(value)
                    except re2.error as exc:
                        yield f"{here}: RE2 does not take this pattern: {_re2_reason(exc)}"
                elif key == "patternProperties" and isinstance(value, dict):
                    pattern_props = True
                    for patrn in value:
                        try:
                            _re2(patrn)
                        except re2.error as exc:
                            yield f"{here}: RE2 does not take {patrn!r}: {_re2_reason(exc)}"
                if key == "unevaluatedProperties":
                    unevaluated = True
                stack.append((value, here))
        elif isinstance(cur, list):
            stack.extend((v, f"{at}/{i}") for i, v in enumerate(cur))
    if pattern_props and unevaluated:
        yield "/: unevaluatedProperties is not supported in a schema with patternProperties"


MAX_IN_PLACE = 1000  # subschemas one payload value may be judged by


def _members(value: Any) -> list[Any]:
    return list(value.values()) if isinstance(value, dict) else (
        value if isinstance(value, list) else [])  # fmt: skip


def _reference_problem(schema: Any) -> str | None:
    """``_reference_loop`` of a schema (an unresolvable reference too); None: usable."""
    if not isinstance(schema, dict):
        return None
    try:
        return _reference_loop(schema)
    except Unresolvable as exc:
        return f"{exc}: does not resolve"


def _reference_loop(schema: dict[str, Any]) -> str | None:
    """Where validating against ``schema`` would go round a loop without stepping into
    the payload (through ``$ref``, ``$dynamicRef``, ``allOf``, ``not``, ``if`` and the
    other in-place applicators back to a subschema already applied to the same value), or
    where one payload value would be judged by more than MAX_IN_PLACE subschemas: one
    message (locations as ``#`` JSON Pointers), or None. Unreachable subschemas do not
    count."""
    where: dict[int, str] = {}  # id(subschema) -> its location
    resolvers: dict[int, Any] = {}  # id(subschema) -> resolver of its $ref
    dynamic: dict[str, list[Any]] = {}  # $dynamicAnchor -> subschemas
    root = RefRegistry().with_resource("", DRAFT202012.create_resource(schema)).resolver()
    stack: list[tuple[Any, str, Any]] = [(schema, "#", root)]
    while stack:
        cur, at, resolver = stack.pop()
        if isinstance(cur, dict):
            if isinstance(cur.get("$id"), str) and at != "#":
                resolver = resolver.in_subresource(DRAFT202012.create_resource(cur))
            where[id(cur)], resolvers[id(cur)] = at, resolver
            if isinstance(cur.get("$dynamicAnchor"), str):
                dynamic.setdefault(cur["$dynamicAnchor"], []).append(cur)
            stack.extend((v, f"{at}/{k.replace('~', '~0').replace('/', '~1')}", resolver)
                         for k, v in cur.items())  # fmt: skip
        elif isinstance(cur, list):
            stack.extend((v, f"{at}/{i}", resolver) for i, v in enumerate(cur))

    known: dict[int, tuple[list[Any], list[Any]]] = {}

    def edges(node: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        """The subschemas ``node`` applies in place, and those it steps down into."""
        if id(node) in known:
            return known[id(node)]
        here: list[Any] = [node.get(k) for k in _IN_PLACE_ONE]
        down: list[Any] = [node.get(k) for k in _STEPPING_ONE]
        for k in _IN_PLACE_MANY:
            here.extend(_members(node.get(k)))
        for k in _STEPPING_MANY:
            down.extend(_members(node.get(k)))
        for k in ("$ref", "$dynamicRef"):
            ref = node.get(k)
            if isinstance(ref, str):
                here.append(resolvers[id(node)].lookup(ref).contents)
                if k == "$dynamicRef":  # any same-named dynamic anchor may be the target
                    here.extend(dynamic.get(ref.partition("#")[2], []))
        found = known[id(node)] = (
            [t for t in here if id(t) in where], [t for t in down if id(t) in where])  # fmt: skip
        return found

    # depth-first over in-place applications from each reachable subschema; a subschema
    # met again while it is on the path is a loop, and ``cost`` counts what it applies
    cost: dict[int, int] = {}
    seen = {id(schema)}
    todo = [schema]
    while todo:
        start = todo.pop()
        path: list[tuple[Any, list[Any]]] = []
        if id(start) not in cost:
            path.append((start, list(edges(start)[0])))
        on_path = {id(start)}
        while path:
            node, pending = path[-1]
            if pending:
                nxt = pending.pop()
                if id(nxt) in on_path:
                    loop = [
                        where[id(n)] for n, _ in path[[id(n) for n, _ in path].index(id(nxt)) :]
                    ]
                    return (f"{loop[0]}: a loop of references that never steps into the payload "
                            f"({' -> '.join([*loop, where[id(nxt)]])})")  # fmt: skip
                if id(nxt) not in cost:
                    path.append((nxt, list(edges(nxt)[0])))
                    on_path.add(id(nxt))
                continue
            path.pop()
            on_path.discard(id(node))
            here, down = edges(node)
            cost[id(node)] = 1 + sum(cost[id(t)] for t in here)
            if cost[id(node)] > MAX_IN_PLACE:
                return (f"{where[id(node)]}: judges one payload value by more than "
                        f"{MAX_IN_PLACE} subschemas")  # fmt: skip
            for t in (*here, *down):
                if id(t) not in seen:
                    seen.add(id(t))
                    todo.append(t)
    return None


def check_schema(schema: Any) -> str:
    """A JSON Schema (Draft 2020-12) as canonical JSON text; 422 (field ``schema``,
    code ``invalid_schema``) when it is not a valid schema (the detail names the failing
    keyword's location), refers to anything but a location in itself, loops without
    stepping into the payload or judges one value by more than MAX_IN_PLACE subschemas
    (``_reference_problem``)."""
    if not isinstance(schema, dict | bool):
        raise Unprocessable("must be a JSON Schema (an object or a boolean)", field="schema",
                            code="invalid_schema")  # fmt: skip
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = pointer(exc.absolute_path) or "/"
        raise Unprocessable(f"not a valid Draft 2020-12 schema at {where}: {exc.message}",
                            field="schema", code="invalid_schema") from None  # fmt: skip
    problem = next(iter(_regex_problems(schema)), None)
    if problem is not None:
        raise Unprocessable(f"not a usable schema at {problem}", field="schema",
                            code="invalid_schema")  # fmt: skip
    if isinstance(schema, dict):
        resolver = RefRegistry().with_resource("", DRAFT202012.create_resource(schema)).resolver()
        for ref in _refs(schema):
            if not ref.startswith("#"):
                raise Unprocessable(f"$ref {ref!r}: only references into this schema (#...)",
                                    field="schema", code="invalid_schema")  # fmt: skip
            try:
                resolver.lookup(ref)
            except Unresolvable:
                raise Unprocessable(f"$ref {ref!r} does not resolve", field="schema",
                                    code="invalid_schema") from None  # fmt: skip
        problem = _reference_problem(schema)
        if problem is not None:
            raise Unprocessable(f"not a usable schema at {problem}", field="schema",
                                code="invalid_schema")  # fmt: skip
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def check_event_type_fields(body: Mapping[str, Any], *, create: bool) -> dict[str, Any]:
    """The fields of an event-type create (``create``) or update body, checked.

    Body members: ``name`` (create only, ``[A-Za-z0-9_.-]{1,128}``), ``description``
    (string, <= 1024 characters), ``schema`` (a Draft 2020-12 JSON Schema or null),
    ``deprecated`` (bool). Returns ``{field: value}`` with ``schema`` as canonical JSON
    text (or None). Raises Unprocessable naming the field (an unknown one too).
    """
    allowed = {"name", "description", "schema", "deprecated"} if create else {
        "description", "schema", "deprecated"}  # fmt: skip
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise Unprocessable("unknown field", field=unknown[0])
    out: dict[str, Any] = {}
    if create:
        if "name" not in body:
            raise Unprocessable("is required", field="name")
        name = body["name"]
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise Unprocessable("must match [A-Za-z0-9_.-]{1,128}", field="name")
        out["name"] = name
    if "description" in body:
        d = body["description"]
        if not isinstance(d, str) or len(d) > MAX_DESCRIPTION:
            raise Unprocessable(f"must be a string of <= {MAX_DESCRIPTION} characters",
                                field="description")  # fmt: skip
        out["description"] = d
    if "schema" in body:
        out["schema"] = None if body["schema"] is None else check_schema(body["schema"])
    if "deprecated" in body:
        if not isinstance(body["deprecated"], bool):
            raise Unprocessable("must be a boolean", field="deprecated")
        out["deprecated"] = body["deprecated"]
    return out


class ValidatorCache:
    """Compiled validators by schema text, the ``capacity`` most recently used kept (a
    schema is parsed and compiled once, not per publish; equal schemas share one)."""

    def __init__(self, capacity: int = 4096):
        self.capacity = capacity
        self._compiled: OrderedDict[str, Any] = OrderedDict()
        self.compiles = 0  # how many schemas were compiled (tests and metrics)

    def get(self, schema: str) -> Any:
        """The validator (``SchemaValidator``) of canonical schema text ``schema``; 422
        ``schema_unusable`` (field ``event_type``) for a schema that loops without
        stepping into the payload (stored before registration refused that)."""
        found = self._compiled.get(schema)
        if found is None:
            loaded = json.loads(schema)
            problem = _reference_problem(loaded)  # kept instead of a validator
            found = SchemaValidator(loaded) if problem is None else problem
            self.compiles += 1
            self._compiled[schema] = found
            if len(self._compiled) > self.capacity:
                self._compiled.popitem(last=False)
        else:
            self._compiled.move_to_end(schema)
        if isinstance(found, str):
            raise Unprocessable(f"the event type's schema is not usable at {found}",
                                field="event_type", code="schema_unusable")  # fmt: skip
        return found


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


def publish_schema(
    types: Mapping[str, EventTypeView] | None, strict: bool, event_type: str
) -> str | None:
    """The schema (canonical JSON text) a payload published as ``event_type`` must
    conform to under a tenant whose catalog is ``types`` (name -> view; None or empty: no
    catalog) and strict flag ``strict``; None: any payload (not catalogued, or no schema).

    Raises Unprocessable ``unknown_event_type`` (field ``event_type``) for an unknown
    type in strict mode; ``validate_payload`` judges the payload.
    """
    view = types.get(event_type) if types else None
    if view is None:
        if strict:
            raise Unprocessable(f"event type {event_type!r} is not in the tenant's catalog "
                                "(strict mode)", field="event_type",
                                code="unknown_event_type")  # fmt: skip
        return None
    return view.schema


def check_subscriptions(patterns: Iterable[str], known: Iterable[str]) -> None:
    """Strict mode: every exact type in ``patterns`` must be a ``known`` type and every
    ``prefix.*`` must match one (``*`` always passes). Raises Unprocessable
    ``unknown_event_type`` (field ``event_types``) naming the first that does not."""
    names = sorted(known)
    for p in patterns:
        if p == "*" or any(_matches(p, n) for n in names):
            continue
        raise Unprocessable(f"event type {p!r} is not in the tenant's catalog (strict mode)",
                            field="event_types", code="unknown_event_type")  # fmt: skip
