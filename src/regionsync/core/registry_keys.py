"""The registry's key layout: which CRDT lives under which key (core.registry holds the
states and decides their changes).

Keys (``/`` never occurs inside an id):
    tenants                     ORSet of tenant ids
    t/<tenant>/name|created_at  LWWRegister (also ack_policy, publish_rate_per_s,
                                delivery_max_in_flight)
    t/<tenant>/endpoints        ORSet of endpoint ids
    t/<tenant>/event_types      ORSet of the names in the tenant's event-type catalog
    t/<tenant>/strict_event_types  LWWRegister: bool, strict mode (core.event_types)
    y/<tenant>/<type>/<field>   LWWRegister (description, schema, ... see EVENT_TYPE_FIELDS)
    t/<tenant>/usage/<counter>  PNCounter
    e/<endpoint>/<field>        LWWRegister (tenant, url, description, ... see ENDPOINT_FIELDS)
    e/<endpoint>/event_types    ORSet of event types
    c/<region>                  LWWRegister: custody of that region's deliveries (core.custody)
    x/<region>                  LWWRegister: that region's removal for good (core.removal;
                                written only with the region-removal capability)
    p/<region>                  LWWRegister: actors of that region's stopped processes, retired
                                (core.removal; written only with region-removal)
    j/<job>                     LWWRegister: a recovery job and its progress (runtime/recovery.py)
    tokens                      ORSet of API token ids (core.tokens; removal = revocation)
    k/<token>/<field>           LWWRegister (hash, scope, name, ... see core.tokens.TOKEN_FIELDS)
    pk/<region>/secret          LWWRegister: hex of the region's portal key (core.portal;
                                written only with portal-sessions)
    pn/<tenant>                 LWWRegister: ms; the tenant's portal sessions made before it
                                are refused (expire-all; written only with portal-sessions)
"""

from __future__ import annotations

import re

from crdt import LWWRegister, ORSet, PNCounter

from .event_types import EVENT_TYPE_FIELDS

ID_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
USAGE_COUNTERS = ("events_published", "deliveries_succeeded", "deliveries_failed", "backlog")
ENDPOINT_FIELDS = (
    "tenant",
    "url",
    "filter",
    "description",
    "rate_limit_per_s",
    "max_in_flight",
    "headers",
    "paused",
    "disabled",
    "secret",
    "created_at",
    "updated_at",
    "failing_since",
    "secret_previous",
    "secret_rotated_at",
    "tenant_gen",
    "payload_format",
    # a broker destination (core.brokers; its URL may hold credentials: sealed at rest,
    # hence the name); written only with the broker-destinations capability
    "secret_destination",
)
SOURCE_FIELDS = (
    "tenant",
    "kind",
    "secret",
    "priority",
    "ack_policy",
    "header",
    "algorithm",
    "encoding",
    "prefix",
    "event_type_from",
    "id_from",
    "default_event_type",
    "created_at",
    "tenant_gen",
)
_ID = r"[A-Za-z0-9_.\-]{1,64}"
_TYPE = r"[A-Za-z0-9_.\-]{1,128}"
_KEY_TYPES: list[tuple[re.Pattern[str], type]] = [
    (re.compile(r"tenants"), ORSet),
    (
        re.compile(
            rf"t/{_ID}/(name|created_at|ack_policy|publish_rate_per_s|strict_event_types"
            r"|delivery_max_in_flight)"
        ),
        LWWRegister,
    ),
    (re.compile(rf"t/{_ID}/(endpoints|event_types)"), ORSet),
    (re.compile(rf"y/{_ID}/{_TYPE}/({'|'.join(EVENT_TYPE_FIELDS)})"), LWWRegister),
    (re.compile(rf"t/{_ID}/usage/({'|'.join(USAGE_COUNTERS)})"), PNCounter),
    (re.compile(rf"e/{_ID}/({'|'.join(ENDPOINT_FIELDS)})"), LWWRegister),
    (re.compile(rf"e/{_ID}/event_types"), ORSet),
    (re.compile(r"sources"), ORSet),
    (re.compile(rf"s/{_ID}/({'|'.join(SOURCE_FIELDS)})"), LWWRegister),
    (re.compile(r"c/[a-z0-9][a-z0-9\-]{0,62}"), LWWRegister),
    (re.compile(r"x/[a-z0-9][a-z0-9\-]{0,62}"), LWWRegister),
    (re.compile(r"p/[a-z0-9][a-z0-9\-]{0,62}"), LWWRegister),
    (re.compile(rf"j/{_ID}"), LWWRegister),
    (re.compile(r"tokens"), ORSet),
    (re.compile(rf"k/{_ID}/(hash|scope|name|expires_at|created_at|created_by)"), LWWRegister),
    (re.compile(r"pk/[a-z0-9][a-z0-9\-]{0,62}/secret"), LWWRegister),
    (re.compile(rf"pn/{_ID}"), LWWRegister),
]


# Key kinds added after release 0.1.0, each with the feature (core.capabilities.FEATURES)
# that gates it: a node writes such a key only once the cluster's effective feature set
# holds the feature, and a reader that does not read it refuses the record. Add the
# pattern to _KEY_TYPES too. Every kind not listed is the baseline's ("registry-keys").
KEY_FEATURES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"x/[a-z0-9][a-z0-9\-]{0,62}"), "region-removal"),
    (re.compile(r"p/[a-z0-9][a-z0-9\-]{0,62}"), "region-removal"),
    (re.compile(rf"e/{_ID}/secret_destination"), "broker-destinations"),
    (re.compile(r"pk/[a-z0-9][a-z0-9\-]{0,62}/secret"), "portal-sessions"),
    (re.compile(rf"pn/{_ID}"), "portal-sessions"),
]


def key_feature(key: str) -> str:
    """The feature a registry key kind needs (``registry-keys``: the baseline's)."""
    for pattern, feature in KEY_FEATURES:
        if pattern.fullmatch(key):
            return feature
    return "registry-keys"


_SECRET_KEY = re.compile(
    rf"e/{_ID}/(secret|secret_previous|secret_destination)|s/{_ID}/secret"
    r"|pk/[a-z0-9][a-z0-9\-]{0,62}/secret"
)


def is_secret_key(key: str) -> bool:
    """True if ``key`` holds a signing secret (an endpoint's current or previous secret, a
    source's secret, a region's portal key) or an endpoint's broker destination (its URL's
    credentials): stores encrypt these states at rest (adapters/secretbox.py)."""
    return _SECRET_KEY.fullmatch(key) is not None


def may_hold_secret(body: bytes) -> bool:
    """True if a record body (core.records) may carry a secret key's state: its registry
    section names keys as msgpack strings, so a body without ``/secret`` holds none. A
    conservative test (an event payload with that text answers True too)."""
    return b"/secret" in body


def key_type(key: str) -> type | None:
    """The CRDT class stored under ``key``, or None if ``key`` is not a registry key."""
    for pattern, cls in _KEY_TYPES:
        if pattern.fullmatch(key):
            return cls
    return None
