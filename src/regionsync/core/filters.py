"""Payload filters of endpoints: the semantics, validation, a reference evaluator (the
compiled predicate is core.filter_compiler).

Decides whether an event payload (already parsed JSON) matches an endpoint's filter
document; never parses bytes, does I/O, reads time, or uses eval/exec (predicates are
closures). Rules: the operator set of Hookdeck Outpost and Convoy (docs/design.md#field-facts),
MongoDB's reading of dotted paths through arrays, and the semantics written out below.

Filter document (``doc``): a JSON object, or ``null``/``{}`` for "match everything".
Evaluation works on a *candidate set*: the values found at the current path (empty set =
the field is missing). The whole payload is the single starting candidate.

Keys of an object in the filter:
    field key     ``"a"`` or dotted ``"a.b.c"``; dots always split (payload keys that
                  contain a dot or start with ``$`` cannot be addressed). Stepping into
                  key ``k`` maps each candidate: an object yields its ``k`` if present; an
                  array yields ``k`` of each of its object elements (one level, like
                  MongoDB); anything else yields nothing. ``{"a": {"b": c}}`` is exactly
                  ``{"a.b": c}``. The value ``c`` is a condition: a non-empty object is a
                  nested filter applied at that path; any other JSON value means
                  ``{"$eq": c}``.
    ``$and``      non-empty list of filters; all hold (at the current path).
    ``$or``       non-empty list of filters; at least one holds.
    ``$not``      a filter; holds iff it does not hold.
    operators     applied to the candidate set at the current path (below).
All keys of one object must hold (implicit AND, evaluated in document order).

Operators (``x`` is the operand, ``v`` a candidate). A positive operator holds iff some
candidate ``v`` passes, or, when ``v`` is an array, some element of ``v`` passes ("arrays
match if any element matches"):
    ``$eq``       JSON equality, type-strict: ``true`` is not ``1``, ``1 == 1.0``, ``null``
                  equals only ``null``, strings compare by code point (no Unicode
                  normalisation), arrays and objects compare deeply. A whole array can
                  be matched by an array operand.
    ``$gt $gte $lt $lte``  ``x`` is a number or a string; holds only for a candidate of the
                  same kind (numbers: int/float, never bool; strings: code-point order).
                  A type mismatch, ``null``, bool, object or missing field fails.
    ``$in``       ``x`` is a list; ``v`` equals (as ``$eq``) some element of ``x``.
    ``$startsWith $endsWith``  ``x`` is a string; strings only.
    ``$contains`` on a string ``v``: ``x`` is a substring (``x`` a string); on an array
                  ``v``: ``x`` is an element (``$eq``). Array-aware: it does not look
                  inside the elements of an array ``v``.
    ``$exist``    ``x`` is a bool; ``true`` iff the candidate set is non-empty (a field
                  holding ``null`` exists).
Negations are exact complements, so they hold on a missing field (as MongoDB's ``$ne``):
    ``$neq x``  = not ``$eq x`` (on an array: no element, nor the whole, equals ``x``);
    ``$nin xs`` = not ``$in xs``.
Null: ``{"a": null}`` holds only if ``a`` is present and null (or an array holding null);
to ask "absent" use ``{"a": {"$exist": false}}``; ``{"a": {"$neq": null}}`` holds when
``a`` is missing or non-null. ``$regex`` (Outpost) is refused: unbounded matching cost.
Each clause picks its own candidate or element: ``{"nums": {"$gt": 2, "$lt": 4}}`` holds
for ``[1, 5]``, and keys under a path through an array may be met by different elements
(as MongoDB without ``$elemMatch``).

Limits, checked by ``validate_filter`` (422 naming ``filter.<path>``): nesting depth of
objects and arrays <= 8 (the root object is depth 1), <= 256 JSON values in all, strings
and keys <= 1024 characters, numbers finite, ``$and``/``$or`` lists non-empty.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from ..errors import Unprocessable

__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_STRING",
    "NUMBER_TYPES",
    "OPERATORS",
    "ORDER_OPS",
    "Predicate",
    "explain",
    "json_equal",
    "reference_match",
    "validate_filter",
]

MAX_DEPTH = 8
MAX_NODES = 256
MAX_STRING = 1024

Predicate = Callable[[Any], bool]

_LOGICAL = frozenset({"$and", "$or", "$not"})
ORDER_OPS = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}
OPERATORS = frozenset(
    {"$eq", "$neq", "$in", "$nin", "$exist", "$startsWith", "$endsWith", "$contains"}
    | set(ORDER_OPS)
    | _LOGICAL
)
NUMBER_TYPES = (int, float)


def json_equal(a: Any, b: Any) -> bool:
    """Type-strict JSON equality: bool never equals a number, ``1 == 1.0``, deep on
    arrays and objects."""
    ta, tb = type(a), type(b)
    if ta in NUMBER_TYPES and tb in NUMBER_TYPES:
        return bool(a == b)
    if ta is not tb:
        return False
    if ta is list:
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if ta is dict:
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


# -- validation --------------------------------------------------------------------------


class _Budget:
    __slots__ = ("nodes",)

    def __init__(self) -> None:
        self.nodes = 0

    def take(self, path: str) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise Unprocessable(f"filter has more than {MAX_NODES} values", field=path)


def validate_filter(doc: Any) -> None:
    """Check a filter document (parsed JSON); ``None`` means no filter and is valid.

    Raises ``Unprocessable`` (422) with ``field`` naming the offending place as
    ``filter.<path>``, e.g. ``filter.project.key.$gt`` or ``filter.$or[1].action``.
    """
    if doc is None:
        return
    if type(doc) is not dict:
        raise Unprocessable("filter must be a JSON object or null", field="filter")
    _v_doc(doc, "filter", 1, _Budget(), root=True)


def _v_depth(depth: int, path: str) -> None:
    if depth > MAX_DEPTH:
        raise Unprocessable(f"filter nests deeper than {MAX_DEPTH} levels", field=path)


def _v_doc(doc: dict[Any, Any], path: str, depth: int, budget: _Budget, root: bool = False) -> None:
    _v_depth(depth, path)
    budget.take(path)
    if not doc and not root:
        raise Unprocessable(
            'empty condition object; use {"$eq": {}} for an empty object', field=path
        )
    for key, cond in doc.items():
        if type(key) is not str or not key or len(key) > MAX_STRING:
            raise Unprocessable(f"keys must be strings of 1..{MAX_STRING} chars", field=path)
        here = f"{path}.{key}"
        if key in ("$and", "$or"):
            if type(cond) is not list or not cond:
                raise Unprocessable(f"{key} takes a non-empty list of filters", field=here)
            _v_depth(depth + 1, here)
            budget.take(here)
            for i, sub in enumerate(cond):
                where = f"{here}[{i}]"
                if type(sub) is not dict or not sub:
                    raise Unprocessable("must be a non-empty filter object", field=where)
                _v_doc(sub, where, depth + 2, budget)
        elif key == "$not":
            if type(cond) is not dict or not cond:
                raise Unprocessable("$not takes a non-empty filter object", field=here)
            _v_doc(cond, here, depth + 1, budget)
        elif key.startswith("$"):
            _v_operator(key, cond, here, depth, budget)
        else:
            segments = key.split(".")
            if any(not s or s.startswith("$") for s in segments):
                raise Unprocessable(
                    "field paths are dot-separated non-empty names not starting with $",
                    field=here,
                )
            if type(cond) is dict:
                _v_doc(cond, here, depth + 1, budget)
            else:
                _v_value(cond, here, depth, budget)


def _v_operator(op: str, x: Any, path: str, depth: int, budget: _Budget) -> None:
    if op == "$regex":
        raise Unprocessable(
            "$regex is not supported (unbounded matching cost)",
            field=path,
            code="unsupported_filter",
        )
    if op not in OPERATORS:
        raise Unprocessable(f"unknown operator {op}", field=path)
    if op in ORDER_OPS:
        if not (type(x) in NUMBER_TYPES or type(x) is str):
            raise Unprocessable(f"{op} takes a number or a string", field=path)
    elif op in ("$in", "$nin"):
        if type(x) is not list:
            raise Unprocessable(f"{op} takes a list", field=path)
    elif op == "$exist":
        if type(x) is not bool:
            raise Unprocessable("$exist takes true or false", field=path)
    elif op in ("$startsWith", "$endsWith"):
        if type(x) is not str:
            raise Unprocessable(f"{op} takes a string", field=path)
    _v_value(x, path, depth, budget)


_INT_RANGE = (-(2**63), 2**64 - 1)  # what msgpack, and so the registry, can store


def _v_value(x: Any, path: str, depth: int, budget: _Budget) -> None:
    """A JSON value used as an operand."""
    budget.take(path)
    t = type(x)
    if x is None or t is bool:
        return
    if t is int:
        if not _INT_RANGE[0] <= x <= _INT_RANGE[1]:
            raise Unprocessable(
                f"integers are limited to [{_INT_RANGE[0]}, {_INT_RANGE[1]}]", field=path
            )
        return
    if t is float:
        if not math.isfinite(x):
            raise Unprocessable("numbers must be finite", field=path)
        return
    if t is str:
        if len(x) > MAX_STRING:
            raise Unprocessable(f"strings are limited to {MAX_STRING} chars", field=path)
        return
    if t is list:
        _v_depth(depth + 1, path)
        for i, e in enumerate(x):
            _v_value(e, f"{path}[{i}]", depth + 1, budget)
        return
    if t is dict:
        _v_depth(depth + 1, path)
        for k, e in x.items():
            if type(k) is not str or len(k) > MAX_STRING:
                raise Unprocessable(f"keys must be strings of <= {MAX_STRING} chars", field=path)
            _v_value(e, f"{path}.{k}", depth + 1, budget)
        return
    raise Unprocessable(f"not a JSON value ({t.__name__})", field=path)


# -- reference evaluator (the semantics, written the slow and obvious way) ----------------


def reference_match(doc: Any, payload: Any) -> bool:
    """True if ``payload`` matches ``doc`` (a *valid* filter or None); slow and obvious.

    The oracle for tests of ``filter_compiler.compile_filter``; do not call it per event.
    """
    return explain(doc, payload)[1] is None if doc else True


def explain(doc: Any, payload: Any) -> tuple[bool, str | None]:
    """For the test-filter API: ``(matched, failed_clause)``.

    ``failed_clause`` is None on a match, else the filter path and operator of the first
    clause (document order) that failed, e.g. ``project.key.$eq``, ``priority.$gte``,
    ``$or`` (no alternative held), ``$and[1].action.$in``, ``labels.$not``. Raises
    ``Unprocessable`` if ``doc`` is not a valid filter.
    """
    validate_filter(doc)
    if not doc:
        return True, None
    failed = _ref_doc(doc, [payload], "")
    return failed is None, failed


def _ref_doc(doc: dict[str, Any], cands: list[Any], where: str) -> str | None:
    for key, cond in doc.items():
        here = where + key
        if key == "$and":
            for i, sub in enumerate(cond):
                failed = _ref_doc(sub, cands, f"{here}[{i}].")
                if failed is not None:
                    return failed
        elif key == "$or":
            if all(_ref_doc(sub, cands, f"{here}[{i}].") is not None for i, sub in enumerate(cond)):
                return here
        elif key == "$not":
            if _ref_doc(cond, cands, here + ".") is None:
                return here
        elif key.startswith("$"):
            if not _ref_op(key, cond, cands):
                return here
        else:
            sub = cands
            for seg in key.split("."):
                sub = _ref_step(sub, seg)
            if type(cond) is dict:
                failed = _ref_doc(cond, sub, here + ".")
                if failed is not None:
                    return failed
            elif not _ref_op("$eq", cond, sub):
                return here + ".$eq"
    return None


def _ref_step(cands: list[Any], seg: str) -> list[Any]:
    out = []
    for c in cands:
        if isinstance(c, dict):
            if seg in c:
                out.append(c[seg])
        elif isinstance(c, list):
            out.extend(e[seg] for e in c if isinstance(e, dict) and seg in e)
    return out


def _ref_op(op: str, x: Any, cands: list[Any]) -> bool:
    if op == "$exist":
        return bool(cands) == x
    if op == "$neq":
        return not _ref_op("$eq", x, cands)
    if op == "$nin":
        return not _ref_op("$in", x, cands)
    for c in cands:
        if _ref_test(op, x, c):
            return True
        if op != "$contains" and isinstance(c, list):
            if any(_ref_test(op, x, e) for e in c):
                return True
    return False


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _ref_test(op: str, x: Any, v: Any) -> bool:
    if op == "$eq":
        return json_equal(v, x)
    if op == "$in":
        return any(json_equal(v, y) for y in x)
    if op in ORDER_OPS:
        if (_is_number(v) and _is_number(x)) or (isinstance(v, str) and isinstance(x, str)):
            return bool(ORDER_OPS[op](v, x))
        return False
    if op == "$startsWith":
        return isinstance(v, str) and v.startswith(x)
    if op == "$endsWith":
        return isinstance(v, str) and v.endswith(x)
    if op == "$contains":
        if isinstance(v, str):
            return isinstance(x, str) and x in v
        if isinstance(v, list):
            return any(json_equal(e, x) for e in v)
        return False
    raise AssertionError(op)
