"""The registry (tenants, endpoints) as a map of named CRDT states.

Decides what deltas a registry change produces and what the converged state means; never
reads time, never awaits (callers pass ``actor`` and an HLC ``stamp``). Rules: docs/design.md,
"Data model": collections are add-wins OR-Sets, scalar fields LWW registers ordered by
vector clock, then HLC, then actor; usage counters are PN-Counters.

Keys: core.registry_keys; the state and its merge: core.registry_state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from crdt import LWWRegister, ORSet, PNCounter, Timestamp

from .brokers import destination_of
from .custody import CustodyRecord
from .event_types import EventTypeView
from .generations import changed_members, gen_live, gen_of
from .registry_keys import (
    ENDPOINT_FIELDS,
    ID_RE,
    SOURCE_FIELDS,
    USAGE_COUNTERS,
    is_secret_key,
    key_type,
    may_hold_secret,
)
from .registry_state import Deltas, RegistryState
from .registry_views import EndpointView, TenantView
from .removal import ProcessMarker, RemovalRecord, parse_process_marker

__all__ = [
    "ENDPOINT_FIELDS",
    "ID_RE",
    "USAGE_COUNTERS",
    "EndpointView",
    "Registry",
    "changed_members",
    "gen_live",
    "TenantView",
    "is_secret_key",
    "key_type",
    "may_hold_secret",
]


def _removal_of_all(state: ORSet, which: Callable[[Any], bool] | None = None) -> ORSet:
    """The delta removing every element ``state`` holds, or those ``which`` picks
    (observed-remove: empty if there are none)."""
    delta = ORSet.empty()
    for element in state.value():
        if which is None or which(element):
            delta = delta.merge(state.remove(element))
    return delta


class Registry(RegistryState):
    """In-memory registry state: key -> CRDT. Mutators return deltas and change nothing;
    ``apply`` merges deltas (local or remote) and returns the keys whose state changed.
    """

    # -- reads ---------------------------------------------------------------------------

    def tenant_ids(self) -> frozenset[str]:
        return self._get("tenants", ORSet).value()

    def has_tenant(self, tenant_id: str) -> bool:
        """True if the tenant is live (cheaper than ``tenant``: no usage counters)."""
        return tenant_id in self._get("tenants", ORSet)

    def tenant_gen(self, tenant_id: str) -> str | None:
        """The live tenant's generation (its add dots in ``tenants``, as ``actor#n,...``),
        or None. A deleted and re-created id gets new dots, so everything stamped with the
        old generation (events, endpoints, sources) stops belonging to it."""
        dots = self._get("tenants", ORSet).entries.get(tenant_id)
        return gen_of(dots) if dots else None

    def endpoint_gen(self, endpoint_id: str, tenant_id: str) -> str | None:
        """The live endpoint's generation (its add dots in ``t/<tenant>/endpoints``), or
        None; deliveries and attempts record it (see ``tenant_gen``)."""
        if self.endpoint(endpoint_id, tenant_id) is None:
            return None
        dots = self._get(f"t/{tenant_id}/endpoints", ORSet).entries.get(endpoint_id)
        return gen_of(dots) if dots else None

    def ack_policy(self, tenant_id: str) -> str:
        """The tenant's acknowledgement policy: ``local`` or ``one-remote``."""
        return self._get(f"t/{tenant_id}/ack_policy", LWWRegister).value() or "local"

    def publish_rate(self, tenant_id: str) -> float | None:
        """The tenant's publish rate override (events/s per region), or None (default)."""
        v = self._get(f"t/{tenant_id}/publish_rate_per_s", LWWRegister).value()
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    def delivery_cap(self, tenant_id: str) -> int | None:
        """The tenant's cap on attempts in flight per region, or None (node default)."""
        v = self._get(f"t/{tenant_id}/delivery_max_in_flight", LWWRegister).value()
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def tenant(self, tenant_id: str) -> TenantView | None:
        """The live tenant, or None if it was never created or has been removed."""
        if not self.has_tenant(tenant_id):
            return None
        p = f"t/{tenant_id}/"
        return TenantView(
            id=tenant_id,
            name=self._get(p + "name", LWWRegister).value() or "",
            created_at_ms=self._get(p + "created_at", LWWRegister).value() or 0,
            # never below 0: two regions recording one delivery's outcome concurrently
            # (a custody change) each count it, so the sum can undershoot (README)
            usage={c: max(0, self.usage(tenant_id, c)) for c in USAGE_COUNTERS},
            ack_policy=self._get(p + "ack_policy", LWWRegister).value() or "local",
            publish_rate_per_s=self.publish_rate(tenant_id),
            strict_event_types=self.strict_event_types(tenant_id),
            delivery_max_in_flight=self.delivery_cap(tenant_id),
        )

    def strict_event_types(self, tenant_id: str) -> bool:
        """Is the tenant in strict mode (only catalogued event types, core.event_types)?"""
        return self._get(f"t/{tenant_id}/strict_event_types", LWWRegister).value() is True

    # -- event-type catalog --------------------------------------------------------------

    def event_type_names(self, tenant_id: str) -> list[str]:
        """Names in a live tenant's catalog, sorted (``event_type`` tells which are live)."""
        if not self.has_tenant(tenant_id):
            return []
        return sorted(self._get(f"t/{tenant_id}/event_types", ORSet).value())

    def event_type(self, tenant_id: str, name: str) -> EventTypeView | None:
        """A type of a live tenant's catalog, or None (never added, removed, or added
        under an earlier life of the tenant id)."""
        if not self.has_tenant(tenant_id):
            return None
        if name not in self._get(f"t/{tenant_id}/event_types", ORSet):
            return None
        p = f"y/{tenant_id}/{name}/"

        def f(field: str, default: Any = None) -> Any:
            v = self._get(p + field, LWWRegister).value()
            return default if v is None else v

        made_in = f("tenant_gen")
        if isinstance(made_in, str) and not gen_live(made_in, self.tenant_gen(tenant_id)):
            return None
        return EventTypeView(
            tenant=tenant_id,
            name=name,
            description=f("description", ""),
            schema=f("schema"),
            deprecated=bool(f("deprecated", False)),
            deprecated_at_ms=f("deprecated_at"),
            created_at_ms=f("created_at", 0),
            updated_at_ms=f("updated_at", 0),
        )

    def event_types(self, tenant_id: str) -> list[EventTypeView]:
        """The live types of a tenant's catalog, in name order."""
        views = (self.event_type(tenant_id, n) for n in self.event_type_names(tenant_id))
        return [v for v in views if v is not None]

    def put_event_type(
        self,
        tenant_id: str,
        name: str,
        fields: Mapping[str, Any],
        now_ms: int,
        actor: str,
        stamp: Timestamp,
        create: bool,
    ) -> Deltas:
        """Deltas creating (``create``: every field written, the name added) or updating
        a catalog type; ``fields`` from core.event_types.check_event_type_fields. Marking
        it deprecated records ``deprecated_at`` (now) unless it already was."""
        p = f"y/{tenant_id}/{name}/"
        values = {k: v for k, v in fields.items() if k != "name"}
        old = None if create else self.event_type(tenant_id, name)
        if values.get("deprecated") is True and not (old is not None and old.deprecated):
            values["deprecated_at"] = now_ms
        elif values.get("deprecated") is False:
            values["deprecated_at"] = None
        if create:
            values = {"description": "", "schema": None, "deprecated": False,
                      "deprecated_at": None, **values, "created_at": now_ms,
                      "tenant_gen": self.tenant_gen(tenant_id) or ""}  # fmt: skip
        values["updated_at"] = now_ms
        deltas = dict(self._set(p + k, v, actor, stamp) for k, v in values.items())
        if create:
            key = f"t/{tenant_id}/event_types"
            deltas[key] = self._get(key, ORSet).add(name, actor=actor)
        return deltas

    def delete_event_type(self, tenant_id: str, name: str) -> Deltas:
        key = f"t/{tenant_id}/event_types"
        return {key: self._get(key, ORSet).remove(name)}

    def endpoint_ids(self, tenant_id: str) -> list[str]:
        """Ids of the live endpoints of a live tenant, sorted (time-ordered ids)."""
        if not self.has_tenant(tenant_id):
            return []
        return sorted(self._get(f"t/{tenant_id}/endpoints", ORSet).value())

    def endpoint(self, endpoint_id: str, tenant_id: str | None = None) -> EndpointView | None:
        """The live endpoint, or None; with ``tenant_id`` it must also belong to that tenant.
        Views are cached until a change of the endpoint, the tenants or an endpoint set."""
        view = self._views.get(endpoint_id)
        if view is None:
            view = self._endpoint(endpoint_id)
            if view is None:
                return None  # not cached: ids that are not live must not grow the cache
            self._keep_view(endpoint_id, view)
        if tenant_id is not None and view.tenant != tenant_id:
            return None
        return view

    def _endpoint(self, endpoint_id: str) -> EndpointView | None:
        p = f"e/{endpoint_id}/"
        owner = self._get(p + "tenant", LWWRegister).value()
        if not isinstance(owner, str):
            return None
        if not self.has_tenant(owner):
            return None
        if endpoint_id not in self._get(f"t/{owner}/endpoints", ORSet):
            return None
        made_in = self._get(p + "tenant_gen", LWWRegister).value()
        if isinstance(made_in, str) and not gen_live(made_in, self.tenant_gen(owner)):
            return None  # created under an earlier life of the tenant id

        def f(name: str, default: Any = None) -> Any:
            v = self._get(p + name, LWWRegister).value()
            return default if v is None else v

        return EndpointView(
            id=endpoint_id,
            tenant=owner,
            url=f("url", ""),
            event_types=tuple(sorted(self._get(p + "event_types", ORSet).value())),
            filter=f("filter"),
            description=f("description", ""),
            rate_limit_per_s=f("rate_limit_per_s", 50),
            max_in_flight=f("max_in_flight", 16),
            headers=dict(f("headers", {})),
            paused=bool(f("paused", False)),
            disabled=bool(f("disabled", False)),
            secret=f("secret", ""),
            created_at_ms=f("created_at", 0),
            updated_at_ms=f("updated_at", 0),
            failing_since_ms=f("failing_since"),
            secret_previous=f("secret_previous"),
            secret_rotated_at_ms=f("secret_rotated_at"),
            payload_format=f("payload_format", "raw"),
            destination=destination_of(f("secret_destination")),
        )

    def endpoint_owner(self, endpoint_id: str) -> str | None:
        """The tenant an endpoint id was last created for, live or deleted (None: never)."""
        owner = self._get(f"e/{endpoint_id}/tenant", LWWRegister).value()
        return owner if isinstance(owner, str) else None

    def endpoints(self, tenant_id: str) -> list[EndpointView]:
        """Live endpoints of a tenant, in id order."""
        views = (self.endpoint(e, tenant_id) for e in self.endpoint_ids(tenant_id))
        return [v for v in views if v is not None]

    # -- mutators (return deltas, change nothing) -----------------------------------------

    def create_tenant(
        self,
        tenant_id: str,
        name: str,
        now_ms: int,
        actor: str,
        stamp: Timestamp,
        ack_policy: str = "local",
        publish_rate_per_s: float | None = None,
        strict_event_types: bool = False,
        delivery_max_in_flight: int | None = None,
    ) -> Deltas:
        p = f"t/{tenant_id}/"
        deltas = dict(
            [
                ("tenants", self._get("tenants", ORSet).add(tenant_id, actor=actor)),
                self._set(p + "name", name, actor, stamp),
                self._set(p + "created_at", now_ms, actor, stamp),
                self._set(p + "ack_policy", ack_policy, actor, stamp),
            ]
        )
        for name, value in (
            ("publish_rate_per_s", publish_rate_per_s),
            ("delivery_max_in_flight", delivery_max_in_flight),
        ):
            key = p + name
            if value is not None or key in self._states:
                deltas.update([self._set(key, value, actor, stamp)])
        key = p + "strict_event_types"
        if strict_event_types or key in self._states:
            deltas.update([self._set(key, strict_event_types, actor, stamp)])
        return deltas

    def patch_tenant(
        self, tenant_id: str, fields: Mapping[str, Any], actor: str, stamp: Timestamp
    ) -> Deltas:
        """Deltas setting tenant fields (name, ack_policy, publish_rate_per_s,
        strict_event_types), already validated."""
        return dict(self._set(f"t/{tenant_id}/{k}", v, actor, stamp) for k, v in fields.items())

    def delete_tenant(self, tenant_id: str) -> Deltas:
        """Removes the tenant, every endpoint, event type, source and API token (scope
        ``tenant:<id>:...``) it has, so a re-created id starts empty (what is stamped with
        the old generation stays invisible too) and no old token acts on it."""
        deltas: Deltas = {"tenants": self._get("tenants", ORSet).remove(tenant_id)}
        for key in (f"t/{tenant_id}/endpoints", f"t/{tenant_id}/event_types"):
            delta = _removal_of_all(self._get(key, ORSet))
            if key.endswith("endpoints") or delta != ORSet.empty():
                deltas[key] = delta
        owned = {
            "sources": lambda sid: self._get(f"s/{sid}/tenant", LWWRegister).value() == tenant_id,
            "tokens": lambda tid: str(self._get(f"k/{tid}/scope", LWWRegister).value()).startswith(
                f"tenant:{tenant_id}:"
            ),
        }
        for key, which in owned.items():
            delta = _removal_of_all(self._get(key, ORSet), which)
            if delta != ORSet.empty():
                deltas[key] = delta
        return deltas

    def create_endpoint(
        self,
        endpoint_id: str,
        tenant_id: str,
        fields: Mapping[str, Any],
        event_types: Iterable[str],
        now_ms: int,
        actor: str,
        stamp: Timestamp,
    ) -> Deltas:
        """Deltas creating an endpoint; ``fields`` are ENDPOINT_FIELDS values (validated)."""
        p = f"e/{endpoint_id}/"
        deltas = dict(
            self._set(p + name, value, actor, stamp)
            for name, value in {
                **fields,
                "tenant": tenant_id,
                "tenant_gen": self.tenant_gen(tenant_id) or "",
                "created_at": now_ms,
                "updated_at": now_ms,
            }.items()
        )
        # new dots continue from the key's current state: a re-created id must not reuse
        # the dots of its earlier life (they would collide and cancel on merge); the
        # types of that life are removed (a re-created id starts empty, as a tenant does)
        current: ORSet = self._get(p + "event_types", ORSet)
        delta = _removal_of_all(current)
        for t in event_types:
            delta = delta.merge(current.merge(delta).add(t, actor=actor))
        if delta != ORSet.empty():
            deltas[p + "event_types"] = delta
        key = f"t/{tenant_id}/endpoints"
        deltas[key] = self._get(key, ORSet).add(endpoint_id, actor=actor)
        return deltas

    def patch_endpoint(
        self,
        endpoint_id: str,
        fields: Mapping[str, Any],
        add_types: Iterable[str],
        remove_types: Iterable[str],
        now_ms: int,
        actor: str,
        stamp: Timestamp,
    ) -> Deltas:
        """Deltas for a PATCH: scalar fields set, event types added and removed as OR-Set ops.

        ``event_types`` in ``fields`` replaces the whole set (removes what is not listed).
        """
        p = f"e/{endpoint_id}/"
        fields = dict(fields)
        deltas: Deltas = {}
        types: ORSet = self._get(p + "event_types", ORSet)
        delta = ORSet.empty()
        add, remove = set(add_types), set(remove_types)
        if "event_types" in fields:
            wanted = set(fields.pop("event_types"))
            add |= wanted
            remove |= set(types.value()) - wanted
        for t in sorted(remove - add):
            delta = delta.merge(types.remove(t))
        for t in sorted(add):
            step = types.merge(delta).add(t, actor=actor)
            delta = delta.merge(step)
        if delta != ORSet.empty():
            deltas[p + "event_types"] = delta
        for name, value in {**fields, "updated_at": now_ms}.items():
            k, d = self._set(p + name, value, actor, stamp)
            deltas[k] = d
        return deltas

    def delete_endpoint(self, endpoint_id: str, tenant_id: str) -> Deltas:
        """Deltas deleting an endpoint: out of its tenant's set, its event types removed
        (observed-remove: a type added concurrently elsewhere survives, add-wins)."""
        key = f"t/{tenant_id}/endpoints"
        deltas: Deltas = {key: self._get(key, ORSet).remove(endpoint_id)}
        types = _removal_of_all(self._get(f"e/{endpoint_id}/event_types", ORSet))
        if types != ORSet.empty():
            deltas[f"e/{endpoint_id}/event_types"] = types
        return deltas

    def source_ids(self) -> frozenset[str]:
        """Ids in the sources set (``source`` tells which of them are live)."""
        return self._get("sources", ORSet).value()

    def source(self, source_id: str) -> dict[str, Any] | None:
        """The live source's fields (SOURCE_FIELDS plus ``id``), or None."""
        if source_id not in self._get("sources", ORSet):
            return None
        p = f"s/{source_id}/"
        fields = {f: self._get(p + f, LWWRegister).value() for f in SOURCE_FIELDS}
        if not isinstance(fields["tenant"], str) or not self.has_tenant(fields["tenant"]):
            return None
        made_in = fields.pop("tenant_gen")
        if isinstance(made_in, str) and not gen_live(made_in, self.tenant_gen(fields["tenant"])):
            return None  # created under an earlier life of the tenant id
        return {"id": source_id, **fields}

    def create_source(
        self, source_id: str, fields: Mapping[str, Any], now_ms: int, actor: str, stamp: Timestamp
    ) -> Deltas:
        """Deltas creating an inbound source; ``fields`` are SOURCE_FIELDS values."""
        p = f"s/{source_id}/"
        deltas = dict(
            self._set(p + name, value, actor, stamp)
            for name, value in {
                **fields,
                "tenant_gen": self.tenant_gen(fields["tenant"]) or "",
                "created_at": now_ms,
            }.items()
        )
        deltas["sources"] = self._get("sources", ORSet).add(source_id, actor=actor)
        return deltas

    def delete_source(self, source_id: str) -> Deltas:
        return {"sources": self._get("sources", ORSet).remove(source_id)}

    def usage(self, tenant_id: str, counter: str) -> int:
        """One usage counter of a tenant (0 if never moved): its converged value and this
        node's moves not yet recorded (``pending_usage``)."""
        pending = self.pending_usage.get((tenant_id, counter), 0)
        return self._get(f"t/{tenant_id}/usage/{counter}", PNCounter).value() + pending

    def count(self, tenant_id: str, counter: str, n: int, actor: str) -> Deltas:
        """Delta adding ``n`` (may be negative) to a usage counter of a tenant."""
        key = f"t/{tenant_id}/usage/{counter}"
        c: PNCounter = self._get(key, PNCounter)
        if n == 0:
            return {}
        return {key: c.increment(actor, n) if n > 0 else c.decrement(actor, -n)}

    def custody(self) -> dict[str, CustodyRecord]:
        """owner region -> its custody record, for every owner that has a valid one."""
        out: dict[str, CustodyRecord] = {}
        for key in self.kind_keys("c/"):
            rec = CustodyRecord.from_value(self._get(key, LWWRegister).value())
            if rec is not None:
                out[key[2:]] = rec
        return out

    def set_custody(
        self, owner: str, record: CustodyRecord, actor: str, stamp: Timestamp
    ) -> Deltas:
        """Delta writing ``owner``'s custody record (LWW: the later write wins)."""
        return dict([self._set(f"c/{owner}", record.to_value(), actor, stamp)])

    def removals(self) -> dict[str, RemovalRecord]:
        """removed region -> its removal record (core.removal), for every valid one."""
        out: dict[str, RemovalRecord] = {}
        for key in sorted(k for k in self._removal_keys if k.startswith("x/")):
            value = self._get(key, LWWRegister).value()
            if (rec := RemovalRecord.from_value(key[2:], value)) is not None:
                out[key[2:]] = rec
        return out

    def set_removal(self, record: RemovalRecord, actor: str, stamp: Timestamp) -> Deltas:
        """Delta writing ``record.region``'s removal (LWW)."""
        return dict([self._set(f"x/{record.region}", record.to_value(), actor, stamp)])

    def process_retirements(self) -> dict[str, int]:
        """Retired actors of stopped processes (every region's ``p/<region>``) -> the
        record count every region held of them."""
        out: dict[str, int] = {}
        for key in sorted(k for k in self._removal_keys if k.startswith("p/")):
            out.update(parse_process_marker(self._get(key, LWWRegister).value()))
        return out

    def has_removal_keys(self) -> bool:
        return bool(self._removal_keys)

    def removal_states(self) -> tuple[Any, ...]:
        """The removal records' and markers' states, in key order (cheap: a few keys)."""
        return tuple(self.get(k, LWWRegister) for k in sorted(self._removal_keys))

    def process_markers(self) -> dict[str, ProcessMarker]:
        """region -> its ``p/<region>`` marker (core.removal.ProcessMarker)."""
        return {
            key[2:]: ProcessMarker.from_value(self.get(key, LWWRegister).value())
            for key in sorted(k for k in self._removal_keys if k.startswith("p/"))
        }

    def set_process_retirements(
        self, region: str, retired: dict[str, int] | ProcessMarker, actor: str, stamp: Timestamp
    ) -> Deltas:
        """Delta writing ``region``'s retired process actors (LWW; callers keep the union)."""
        marker = retired if isinstance(retired, ProcessMarker) else ProcessMarker(retired)
        return dict([self._set(f"p/{region}", marker.to_value(), actor, stamp)])

    def jobs(self) -> dict[str, dict[str, Any]]:
        """job id -> its fields (a dict), for every recovery job recorded."""
        return {
            k[2:]: v
            for k in self.kind_keys("j/")
            if isinstance(v := self._get(k, LWWRegister).value(), dict)
        }

    def job(self, job_id: str) -> dict[str, Any] | None:
        value = self._get(f"j/{job_id}", LWWRegister).value()
        return value if isinstance(value, dict) else None

    def set_job(self, job_id: str, fields: dict[str, Any], actor: str, stamp: Timestamp) -> Deltas:
        """Delta writing a job's fields (LWW: the later write wins)."""
        return dict([self._set(f"j/{job_id}", fields, actor, stamp)])
