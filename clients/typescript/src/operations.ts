/**
 * Every operation of the node's HTTP API (docs/api.md, served as `/openapi.json`), one row
 * each. The client's methods are derived from this table (`client.tenants.create(...)`),
 * and test/integration/api.test.ts fails when it and a running node's `/openapi.json`
 * disagree (an operation, a query or header parameter, or a request body missing on
 * either side).
 *
 * `retry`: what a failed attempt may be repeated in another region after.
 * - "always": the operation is idempotent (reads, PATCH, DELETE, publish, whose event id
 *   and Idempotency-Key every region dedupes, and inbound, whose sender's delivery id is
 *   the event id): any retryable failure.
 * - "unsent": only failures that mean the request was not processed (the connection was
 *   refused, 503, or 429 with Retry-After). A create with a server-chosen id could
 *   otherwise make a second object.
 */

export type Method = "GET" | "POST" | "PATCH" | "DELETE";

export interface OperationSpec {
  readonly method: Method;
  /** OpenAPI path template; `{name}` parameters are the method's leading arguments */
  readonly path: string;
  readonly query?: readonly string[];
  /** "json": a JSON body argument; "raw": bytes or text sent as they are (inbound) */
  readonly body?: "json" | "raw";
  readonly headers?: readonly string[];
  /** "json" (default), "text" (Prometheus metrics) or "none" (204) */
  readonly result?: "json" | "text" | "none";
  readonly retry?: "always" | "unsent";
}

const PAGE = ["limit", "cursor"] as const;
const LISTING = ["status", "since", "limit", "cursor"] as const;
const T = "/v1/tenants/{tenant}";
const EP = `${T}/endpoints/{endpoint}` as const;

