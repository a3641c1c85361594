"""Who is changing the registry: the caller of the request being served (issue 14 audit).

The HTTP layer names the caller once it has checked its token (``acting_as``); the write
path stamps that name on the audit section of every registry change made while serving
the request (``current``). A change the node makes by itself (custody, job progress) has
no audit section; one made outside a request (tests, the simulator) is by ``node``.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["NODE", "acting_as", "audit_section", "current"]

NODE = "node"
_who: ContextVar[str] = ContextVar("regionsync_audit_who", default=NODE)


def acting_as(who: str) -> None:
    """Name the caller of the current task (a request) for the changes it makes."""
    _who.set(who)


def current() -> str:
    """The caller named for the current task, or ``node``."""
    return _who.get()


def audit_section(op: str, obj: str, tenant: str = "", detail: str = "") -> dict[str, str]:
    """The ``audit`` record section (core.records) of a change by the current caller:
    ``op`` such as ``endpoint.create``, ``obj`` such as ``endpoint/<id>``, the ``tenant``
    it belongs to (``""``: none) and ``detail`` (field names only, never values)."""
    return {"who": current(), "op": op, "object": obj, "tenant": tenant, "detail": detail}
