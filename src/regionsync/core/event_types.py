"""Event-type catalogs: definitions, their checks, and payloads checked against schemas.

Decides whether an event-type definition is acceptable, whether a payload conforms to its
type's JSON Schema, and whether a tenant in strict mode may publish a type or subscribe
to a pattern; never reads time, never awaits, never fetches a schema. Rules: JSON Schema
Draft 2020-12 through the ``jsonschema`` package (``format`` is an annotation, as the
draft's default vocabulary says; only local ``$ref`` such as ``#/$defs/x``); error
locations are JSON Pointers (RFC 6901) into the published payload.

JSON Schema itself: core.schema_validator judges payloads, core.schema_checks what a
schema passes at registration.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import Unprocessable
from .schema_checks import MAX_IN_PLACE, check_schema, reference_problem
from .schema_validator import (
    MAX_NESTING,
    SchemaValidator,
    SchemaViolation,
    pointer,
    validate_payload,
)

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
            problem = reference_problem(loaded)  # kept instead of a validator
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