// prettier-ignore
export const OPERATIONS = {
  "tenants.create":         { method: "POST",   path: "/v1/tenants", body: "json", retry: "unsent" },
  "tenants.list":           { method: "GET",    path: "/v1/tenants", query: PAGE },
  "tenants.get":            { method: "GET",    path: T },
  "tenants.update":         { method: "PATCH",  path: T, body: "json" },
  "tenants.delete":         { method: "DELETE", path: T, result: "none" },

  "endpoints.create":       { method: "POST",   path: `${T}/endpoints`, body: "json", retry: "unsent" },
  "endpoints.list":         { method: "GET",    path: `${T}/endpoints`, query: PAGE },
  "endpoints.get":          { method: "GET",    path: EP },
  "endpoints.update":       { method: "PATCH",  path: EP, body: "json" },
  "endpoints.delete":       { method: "DELETE", path: EP, result: "none" },
  "endpoints.testFilter":   { method: "POST",   path: `${EP}/test-filter`, body: "json", retry: "always" },
  "endpoints.rotateSecret": { method: "POST",   path: `${EP}/rotate-secret`, retry: "unsent" },
  "endpoints.recover":      { method: "POST",   path: `${EP}/recover`, body: "json", retry: "unsent" },
  "endpoints.replayMissing":{ method: "POST",   path: `${EP}/replay-missing`, body: "json", retry: "unsent" },
  "endpoints.sendTest":     { method: "POST",   path: `${EP}/test`, body: "json", retry: "unsent" },

  "eventTypes.create":      { method: "POST",   path: `${T}/event-types`, body: "json", retry: "unsent" },
  "eventTypes.list":        { method: "GET",    path: `${T}/event-types` },
  "eventTypes.get":         { method: "GET",    path: `${T}/event-types/{name}` },
  "eventTypes.update":      { method: "PATCH",  path: `${T}/event-types/{name}`, body: "json" },
  "eventTypes.delete":      { method: "DELETE", path: `${T}/event-types/{name}`, result: "none" },

  "events.publish":         { method: "POST",   path: `${T}/events`, body: "json", headers: ["Idempotency-Key"], retry: "always" },
  "events.list":            { method: "GET",    path: `${T}/events`, query: ["event_type", "since", "until", "endpoint", "status", "limit", "cursor"] },
  "events.get":             { method: "GET",    path: `${T}/events/{event}` },

  "deliveries.list":        { method: "GET",    path: `${T}/deliveries`, query: ["status", "endpoint", "since", "limit", "cursor"] },
  "deliveries.listForEndpoint": { method: "GET", path: `${EP}/deliveries`, query: LISTING },
  "deliveries.get":         { method: "GET",    path: `${T}/deliveries/{delivery}` },
  "deliveries.retry":       { method: "POST",   path: `${T}/deliveries/{delivery}/retry`, retry: "unsent" },

  "attempts.list":          { method: "GET",    path: `${T}/deliveries/{delivery}/attempts`, query: ["order", "limit", "cursor"] },
  "attempts.listForEndpoint": { method: "GET",  path: `${EP}/attempts`, query: ["status", "since", "order", "limit", "cursor"] },

  "portalSessions.create":  { method: "POST",   path: `${T}/portal-sessions`, body: "json", retry: "unsent" },
  "portalSessions.expireAll": { method: "POST", path: `${T}/portal-sessions/expire-all`, result: "none", retry: "always" },

  "jobs.list":              { method: "GET",    path: `${T}/jobs`, query: PAGE },
  "jobs.get":               { method: "GET",    path: `${T}/jobs/{job}` },

  "sources.create":         { method: "POST",   path: "/v1/sources", body: "json", retry: "unsent" },
  "sources.list":           { method: "GET",    path: "/v1/sources", query: ["tenant", "limit", "cursor"] },
  "sources.get":            { method: "GET",    path: "/v1/sources/{source}" },
  "sources.delete":         { method: "DELETE", path: "/v1/sources/{source}", result: "none" },
  "sources.receive":        { method: "POST",   path: "/in/{source}", body: "raw", retry: "always" },

  "tokens.create":          { method: "POST",   path: "/v1/tokens", body: "json", retry: "unsent" },
  "tokens.list":            { method: "GET",    path: "/v1/tokens", query: PAGE },
  "tokens.whoami":          { method: "GET",    path: "/v1/whoami" },
  "tokens.revoke":          { method: "DELETE", path: "/v1/tokens/{token}", result: "none" },

  "audit.list":             { method: "GET",    path: "/v1/audit", query: ["tenant", "since", "cursor", "limit"] },

  "cluster.get":            { method: "GET",    path: "/v1/cluster" },
  "cluster.regions":        { method: "GET",    path: "/v1/cluster/regions" },
  "cluster.removeRegion":   { method: "POST",   path: "/v1/cluster/regions/{name}/removal", retry: "unsent" },
  "cluster.health":         { method: "GET",    path: "/healthz" },
  "cluster.ready":          { method: "GET",    path: "/readyz" },
  "cluster.metrics":        { method: "GET",    path: "/metrics", result: "text" },
} as const satisfies Record<string, OperationSpec>;

export type Operations = typeof OPERATIONS;
export type OperationName = keyof Operations;

/** The `{name}` parameters of a path template, in order. */
export function pathParams(path: string): string[] {
  return [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1] as string);
}

/** `path` with its parameters replaced by `args` (percent-encoded), in order. */
export function fillPath(path: string, args: readonly string[]): string {
  const names = pathParams(path);
  if (args.length !== names.length) {
    throw new TypeError(`${path} takes ${names.length} path arguments, got ${args.length}`);
  }
  let i = 0;
  return path.replace(/\{[^}]+\}/g, () => {
    const value = args[i];
    const name = names[i++];
    if (typeof value !== "string" || value === "") {
      throw new TypeError(`path argument ${name} must be a non-empty string`);
    }
    return encodeURIComponent(value);
  });
}

/** The retry class of an operation: reads, PATCH and DELETE are idempotent. */
export function retryClass(spec: OperationSpec): "always" | "unsent" {
  return spec.retry ?? (spec.method === "POST" ? "unsent" : "always");
}
