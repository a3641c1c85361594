"""What a JSON Schema passes before an event type may carry it: Draft 2020-12 valid,
references only into itself, patterns RE2 takes, and no loops.

A schema that loops back to a subschema without stepping into the payload (``{"$ref":
"#"}``, ``allOf`` to ``#``, a ``$dynamicRef`` cycle) is refused at registration naming the
place, as is one that judges a value by more than MAX_IN_PLACE subschemas (issue 38: they
recursed until Python's stack ran out, a 500 per publish).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import re2
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry as RefRegistry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from ..errors import Unprocessable
from .schema_validator import (
    IN_PLACE_MANY,
    IN_PLACE_ONE,
    STEPPING_MANY,
    STEPPING_ONE,
    pointer,
    re2_pattern,
    re2_reason,
)

__all__ = ["MAX_IN_PLACE", "check_schema", "reference_problem"]


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
                        re2_pattern(value)
                    except re2.error as exc:
                        yield f"{here}: RE2 does not take this pattern: {re2_reason(exc)}"
                elif key == "patternProperties" and isinstance(value, dict):
                    pattern_props = True
                    for patrn in value:
                        try:
                            re2_pattern(patrn)
                        except re2.error as exc:
                            yield f"{here}: RE2 does not take {patrn!r}: {re2_reason(exc)}"
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


def reference_problem(schema: Any) -> str | None:
    """``_reference_loop`` of a schema (an unresolvable reference too); None: usable."""
    if not isinstance(schema, dict):
        return None
    try:
        return _reference_loop(schema)
    except Unresolvable as exc:
        return f"{exc}: does not resolve"


class _Subschemas:
    """The subschemas of a schema by identity: where each is (``where``: a ``#`` JSON
    Pointer), and which subschemas each applies in place or steps down into (``edges``)."""

    def __init__(self, schema: dict[str, Any]):
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
        self.where, self._resolvers, self._dynamic = where, resolvers, dynamic
        self._known: dict[int, tuple[list[Any], list[Any]]] = {}

    def edges(self, node: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        """The subschemas ``node`` applies in place, and those it steps down into."""
        known, where = self._known, self.where
        if id(node) in known:
            return known[id(node)]
        here: list[Any] = [node.get(k) for k in IN_PLACE_ONE]
        down: list[Any] = [node.get(k) for k in STEPPING_ONE]
        for k in IN_PLACE_MANY:
            here.extend(_members(node.get(k)))
        for k in STEPPING_MANY:
            down.extend(_members(node.get(k)))
        for k in ("$ref", "$dynamicRef"):
            ref = node.get(k)
            if isinstance(ref, str):
                here.append(self._resolvers[id(node)].lookup(ref).contents)
                if k == "$dynamicRef":  # any same-named dynamic anchor may be the target
                    here.extend(self._dynamic.get(ref.partition("#")[2], []))
        found = known[id(node)] = (
            [t for t in here if id(t) in where], [t for t in down if id(t) in where])  # fmt: skip
        return found


def _reference_loop(schema: dict[str, Any]) -> str | None:
    """Where validating against ``schema`` would go round a loop without stepping into
    the payload (through ``$ref``, ``$dynamicRef``, ``allOf``, ``not``, ``if`` and the
    other in-place applicators back to a subschema already applied to the same value), or
    where one payload value would be judged by more than MAX_IN_PLACE subschemas: one
    message (locations as ``#`` JSON Pointers), or None. Unreachable subschemas do not
    count."""
    subschemas = _Subschemas(schema)
    where, edges = subschemas.where, subschemas.edges

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
    (``reference_problem``)."""
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
        problem = reference_problem(schema)
        if problem is not None:
            raise Unprocessable(f"not a usable schema at {problem}", field="schema",
                                code="invalid_schema")  # fmt: skip
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
