"""Event-type catalog operations: create, list, read, update and delete a tenant's types.

Checks input (core.event_types: a schema must be a valid Draft 2020-12 schema; a body
with a schema is checked on an offload thread, its cost growing with the schema's size)
and turns each change into registry deltas on the local write path; the catalog's
derived table of types follows every delta (state.Catalog). Never touches events or deliveries.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ..core.event_types import EventTypeView, check_event_type_fields
from ..errors import Conflict
from .audit import audit_section
from .offload import Offload
from .state import Catalog
from .writepath import WritePath

__all__ = ["EventTypeOps"]


class EventTypeOps:
    """A tenant's event-type catalog (``/v1/tenants/{t}/event-types``); raises
    ``regionsync.errors.ClientError`` subclasses: 422 naming the field, 404 (tenant,
    ``event_type``), 409 (the name exists)."""

    def __init__(self, catalog: Catalog, writer: WritePath, offload: Offload):
        self.catalog, self.writer, self.offload = catalog, writer, offload

    async def _checked(self, tenant_id: str, body: Mapping[str, Any], create: bool) -> Any:
        """The body's fields checked: on an offload thread when it carries a schema (the
        one part whose cost grows with its size), else here (a few dict lookups)."""
        if body.get("schema") is None:
            return check_event_type_fields(body, create=create)
        check = functools.partial(check_event_type_fields, create=create)
        return await self.offload.run(tenant_id, check, body)

    def list(self, tenant_id: str) -> list[EventTypeView]:
        """The tenant's types in name order."""
        self.catalog.tenant(tenant_id)
        return self.catalog.registry.event_types(tenant_id)

    def get(self, tenant_id: str, name: str) -> EventTypeView:
        return self.catalog.event_type(tenant_id, name)

    async def create(self, tenant_id: str, body: Mapping[str, Any]) -> EventTypeView:
        """Add a type: body ``{name, description?, schema?, deprecated?}``; 409 if the
        tenant's catalog has it (two regions adding one name concurrently: the fields
        merge per field by LWW, the name once)."""
        fields = await self._checked(tenant_id, body, True)
        name = fields["name"]
        async with self.writer.local_lock():
            self.catalog.tenant(tenant_id)
            if self.catalog.registry.event_type(tenant_id, name) is not None:
                raise Conflict(f"event type {name!r} exists", field="name", code="exists")
            stamp = self.writer.stamp()
            deltas = self.catalog.registry.put_event_type(
                tenant_id, name, fields, stamp.wall_ms, self.writer.actor, stamp, create=True
            )
            note = audit_section("event_type.create", f"event_type/{name}", tenant_id)
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)
            view = self.catalog.event_type(tenant_id, name)
        await durable
        return view

    async def update(self, tenant_id: str, name: str, body: Mapping[str, Any]) -> EventTypeView:
        """Change ``description``, ``schema`` (null: none) or ``deprecated``."""
        fields = await self._checked(tenant_id, body, False)
        if not fields:  # nothing to change: nothing written, nothing audited
            return self.catalog.event_type(tenant_id, name)
        async with self.writer.local_lock():
            self.catalog.event_type(tenant_id, name)
            stamp = self.writer.stamp()
            deltas = self.catalog.registry.put_event_type(
                tenant_id, name, fields, stamp.wall_ms, self.writer.actor, stamp, create=False
            )
            detail = ",".join(sorted(fields))
            note = audit_section("event_type.update", f"event_type/{name}", tenant_id, detail)
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)
            view = self.catalog.event_type(tenant_id, name)
        await durable
        return view

    async def delete(self, tenant_id: str, name: str) -> None:
        """Remove a type (endpoints subscribed to it keep their subscription)."""
        async with self.writer.local_lock():
            self.catalog.event_type(tenant_id, name)
            stamp = self.writer.stamp()
            deltas = self.catalog.registry.delete_event_type(tenant_id, name)
            note = audit_section("event_type.delete", f"event_type/{name}", tenant_id)
            durable = self.writer.commit_local("registry", stamp, deltas, audit=note)
        await durable
