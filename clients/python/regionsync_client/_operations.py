"""Every operation of the regionsync HTTP API, declared once: the clients' methods are
derived from this table (``client.py``), and ``tests/test_sdk_openapi.py`` fails when it and
the node's ``/openapi.json`` disagree (a path, method, query parameter, body or response
type missing on either side).

``retry``: ``always`` when a repeat cannot change the outcome, so the request may be sent
again to another region after any failure (reads, deletes, and publish with its event id
and Idempotency-Key); ``unsent`` when only a request that certainly was not processed may
be sent again (a refused connection, a 429 with Retry-After or a 503).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["OPERATIONS", "Op"]


@dataclass(frozen=True, slots=True)
class Op:
    """One API operation: ``name`` is the clients' method; path parameters are the
    method's positional arguments in path order; ``query`` its keyword arguments (or,
    with ``body``, the JSON body's members are); ``returns`` names the response type
    (``types.py``; None: no JSON body); ``status`` is the success status."""

    name: str
    method: Literal["GET", "POST", "PATCH", "DELETE"]
    path: str
    status: int = 200
    returns: str | None = None
    query: tuple[str, ...] = ()
    body: bool = False
    retry: Literal["always", "unsent"] = "always"
    doc: str = ""


_PAGE = ("limit", "cursor")
_T = "/v1/tenants/{tenant}"
_EP = _T + "/endpoints/{endpoint}"

OPERATIONS: tuple[Op, ...] = (
    # tenants
    Op("create_tenant", "POST", "/v1/tenants", 201, "Tenant", body=True, retry="unsent",
       doc="Create a tenant (members: id, name, ack_policy, publish_rate_per_s, ...)."),
    Op("list_tenants", "GET", "/v1/tenants", returns="TenantPage", query=_PAGE),
    Op("get_tenant", "GET", _T, returns="Tenant"),
    Op("update_tenant", "PATCH", _T, returns="Tenant", body=True, retry="unsent"),
    Op("delete_tenant", "DELETE", _T, 204),
    # endpoints
    Op("create_endpoint", "POST", _T + "/endpoints", 201, "Endpoint", body=True,
       retry="unsent", doc="Create an endpoint (members: url, event_types, filter, ...)."),
    Op("list_endpoints", "GET", _T + "/endpoints", returns="EndpointPage", query=_PAGE),
    Op("get_endpoint", "GET", _EP, returns="Endpoint"),
    Op("update_endpoint", "PATCH", _EP, returns="Endpoint", body=True, retry="unsent"),
    Op("delete_endpoint", "DELETE", _EP, 204),
    Op("test_filter", "POST", _EP + "/test-filter", returns="FilterTest", body=True),
    Op("rotate_secret", "POST", _EP + "/rotate-secret", returns="Endpoint", retry="unsent"),
    Op("list_endpoint_attempts", "GET", _EP + "/attempts", returns="AttemptPage",
       query=("status", "since", "order", *_PAGE)),
    Op("send_test_event", "POST", _EP + "/test", returns="TestEvent", body=True,
       retry="unsent", doc="Send one signed test event now; its outcome (nothing stored)."),
    Op("list_endpoint_deliveries", "GET", _EP + "/deliveries", returns="DeliveryPage",
       query=("status", "since", *_PAGE)),
    Op("recover", "POST", _EP + "/recover", 202, "Job", body=True, retry="unsent"),
    Op("replay_missing", "POST", _EP + "/replay-missing", 202, "Job", body=True,
       retry="unsent"),
    # event types
    Op("create_event_type", "POST", _T + "/event-types", 201, "EventType", body=True,
       retry="unsent"),
    Op("list_event_types", "GET", _T + "/event-types", returns="EventTypePage"),
    Op("get_event_type", "GET", _T + "/event-types/{name}", returns="EventType"),
    Op("update_event_type", "PATCH", _T + "/event-types/{name}", returns="EventType",
       body=True, retry="unsent"),
    Op("delete_event_type", "DELETE", _T + "/event-types/{name}", 204),
    # events (publish: Client.publish adds the event id and the Idempotency-Key)
    Op("publish_event", "POST", _T + "/events", 202, "Accepted", body=True,
       doc="The raw publish; use publish(), which sends an event id (retries stay one event)."),
    Op("list_events", "GET", _T + "/events", returns="EventSummaryPage",
       query=("event_type", "since", "until", "endpoint", "status", *_PAGE)),
    Op("get_event", "GET", _T + "/events/{event}", returns="Event"),
    # deliveries, attempts, jobs
    Op("list_deliveries", "GET", _T + "/deliveries", returns="DeliveryPage",
       query=("status", "endpoint", "since", *_PAGE)),
    Op("get_delivery", "GET", _T + "/deliveries/{delivery}", returns="Delivery"),
    Op("retry_delivery", "POST", _T + "/deliveries/{delivery}/retry", 202, "Delivery",
       retry="unsent"),
    Op("list_attempts", "GET", _T + "/deliveries/{delivery}/attempts", returns="AttemptPage",
       query=("order", *_PAGE)),
    Op("list_jobs", "GET", _T + "/jobs", returns="JobPage", query=_PAGE),
    Op("get_job", "GET", _T + "/jobs/{job}", returns="Job"),
    # sources (inbound: Client.send_inbound, a sender's signed raw body)
    Op("create_source", "POST", "/v1/sources", 201, "Source", body=True, retry="unsent"),
    Op("list_sources", "GET", "/v1/sources", returns="SourcePage", query=("tenant", *_PAGE)),
    Op("get_source", "GET", "/v1/sources/{source}", returns="Source"),
    Op("delete_source", "DELETE", "/v1/sources/{source}", 204),
    Op("inbound", "POST", "/in/{source}", 202, "Accepted",
       doc="A sender's webhook as received (raw body and headers): use send_inbound()."),
    # consumer portal sessions
    Op("create_portal_session", "POST", _T + "/portal-sessions", 201, "PortalSession",
       body=True, retry="unsent", doc="A short-lived portal link for the tenant's consumer."),
    Op("expire_portal_sessions", "POST", _T + "/portal-sessions/expire-all", 204),
    # tokens
    Op("create_token", "POST", "/v1/tokens", 201, "TokenCreated", body=True, retry="unsent"),
    Op("list_tokens", "GET", "/v1/tokens", returns="TokenPage", query=_PAGE),
    Op("revoke_token", "DELETE", "/v1/tokens/{token}", 204),
    Op("whoami", "GET", "/v1/whoami", returns="WhoAmI"),
    Op("list_audit", "GET", "/v1/audit", returns="AuditEntryPage",
       query=("tenant", "since", "cursor", "limit")),
    # cluster and probes
    Op("cluster", "GET", "/v1/cluster", returns="Cluster"),
    Op("cluster_regions", "GET", "/v1/cluster/regions", returns="RegionRowPage"),
    Op("remove_region", "POST", "/v1/cluster/regions/{name}/removal", 201, "RegionRemoval",
       retry="unsent"),
    Op("healthz", "GET", "/healthz", returns="Status"),
    Op("readyz", "GET", "/readyz", returns="Status"),
    Op("metrics", "GET", "/metrics", doc="Prometheus text exposition format (a str)."),
)  # fmt: skip
