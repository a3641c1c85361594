"""Registry operations: tenants, endpoints and sources as the API changes them.

Validates input, checks delivery destinations (core.urlguard, through the Resolver), and
turns each change into registry deltas committed on the local write path; the catalog's
subscription index follows every delta. Never touches deliveries, events or the log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import Settings
from ..core.brokers import check_destination_body
from ..core.event_types import check_subscriptions
from ..core.filters import explain
from ..core.registry import EndpointView, TenantView
from ..core.sending import DestinationRefused, ResolutionFailed
from ..core.signing import make_secret
from ..core.sources import check_source_fields
from ..core.urlguard import parse_host_literal, parse_networks, validate_url
from ..core.validate import (
    check_endpoint_fields,
    check_new_tenant,
    check_tenant_fields,
    endpoint_defaults,
)
from ..errors import Conflict, Unprocessable
from .audit import audit_section
from .destinations import check_destination
from .offload import Offload
from .ports import IdSource, Resolver, Rng
from .state import Catalog, DeliveryQueue
from .writepath import WritePath

__all__ = ["RegistryOps"]

BROKER_DESTINATIONS = "broker-destinations"  # core.capabilities: e/<id>/secret_destination


class RegistryOps:
    """The registry's write operations; raise ``regionsync.errors.ClientError``
    subclasses for bad input, missing objects (404) and conflicts (409)."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        writer: WritePath,
        queue: DeliveryQueue,
        *,
        rng: Rng,
        ids: IdSource,
        resolver: Resolver,
        offload: Offload,
    ):
        self.catalog, self.writer, self.queue = catalog, writer, queue
        self.rng, self.ids, self.resolver = rng, ids, resolver
        self.offload = offload  # runs test-filter
        self.allow_networks = parse_networks(settings.delivery.allow_private_networks)

    # -- tenants -------------------------------------------------------------------------

    async def create_tenant(
        self,
        tenant_id: str | None,
        name: Any,
        ack_policy: Any = "local",
        publish_rate_per_s: Any = None,
        strict_event_types: Any = False,
        delivery_max_in_flight: Any = None,
    ) -> TenantView:
        """Create a tenant; ``ack_policy`` is ``local`` or ``one-remote`` (see publish);
        ``publish_rate_per_s`` (events/s per region, 0.01..1e6, None: the node default
        ``ingest.tenant_rate_per_s``) limits its publish API; ``strict_event_types``
        (bool) allows only catalogued event types; ``delivery_max_in_flight``
        (1..10000, None: the node default ``delivery.tenant_max_in_flight``) caps its
        attempts in flight per region; 422 naming the field."""
        rate = publish_rate_per_s
        cap = check_new_tenant(
            tenant_id, name, ack_policy, rate, strict_event_types, delivery_max_in_flight
        )
        async with self.writer.local_lock():
            tid = tenant_id or self.ids.new("ten")
            if self.catalog.registry.tenant(tid) is not None:
                raise Conflict(f"tenant {tid!r} exists", field="id", code="exists")
            stamp = self.writer.stamp()
            deltas = self.catalog.registry.create_tenant(
                tid, name, stamp.wall_ms, self.writer.actor, stamp, ack_policy, rate,
                strict_event_types, cap,
            )  # fmt: skip
            note = audit_section("tenant.create", f"tenant/{tid}", tid)
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)
            view = self.catalog.tenant(tid)
        await durable
        return view

    async def patch_tenant(self, tenant_id: str, fields: Mapping[str, Any]) -> TenantView:
        """Set ``name``, ``ack_policy``, ``publish_rate_per_s`` (null: node default) or
        ``strict_event_types`` of a tenant (the caller checks who may set which); 422
        naming the field. Turning strict mode on leaves existing subscriptions as they are."""
        check_tenant_fields(fields)
        if not fields:  # nothing to change: nothing written, nothing audited
            return self.catalog.tenant(tenant_id)
        async with self.writer.local_lock():
            self.catalog.tenant(tenant_id)
            stamp = self.writer.stamp()
            deltas = self.catalog.registry.patch_tenant(tenant_id, fields, self.writer.actor, stamp)
            note = audit_section(
                "tenant.update", f"tenant/{tenant_id}", tenant_id, ",".join(fields)
            )
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)
            view = self.catalog.tenant(tenant_id)
        await durable
        return view

    def _check_strict(self, tenant_id: str, patterns: list[str]) -> None:
        """Strict mode: every pattern names or matches a catalogued type (422 otherwise)."""
        if patterns and self.catalog.registry.strict_event_types(tenant_id):
            check_subscriptions(patterns, self.catalog.registry.event_type_names(tenant_id))

    async def delete_tenant(self, tenant_id: str) -> None:
        async with self.writer.local_lock():
            self.catalog.tenant(tenant_id)
            stamp = self.writer.stamp()
            durable = self.writer.commit_local(
                "registry", stamp, self.catalog.registry.delete_tenant(tenant_id),
                audit=audit_section("tenant.delete", f"tenant/{tenant_id}", tenant_id),
            )  # fmt: skip

        await durable

    # -- endpoints -----------------------------------------------------------------------

    async def _check_destination(self, url: str) -> None:
        """422 if ``url``'s host is or resolves to an address deliveries may not reach."""
        host, port = validate_url(url)
        await self._check_address(host, port, "url")

    async def _check_address(self, host: str, port: int, field: str) -> None:
        try:
            await check_destination(self.resolver, self.allow_networks, host, port)
        except ResolutionFailed as exc:
            raise Unprocessable(str(exc), field=field, code="invalid_url") from None
        except DestinationRefused as exc:
            raise Unprocessable(str(exc), field=field, code="forbidden_address") from None
        literal = parse_host_literal(host)
        if literal is not None and literal.version == 4 and str(literal) != host:
            # octal, hex, integer and short forms: httpx will not send to them
            raise Unprocessable(f"write the address as {literal}", field=field, code="invalid_url")

    async def _destination(
        self, body: Mapping[str, Any], old: EndpointView | None
    ) -> dict[str, Any]:
        """The registry fields a body's ``destination`` (and ``url``) set, judged: a
        broker's ``url`` (shown without password) and ``secret_destination``; 422 naming
        the member, 409 while a region lacks the broker-destinations capability.
        ``old``: the endpoint a PATCH changes (None: a create)."""
        dest = check_destination_body(body.get("destination"))
        current = None if old is None else old.destination
        if "destination" not in body and (current is None or "url" not in body):
            return {}
        if "destination" not in body:
            raise Unprocessable(f"a {current.type} endpoint's url is its destination.url: "
                                "change destination", field="url")  # fmt: skip
        if dest is None and current is None:
            return {}  # http stays http
        if dest is not None and "url" in body:
            raise Unprocessable(f"leave url out: a {dest.type} endpoint delivers to "
                                "destination.url", field="url")  # fmt: skip
        if dest is None and "url" not in body:
            raise Unprocessable("an http destination needs the endpoint's url", field="url")
        if not self.writer.capabilities.enabled(BROKER_DESTINATIONS):
            raise Conflict(f"a region does not support {BROKER_DESTINATIONS} yet (upgrade it "
                           "first)", field="destination", code="capability_missing")  # fmt: skip
        if dest is None:
            return {"secret_destination": None}
        await self._check_address(*dest.host_port, "destination.url")
        return {"url": dest.public_url(), "secret_destination": dest.value()}

    async def create_endpoint(self, tenant_id: str, body: Mapping[str, Any]) -> EndpointView:
        """Create an endpoint from the members of an API body (docs/api.md; which members
        it may have is the request model's check, adapters/routes/bodies.py); values are
        judged here (core.validate.check_endpoint_fields) and the ``url``'s destination.

        Endpoint ids are generated (ULIDs, ``ep_...``): they are global registry keys
        (``e/<id>/...``), so an id a caller chose could be chosen by another tenant in
        another region at the same time, and the two endpoints would merge field by field.
        """
        broker = await self._destination(body, None)
        fields = check_endpoint_fields({k: v for k, v in body.items() if k != "destination"})
        if not broker:
            if "url" not in fields:
                raise Unprocessable("is required", field="url")
            await self._check_destination(fields["url"])
        fields.update(broker)
        event_types = fields.pop("event_types", None) or []
        fields.setdefault("secret", make_secret(self.rng.randbytes(32)))
        async with self.writer.local_lock():
            self.catalog.tenant(tenant_id)
            self._check_strict(tenant_id, list(event_types))
            eid = self.ids.new("ep")
            stamp = self.writer.stamp()
            deltas = self.catalog.registry.create_endpoint(
                eid, tenant_id, {**endpoint_defaults(), **fields}, event_types, stamp.wall_ms,
                self.writer.actor, stamp,
            )  # fmt: skip
            note = audit_section("endpoint.create", f"endpoint/{eid}", tenant_id)
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)
            view = self.catalog.endpoint(tenant_id, eid)
        await durable
        return view

    def endpoints(self, tenant_id: str) -> list[EndpointView]:
        self.catalog.tenant(tenant_id)
        return self.catalog.registry.endpoints(tenant_id)

    async def patch_endpoint(
        self, tenant_id: str, endpoint_id: str, body: Mapping[str, Any]
    ) -> EndpointView:
        """Change fields; ``event_types_add``/``event_types_remove`` are OR-Set operations.

        ``paused``: manual pause/resume; ``disabled: false`` re-enables a disabled
        endpoint. Resuming, re-enabling or a new ``url`` resets the failure counter (and
        ``failing_since``, replicated). A new ``secret``
        (or ``null`` for a generated one) rotates: the old one keeps signing for
        ``delivery.secret_overlap_s``.
        """
        if not body:  # nothing to change: nothing written, nothing audited
            return self.catalog.endpoint(tenant_id, endpoint_id)
        if "secret" in body and body["secret"] is None:
            body = {**body, "secret": make_secret(self.rng.randbytes(32))}
        broker = await self._destination(body, self.catalog.endpoint(tenant_id, endpoint_id))
        fields = check_endpoint_fields({k: v for k, v in body.items() if k != "destination"})
        if "url" in fields and "url" not in broker:
            await self._check_destination(fields["url"])
        fields.update(broker)
        add = fields.pop("event_types_add", [])
        remove = fields.pop("event_types_remove", [])
        async with self.writer.local_lock():
            old = self.catalog.endpoint(tenant_id, endpoint_id)
            self._check_strict(tenant_id, [*fields.get("event_types", []), *add])
            stamp = self.writer.stamp()
            if fields.get("paused") is False or fields.get("disabled") is False:
                fields["failing_since"] = None  # resume / re-enable resets the counter
                self.queue.health.pop(endpoint_id, None)
            if fields.get("disabled") is True:
                fields["failing_since"] = None
            if "url" in fields and fields["url"] != old.url:
                # a new destination starts with a clean health record; other regions
                # reset theirs when the new url reaches them (DeliveryWorker)
                fields["failing_since"] = None
                self.queue.health.pop(endpoint_id, None)
            if "secret" in fields and fields["secret"] != old.secret:
                fields["secret_previous"] = old.secret
                fields["secret_rotated_at"] = stamp.wall_ms
            deltas = self.catalog.registry.patch_endpoint(
                endpoint_id, fields, add, remove, stamp.wall_ms, self.writer.actor, stamp
            )
            names = sorted(set(body) - {"secret"} | ({"secret"} if "secret" in fields else set()))
            op = "endpoint.rotate_secret" if names == ["secret"] else "endpoint.update"
            note = audit_section(op, f"endpoint/{endpoint_id}", tenant_id, ",".join(names))
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)
            view = self.catalog.endpoint(tenant_id, endpoint_id)
        await durable
        return view

    async def delete_endpoint(self, tenant_id: str, endpoint_id: str) -> None:
        async with self.writer.local_lock():
            self.catalog.endpoint(tenant_id, endpoint_id)
            stamp = self.writer.stamp()
            deltas = self.catalog.registry.delete_endpoint(endpoint_id, tenant_id)
            note = audit_section("endpoint.delete", f"endpoint/{endpoint_id}", tenant_id)
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)

        await durable

    async def test_filter(self, tenant_id: str, endpoint_id: str, payload: Any) -> dict[str, Any]:
        """Would ``payload`` pass the endpoint's filter? ``{matches, failed_clause}``
        (worked out on an offload thread: up to seconds for a 256 KB sample)."""
        view = self.catalog.endpoint(tenant_id, endpoint_id)
        matched, failed = await self.offload.run(tenant_id, explain, view.filter, payload)
        return {"matches": matched, "failed_clause": failed}

    # -- sources -------------------------------------------------------------------------

    async def create_source(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Register an inbound source (``POST /v1/sources``); returns its fields.

        The id is generated (an unguessable ULID): it is the public ``/in/{source}`` URL,
        global across tenants (issue 14: ids that must be global are generated by the
        server; the request model refuses a body naming one).
        """
        fields = check_source_fields(body)
        async with self.writer.local_lock():
            self.catalog.tenant(fields["tenant"])
            sid = self.ids.new("src")
            stamp = self.writer.stamp()
            deltas = self.catalog.registry.create_source(
                sid, fields, stamp.wall_ms, self.writer.actor, stamp
            )
            note = audit_section("source.create", f"source/{sid}", fields["tenant"])
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)
            fields = self.catalog.source(sid)
        await durable
        return fields

    async def delete_source(self, source_id: str) -> None:
        async with self.writer.local_lock():
            tenant = self.catalog.source(source_id)["tenant"]
            stamp = self.writer.stamp()
            durable = self.writer.commit_local(
                "registry", stamp, self.catalog.registry.delete_source(source_id),
                audit=audit_section("source.delete", f"source/{source_id}", tenant),
            )  # fmt: skip
        await durable
