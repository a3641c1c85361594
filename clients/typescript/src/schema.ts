// Generated from the node's /openapi.json by tools/codegen.ts (npm run codegen); do not edit.

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export type Accepted = {
  duplicate?: boolean;
  event_type: string;
  id: string;
  received_at: string | null;
  region: string;
  warnings?: string[];
};

export type Attempt = {
  at: string | null;
  delivery: string;
  error: string | null;
  generation: number;
  latency_ms: number;
  n: number;
  region: string;
  request_headers: string;
  response_excerpt: string | null;
  response_headers: string | null;
  status_code: number | null;
};

export type AttemptPage = {
  items: Attempt[];
  next: string | null;
};

export type AuditEntry = {
  at: string | null;
  detail: string;
  hlc: string;
  id: string;
  object: string;
  op: string;
  region: string;
  tenant: string | null;
  who: string;
};

export type AuditEntryPage = {
  items: AuditEntry[];
  next: string | null;
};

export type Cluster = {
  actor: string;
  capabilities: {
    effective: string[];
    features: string[];
    held_back_by: string[];
    region_features: string[];
    release: string;
  };
  clock: {
    correction_ms: number;
    error_ms: number;
    hlc_rebases: number;
    max_drift_ms: number;
    offsets_ms: {
      [key: string]: number;
    };
    reference: string;
    stamps_ahead_ms: {
      [key: string]: number;
    };
    status: string;
    suspect_ms: number;
  };
  counts: {
    [key: string]: number;
  };
  custody: Json;
  incarnation: number;
  log_floor: {
    [key: string]: number;
  };
  peers: {
    [key: string]: Json;
  }[];
  process: {
    actor: string;
    holder: string | null;
    processes: {
      holder: string;
      replication_role: boolean;
    }[] | null;
    replication_role: boolean;
  };
  refused: {
    [key: string]: {
      count: number;
      first_at: string;
      last_at: string;
      last_reason: string;
      last_seq: number;
      skipped: number;
    };
  };
  region: string;
  registry_digest: string;
  registry_hash: string;
  registry_hash_age_s: number;
  removals: {
    pruned_actors: number;
    refused_hellos: number;
    removed: {
      [key: string]: {
        [key: string]: Json;
      };
    };
    retired_actors: string[];
  };
  version_vector: {
    [key: string]: number;
  };
};

export type Delivery = {
  attempts: number;
  created_at: string | null;
  custodian: string | null;
  endpoint: string;
  event: string;
  generation: number;
  id: string;
  /** pending: when the custodian attempts it next (asked in another region: the replicated schedule while it is ahead, else null) */
  next_attempt_at: string | null;
  region: string;
  status: "pending" | "cancelled" | "skipped" | "dead" | "delivered";
  updated_at: string | null;
};

export type DeliveryPage = {
  items: Delivery[];
  next: string | null;
};

/** The ``destination`` member's documented shape (core.brokers judges it). */
export type Destination = {
  exchange?: string;
  routing_key?: string;
  stream?: string;
  subject?: string;
  type: "http" | "rabbitmq" | "nats" | "redis";
  url?: string;
};

export type Endpoint = {
  created_at: string | null;
  description: string | null;
  event_types: string[];
  failing_since: string | null;
  filter: Json;
  headers: {
    [key: string]: string;
  } | null;
  id: string;
  max_in_flight: number;
  paused: boolean;
  payload_format: string;
  rate_limit_per_s: number;
  secret: string;
  state: string;
  tenant: string;
  updated_at: string | null;
  url: string;
};

export type EndpointPage = {
  items: Endpoint[];
  next: string | null;
};

/** payload: the published JSON exactly as written */
export type Event = {
  deliveries: Delivery[];
  event_type: string;
  id: string;
  payload: Json;
  received_at: string | null;
  region: string;
  tenant: string;
};

export type EventSummary = {
  deliveries: {
    [key: string]: number;
  };
  event_type: string;
  id: string;
  received_at: string | null;
  region: string;
  tenant: string;
};

export type EventSummaryPage = {
  items: EventSummary[];
  next: string | null;
};

export type EventType = {
  created_at: string | null;
  deprecated: boolean;
  deprecated_at: string | null;
  description: string;
  name: string;
  schema: Json;
  updated_at: string | null;
};

export type EventTypePage = {
  items: EventType[];
  next: string | null;
};

export type FilterTest = {
  failed_clause: Json;
  matches: boolean;
};

export type Job = {
  done: number;
  endpoint: string;
  error: string | null;
  finished_at: string | null;
  id: string;
  kind: string;
  since: string | null;
  started_at: string | null;
  status: string;
};

export type JobPage = {
  items: Job[];
  next: string | null;
};

