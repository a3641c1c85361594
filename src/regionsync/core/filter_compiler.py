"""Payload filters compiled to predicates: closures, one per clause, specialised for the
common operand types. The semantics are core.filters (its reference evaluator is the
oracle the tests compare these predicates with); never uses eval/exec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .filters import NUMBER_TYPES, ORDER_OPS, Predicate, json_equal, validate_filter

__all__ = ["compile_filter"]

_MISSING: Any = object()


def _always(_payload: Any) -> bool:
    return True


def compile_filter(doc: Any) -> Predicate:
    """Validate ``doc`` and build a predicate ``payload -> bool`` from closures.

    ``payload`` is parsed JSON (dict, list, str, int, float, bool, None); the predicate
    never raises on any payload shape. ``None`` or ``{}`` gives a predicate that always
    holds. Raises ``Unprocessable`` if ``doc`` is invalid.
    """
    validate_filter(doc)
    if not doc:
        return _always
    return _c_doc(doc, ())


def _all(preds: list[Predicate]) -> Predicate:
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        a, b = preds

        def both(p: Any) -> bool:
            return a(p) and b(p)

        return both
    ps = tuple(preds)

    def every(p: Any) -> bool:
        for f in ps:
            if not f(p):
                return False
        return True

    return every


def _any(preds: list[Predicate]) -> Predicate:
    if len(preds) == 1:
        return preds[0]
    ps = tuple(preds)

    def some(p: Any) -> bool:
        for f in ps:
            if f(p):
                return True
        return False

    return some


def _negate(f: Predicate) -> Predicate:
    def negated(p: Any) -> bool:
        return not f(p)

    return negated


def _c_doc(doc: dict[str, Any], prefix: tuple[str, ...]) -> Predicate:
    preds: list[Predicate] = []
    for key, cond in doc.items():
        if key == "$and":
            preds.extend(_c_doc(sub, prefix) for sub in cond)
        elif key == "$or":
            preds.append(_any([_c_doc(sub, prefix) for sub in cond]))
        elif key == "$not":
            preds.append(_negate(_c_doc(cond, prefix)))
        elif key.startswith("$"):
            preds.append(_c_op(key, cond, prefix))
        else:
            path = prefix + tuple(key.split("."))
            if type(cond) is dict:
                preds.append(_c_doc(cond, path))
            else:
                preds.append(_c_op("$eq", cond, path))
    return _all(preds)


def _c_op(op: str, x: Any, path: tuple[str, ...]) -> Predicate:
    if op == "$exist":
        found = _c_exists(path)
        return found if x else _negate(found)
    if op == "$neq":
        return _negate(_c_op("$eq", x, path))
    if op == "$nin":
        return _negate(_c_op("$in", x, path))
    return _c_resolve(path, _c_test(op, x))


def _c_test(op: str, x: Any) -> Callable[[Any], bool]:
    """A test of one candidate value, including the "any element of an array" rule.

    The common operand types get one flat closure each (one call per candidate); the
    rest go through ``_c_base`` plus the element loop.
    """
    tx = type(x)
    if op == "$contains":
        return _t_contains(x)
    if op == "$eq" and tx is str:
        return _t_eq_str(x)
    if op == "$eq" and tx in NUMBER_TYPES:
        return _t_eq_num(x)
    if op == "$eq" and (tx is bool or x is None):
        return _t_eq_const(x)
    if op == "$in" and all(type(y) is str for y in x):
        return _t_in_strs(x)
    if op in ORDER_OPS:
        return _t_order(op, x)
    if op in ("$startsWith", "$endsWith"):
        return _t_affix(op, x)
    return _t_any_element(_c_base(op, x))


def _t_contains(x: Any) -> Callable[[Any], bool]:
    if type(x) is str:

        def contains_str(v: Any) -> bool:
            t = type(v)
            return (t is str or t is list) and x in v  # str in list: == on str only

        return contains_str

    def contains(v: Any) -> bool:
        return type(v) is list and any(json_equal(e, x) for e in v)

    return contains


def _t_eq_str(x: str) -> Callable[[Any], bool]:
    def eq_str(v: Any) -> bool:
        t = type(v)
        if t is str:
            return v == x
        return t is list and x in v  # only a str element can equal a str

    return eq_str


def _t_eq_num(x: float) -> Callable[[Any], bool]:
    def eq_num(v: Any) -> bool:
        t = type(v)
        if t is int or t is float:
            return v == x
        if t is list:
            for e in v:
                te = type(e)
                if (te is int or te is float) and e == x:
                    return True
        return False

    return eq_num


def _t_eq_const(x: bool | None) -> Callable[[Any], bool]:
    def eq_const(v: Any) -> bool:
        if v is x:
            return True
        if type(v) is list:
            for e in v:
                if e is x:
                    return True
        return False

    return eq_const


def _t_in_strs(x: list[str]) -> Callable[[Any], bool]:
    strs = frozenset(x)

    def in_strs(v: Any) -> bool:
        t = type(v)
        if t is str:
            return v in strs
        if t is list:
            for e in v:
                if type(e) is str and e in strs:
                    return True
        return False

    return in_strs


def _t_order(op: str, x: Any) -> Callable[[Any], bool]:
    cmp = ORDER_OPS[op]
    want: tuple[type, ...] = (str,) if type(x) is str else NUMBER_TYPES

    def order(v: Any) -> bool:
        t = type(v)
        if t in want:
            return bool(cmp(v, x))
        if t is list:
            for e in v:
                if type(e) in want and cmp(e, x):
                    return True
        return False

    return order


def _t_affix(op: str, x: str) -> Callable[[Any], bool]:
    ends = op == "$endsWith"

    def affix(v: Any) -> bool:
        t = type(v)
        if t is str:
            return v.endswith(x) if ends else v.startswith(x)
        if t is list:
            for e in v:
                if type(e) is str and (e.endswith(x) if ends else e.startswith(x)):
                    return True
        return False

    return affix


def _t_any_element(base: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """``base`` on the value, or on any element of an array value."""

    def test(v: Any) -> bool:
        if base(v):
            return True
        if type(v) is list:
            for e in v:
                if base(e):
                    return True
        return False

    return test


def _c_base(op: str, x: Any) -> Callable[[Any], bool]:
    """One value (no array rule) for the operand types ``_c_test`` does not flatten."""
    if op == "$eq":
        return lambda v: json_equal(v, x)
    if op == "$in":
        strs = frozenset(y for y in x if type(y) is str)
        nums = frozenset(y for y in x if type(y) in NUMBER_TYPES)
        consts = [y for y in x if type(y) is bool or y is None]
        others = [y for y in x if type(y) in (list, dict)]

        def is_in(v: Any) -> bool:
            t = type(v)
            if t is str:
                return v in strs
            if t in NUMBER_TYPES:
                return v in nums
            if t is bool or v is None:
                return any(v is y for y in consts)
            return any(json_equal(v, y) for y in others)

        return is_in
    raise AssertionError(op)


def _candidates(value: Any, segs: tuple[str, ...]) -> list[Any]:
    """Every value at ``segs`` below ``value`` (the slow path through arrays)."""
    cands = [value]
    for seg in segs:
        nxt = []
        for c in cands:
            t = type(c)
            if t is dict:
                if seg in c:
                    nxt.append(c[seg])
            elif t is list:
                for e in c:
                    if type(e) is dict and seg in e:
                        nxt.append(e[seg])
        if not nxt:
            return nxt
        cands = nxt
    return cands


def _c_resolve(path: tuple[str, ...], test: Callable[[Any], bool]) -> Predicate:
    """Predicate: some candidate at ``path`` passes ``test``. Walks dicts directly (paths
    of 1 to 3 keys unrolled) and builds the candidate list only when an array sits on the
    path."""
    if not path:
        return test

    def slow(p: Any) -> bool:
        for c in _candidates(p, path):
            if test(c):
                return True
        return False

    if len(path) == 1:
        (k,) = path

        def at1(p: Any) -> bool:
            if type(p) is dict:
                v = p.get(k, _MISSING)
                return v is not _MISSING and test(v)
            return type(p) is list and slow(p)

        return at1
    if len(path) == 2:
        k0, k1 = path

        def at2(p: Any) -> bool:
            if type(p) is dict:
                v = p.get(k0)
                if type(v) is dict:
                    v = v.get(k1, _MISSING)
                    return v is not _MISSING and test(v)
                if type(v) is not list:
                    return False
            elif type(p) is not list:
                return False
            return slow(p)

        return at2
    if len(path) == 3:
        k0, k1, k2 = path

        def at3(p: Any) -> bool:
            if type(p) is dict:
                v = p.get(k0)
                if type(v) is dict:
                    w = v.get(k1)
                    if type(w) is dict:
                        w = w.get(k2, _MISSING)
                        return w is not _MISSING and test(w)
                    if type(w) is not list:
                        return False
                elif type(v) is not list:
                    return False
            elif type(p) is not list:
                return False
            return slow(p)

        return at3
    n = len(path)

    def at(p: Any) -> bool:
        v = p
        i = 0
        while i < n:
            t = type(v)
            if t is dict:
                v = v.get(path[i], _MISSING)
                if v is _MISSING:
                    return False
            elif t is list:
                return slow(p)
            else:
                return False
            i += 1
        return test(v)

    return at


def _c_exists(path: tuple[str, ...]) -> Predicate:
    if not path:
        return _always
    n = len(path)

    def exists(p: Any) -> bool:
        v = p
        i = 0
        while i < n:
            t = type(v)
            if t is dict:
                v = v.get(path[i], _MISSING)
                if v is _MISSING:
                    return False
            elif t is list:
                return bool(_candidates(v, path[i:]))
            else:
                return False
            i += 1
        return True

    return exists
