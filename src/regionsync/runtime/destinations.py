"""The destination guard's one lookup: a URL host judged over the ``Resolver`` port.

The decisions are ``core.sending``'s; this adds the resolver call, made only for a name
(an address literal is judged by the address it denotes). The Sender adapters call it
for every new connection, endpoint registration for every URL it accepts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from ..core.sending import ResolutionFailed, literal_destination, resolved_destination
from ..core.urlguard import IPAddress, Network
from .ports import Resolver

__all__ = ["check_destination"]


async def check_destination(
    resolver: Resolver,
    allow: Sequence[Network],
    host: str,
    port: int,
    trace: Callable[[str], Awaitable[None]] | None = None,
) -> IPAddress:
    """The address an attempt to ``host``:``port`` may connect to. Raises
    ``DestinationRefused`` (final) if the host or any address it resolves to is not
    allowed, ``ResolutionFailed`` (retryable) if the name does not resolve. ``trace`` gets
    ``guard.resolve.started`` and ``guard.resolve.complete`` around a lookup."""
    literal = literal_destination(host, allow)
    if literal is not None:
        return literal
    if trace is not None:
        await trace("guard.resolve.started")
    try:
        found = await resolver.resolve(host, port)
    except (OSError, UnicodeError) as exc:
        raise ResolutionFailed(f"cannot resolve {host!r}: {exc}") from exc
    if trace is not None:
        await trace("guard.resolve.complete")
    return resolved_destination(host, found, allow)