export type PortalSession = {
  allowed_origins: string[];
  expires_at: string;
  frame: string;
  id: string;
  path: string;
  tenant: string;
  token: string;
  url: string;
};

export type RegionRemoval = {
  by: string;
  incarnation: number;
  region: string;
  removed_at: string;
};

export type RegionRow = {
  digest_age_s?: number | null;
  digest_at?: string | null;
  error?: string | null;
  reached: boolean;
  region: string;
};

export type RegionRowPage = {
  items: RegionRow[];
  next: string | null;
};

export type Source = {
  ack_policy: string | null;
  algorithm?: string | null;
  created_at: string | null;
  default_event_type?: string | null;
  encoding?: string | null;
  event_type_from?: string | null;
  header?: string | null;
  id: string;
  id_from?: string | null;
  kind: string;
  prefix?: string | null;
  priority: string | null;
  tenant: string;
  url_path: string;
};

export type SourcePage = {
  items: Source[];
  next: string | null;
};

export type Status = {
  status: string;
};

export type Tenant = {
  ack_policy: "local" | "one-remote";
  created_at: string | null;
  delivery_max_in_flight: number | null;
  id: string;
  name: string;
  publish_rate_cluster_per_s: number | null;
  publish_rate_per_s: number | null;
  strict_event_types: boolean;
  usage: {
    [key: string]: number;
  };
};

export type TenantPage = {
  items: Tenant[];
  next: string | null;
};

export type TestEvent = {
  at: string;
  error: string | null;
  event_type: string;
  id: string;
  latency_ms: number;
  ok: boolean;
  request_headers: string;
  response_excerpt: string;
  status_code: number | null;
};

export type Token = {
  created_at: string | null;
  created_by: string | null;
  expires_at: string | null;
  id: string;
  name: string | null;
  scope: string;
};

export type TokenCreated = Token & {
  token: string;
};

export type TokenPage = {
  items: Token[];
  next: string | null;
};

export type WhoAmI = {
  name: string | null;
  right: string;
  scope: string;
  tenant: string | null;
};

