"""regionsync-client: the Python SDK of regionsync's HTTP API, with region failover.

    from regionsync_client import Client
    client = Client(regions=["https://eu.example", "https://us.example"], token="...")
    event = client.publish("acme", "order.paid", {"order": 7})
    event["id"]  # evt_...: the webhook-id receivers see

See clients/python/README.md.
"""

from __future__ import annotations

from ._failover import FailoverPolicy
from ._operations import OPERATIONS, Op
from .client import AsyncClient, Client
from .errors import ApiError, RegionsUnavailable, RegionsyncError
from .ulid import new_event_id

__all__ = [
    "OPERATIONS",
    "ApiError",
    "AsyncClient",
    "Client",
    "FailoverPolicy",
    "Op",
    "RegionsUnavailable",
    "RegionsyncError",
    "new_event_id",
]