/** The JSON request body of each operation that takes one. */
export interface RequestBodies {
  "tenants.create": {
    ack_policy?: "local" | "one-remote";
    /** attempts in flight per region; null: node default */
    delivery_max_in_flight?: number | null;
    /** default: generated */
    id?: string;
    name: string;
    /** events/s per region; null: node default */
    publish_rate_per_s?: number | null;
    /** only event types in the tenant's catalog may be published and subscribed to */
    strict_event_types?: boolean;
  };
  "tenants.update": {
    /** admin only */
    ack_policy?: ("local" | "one-remote") | null;
    name?: string | null;
    /** admin only; null: node default */
    publish_rate_per_s?: number | null;
    strict_event_types?: boolean | null;
  };
  "endpoints.create": {
    description?: string | null;
    /** where deliveries go (README.md, Destinations): {type: http} (default: POST to url), {type: rabbitmq, url: amqp(s)://user:pass@host:port/vhost, exchange (default ''), routing_key}, {type: nats, url: nats://host:4222, subject, stream (optional: the JetStream stream expected)}, {type: redis, url: redis(s)://host:port/db, stream}; a broker endpoint has no url of its own (its url shows destination.url without password) */
    destination?: Destination;
    /** exact types, 'prefix.*' or '*'; empty: every type */
    event_types?: string[];
    /** payload filter ($eq, $in, ...) */
    filter?: {
      [key: string]: Json;
    } | null;
    /** extra request headers: RFC 9110 token names (not reserved ones such as webhook-*, content-type, host, user-agent; unique ignoring case), visible ASCII values */
    headers?: {
      [key: string]: string;
    } | null;
    max_in_flight?: number;
    paused?: boolean;
    /** raw: the payload as sent; standard-webhooks: {type, timestamp, data} */
    payload_format?: "raw" | "standard-webhooks";
    rate_limit_per_s?: number;
    /** whsec_ + base64 of 24..64 bytes; default: generated */
    secret?: string;
    /** http(s) URL resolving to a public address (or one in delivery.allow_private_networks); no credentials, no fragment; required unless destination is a broker */
    url?: string;
  };
  "endpoints.update": {
    description?: string | null;
    /** replaces it (as for POST); a broker endpoint changes its url here */
    destination?: Destination;
    /** false re-enables a disabled endpoint */
    disabled?: boolean;
    /** replaces the whole set */
    event_types?: string[];
    /** OR-Set add */
    event_types_add?: string[];
    /** OR-Set remove (not a type also added) */
    event_types_remove?: string[];
    filter?: {
      [key: string]: Json;
    } | null;
    /** extra request headers: RFC 9110 token names (not reserved ones such as webhook-*, content-type, host, user-agent; unique ignoring case), visible ASCII values */
    headers?: {
      [key: string]: string;
    } | null;
    max_in_flight?: number;
    paused?: boolean;
    payload_format?: "raw" | "standard-webhooks";
    rate_limit_per_s?: number;
    /** new secret (null: generate) */
    secret?: string | null;
    url?: string;
  };
  "endpoints.testFilter": {
    payload: Json;
  };
  "endpoints.recover": {
    /** RFC 3339 time (e.g. 2026-01-01T00:00:00Z) */
    since: string;
  };
  "endpoints.replayMissing": {
    /** RFC 3339 time (e.g. 2026-01-01T00:00:00Z) */
    since: string;
  };
  "endpoints.sendTest": {
    /** default: regionsync.test */
    event_type?: string | null;
    /** any JSON; default: {"test": true, "endpoint": id} */
    payload?: Json;
  };
  "eventTypes.create": {
    deprecated?: boolean;
    description?: string;
    name: string;
    /** JSON Schema (Draft 2020-12) of the payload */
    schema?: {
      [key: string]: Json;
    } | boolean | null;
  };
  "eventTypes.update": {
    deprecated?: boolean | null;
    description?: string | null;
    /** JSON Schema (Draft 2020-12); null: none */
    schema?: {
      [key: string]: Json;
    } | boolean | null;
  };
  "events.publish": {
    event_type: string;
    /** the event id, chosen by the client (a ULID); a repeat with the same id answers the event accepted first, in any region (README, Client-chosen event ids) */
    id?: string;
    /** any JSON (RFC 8259, at most 64 levels deep) */
    payload: Json;
  };
  "portalSessions.create": {
    /** origins that may frame the portal page (CSP frame-ancestors), such as https://app.example.com; null or []: none may */
    allowed_origins?: string[] | null;
    /** seconds the session lives; null: 3600 */
    ttl_s?: number | null;
  };
  "sources.create": {
    ack_policy?: "local" | "one-remote";
    algorithm?: "sha1" | "sha256" | "sha512";
    /** standard-webhooks, hmac: the event type of a verified request whose event_type_from finds no usable type (never refused for it) */
    default_event_type?: string;
    encoding?: "hex" | "base64";
    /** header:<name> or payload:<path> */
    event_type_from?: string;
    header?: string;
    /** header:<name> or payload:<path>; empty: body hash */
    id_from?: string;
    kind: "github" | "stripe" | "standard-webhooks" | "hmac";
    prefix?: string;
    priority?: "critical" | "high" | "normal" | "low";
    secret: string;
    tenant: string;
  };
  "tokens.create": {
    /** RFC 3339 time (e.g. 2026-01-01T00:00:00Z), in the future; null: never */
    expires_at?: string | null;
    name: string;
    /** admin, or tenant:<id>:manage|publish|read (read: GET only) */
    scope: string;
  };
}

/** The success answer of each operation. */
export interface Responses {
  "tenants.create": Tenant;
  "tenants.list": TenantPage;
  "tenants.get": Tenant;
  "tenants.update": Tenant;
  "tenants.delete": void;
  "endpoints.create": Endpoint;
  "endpoints.list": EndpointPage;
  "endpoints.get": Endpoint;
  "endpoints.update": Endpoint;
  "endpoints.delete": void;
  "endpoints.testFilter": FilterTest;
  "endpoints.rotateSecret": Endpoint;
  "endpoints.recover": Job;
  "endpoints.replayMissing": Job;
  "endpoints.sendTest": TestEvent;
  "eventTypes.create": EventType;
  "eventTypes.list": EventTypePage;
  "eventTypes.get": EventType;
  "eventTypes.update": EventType;
  "eventTypes.delete": void;
  "events.publish": Accepted;
  "events.list": EventSummaryPage;
  "events.get": Event;
  "deliveries.list": DeliveryPage;
  "deliveries.listForEndpoint": DeliveryPage;
  "deliveries.get": Delivery;
  "deliveries.retry": Delivery;
  "attempts.list": AttemptPage;
  "attempts.listForEndpoint": AttemptPage;
  "portalSessions.create": PortalSession;
  "portalSessions.expireAll": void;
  "jobs.list": JobPage;
  "jobs.get": Job;
  "sources.create": Source;
  "sources.list": SourcePage;
  "sources.get": Source;
  "sources.delete": void;
  "sources.receive": Accepted;
  "tokens.create": TokenCreated;
  "tokens.list": TokenPage;
  "tokens.whoami": WhoAmI;
  "tokens.revoke": void;
  "audit.list": AuditEntryPage;
  "cluster.get": Cluster;
  "cluster.regions": RegionRowPage;
  "cluster.removeRegion": RegionRemoval;
  "cluster.health": Status;
  "cluster.ready": Status;
  "cluster.metrics": string;
}
