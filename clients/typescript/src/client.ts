/**
 * `new Client({ regions, token })`: one method per row of `OPERATIONS`, grouped by
 * resource (`client.tenants.create(body)`, `client.events.list(tenant, { query })`), and
 * `client.publish(tenant, eventType, payload, { idempotencyKey })`. Every call goes
 * through the region failover of transport.ts. A publish carries an event id the client
 * chose (`evt_` + ULID) and keeps it, with its Idempotency-Key, on every retry in every
 * region, so a retry cannot become a second event (README "Region failover").
 */

import { ApiError } from "./errors.js";
import {
  fillPath,
  type OperationName,
  type Operations,
  OPERATIONS,
  type OperationSpec,
  pathParams,
  retryClass,
} from "./operations.js";
import { type FailoverInfo, jsonOrThrow, Transport, type TransportOptions } from "./transport.js";
import type { Accepted, Json, RequestBodies, Responses } from "./schema.js";
import { newEventId } from "./ulid.js";

export type JsonObject = { [key: string]: Json | undefined };

/** The 202 of a publish (docs/api.md): `id`, `event_type`, `region` (the region that
 * accepted it; on a repeat, the first acceptance's), `received_at`, and `duplicate`
 * when an earlier attempt or call was accepted with this id or key. */
export type AcceptedEvent = Accepted;

/** A list answer: `items`, and `next`, the cursor of the following page (null: last). */
export interface Page<T = JsonObject> {
  readonly items: T[];
  readonly next?: string | null;
}

export interface CallOptions {
  readonly signal?: AbortSignal;
  /** this call's per-attempt timeout, ms */
  readonly timeoutMs?: number;
  /** extra request headers (e.g. an inbound source's signature headers) */
  readonly headers?: Readonly<Record<string, string>>;
  /** content type of a raw body (default application/json) */
  readonly contentType?: string;
}

type Scalar = string | number | boolean;
type PathArgs<P extends string> = P extends `${string}{${string}}${infer Rest}`
  ? [string, ...PathArgs<Rest>]
  : [];
type QueryOf<S> = S extends { query: readonly (infer Q extends string)[] }
  ? { readonly query?: { readonly [K in Q]?: Scalar | null } }
  : unknown;
type KeyOf<S> = S extends { headers: readonly string[] }
  ? { readonly idempotencyKey?: string }
  : unknown;
type BodyArg<N extends OperationName> = Operations[N] extends { body: "json" }
  ? [body: N extends keyof RequestBodies ? RequestBodies[N] : JsonObject]
  : Operations[N] extends { body: "raw" }
    ? [body: string | Uint8Array]
    : [];
type OptionsOf<S> = CallOptions & QueryOf<S> & KeyOf<S>;
type ArgsOf<N extends OperationName> = [
  ...PathArgs<Operations[N]["path"]>,
  ...BodyArg<N>,
  options?: OptionsOf<Operations[N]>,
];
/** What an operation resolves to: its success answer in the API's schema (src/schema.ts). */
export type ResultOf<N extends OperationName> = N extends keyof Responses ? Responses[N] : JsonObject;

type GroupName = OperationName extends infer N
  ? N extends `${infer G}.${string}`
    ? G
    : never
  : never;
type Group<G extends GroupName> = {
  readonly [N in OperationName as N extends `${G}.${infer A}` ? A : never]: (
    ...args: ArgsOf<N>
  ) => Promise<ResultOf<N>>;
};
export type ApiGroups = { readonly [G in GroupName]: Group<G> };

type ItemOf<N extends OperationName> = ResultOf<N> extends { items: (infer T)[] } ? T : JsonObject;

export interface ClientOptions extends Omit<TransportOptions, "token"> {
  /** regional base URLs, nearest first (one is enough with `Client.connect`) */
  readonly regions: readonly string[];
  /** an API token (docs/api.md, Authentication); none for an open loopback node */
  readonly token?: string;
}

export interface PublishOptions extends CallOptions {
  readonly idempotencyKey?: string;
  /** the event id to use (default: a new `evt_` ULID per call) */
  readonly id?: string;
}

// one class and one interface of the same name: the interface declares the groups the
// constructor builds from OPERATIONS
export interface Client extends ApiGroups {}

export class Client {
  readonly transport: Transport;

  constructor(options: ClientOptions) {
    const { regions, ...rest } = options;
    this.transport = new Transport(regions, rest);
    const groups: Record<string, Record<string, unknown>> = {};
    for (const name of Object.keys(OPERATIONS) as OperationName[]) {
      const [group, action] = name.split(".") as [string, string];
      groups[group] ??= {};
      groups[group][action] = (...args: unknown[]) => this.call(name, ...args);
    }
    Object.assign(this, groups);
  }

  /** A client over `options.regions` plus the regions the cluster view of the first
   * reachable one names (`discover`). A token that may not read `/v1/cluster` (403: only
   * admin tokens may) keeps the given regions. */
  static async connect(options: ClientOptions): Promise<Client> {
    const client = new Client(options);
    try {
      await client.discover();
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 403)) throw err;
    }
    return client;
  }

  /** Reads `GET /v1/cluster` (admin) and adds each peer's `http_url` to the regions,
   * after the given ones; returns the URLs added. */
  async discover(options?: CallOptions): Promise<string[]> {
    const view = await this.cluster.get(options);
    const peers = Array.isArray(view["peers"]) ? view["peers"] : [];
    const added: string[] = [];
    for (const p of peers) {
      const url = p !== null && typeof p === "object" && !Array.isArray(p) ? p["http_url"] : null;
      if (typeof url === "string" && url !== "" && this.transport.pool.add(url)) added.push(url);
    }
    return added;
  }

  /** The regions in order of preference. */
  get regions(): readonly string[] {
    return this.transport.pool.urls;
  }

  /** The region the next call goes to (the nearest not avoided after a failure). */
  get region(): string {
    return this.transport.pool.preferred(this.transport.now());
  }

  /**
   * Publishes one event: `POST /v1/tenants/{tenant}/events` with `{id, event_type,
   * payload}`. The event id (chosen here unless `options.id` is given) and the
   * Idempotency-Key are sent unchanged on every attempt, so the event is accepted once
   * whichever regions the attempts reach. Returns the accepted event; throws ApiError
   * for a final answer other than 202, UnavailableError when no region answered.
   */
  async publish(
    tenant: string,
    eventType: string,
    payload: Json,
    options: PublishOptions = {},
  ): Promise<Accepted> {
    const { id, ...rest } = options;
    const body = { id: id ?? newEventId(), event_type: eventType, payload };
    return this.events.publish(tenant, body, rest);
  }

  /** Every item of a list operation, page after page (`next` as the cursor). */
  async *iterate<N extends OperationName & `${string}.list${string}`>(
    name: N,
    ...args: ArgsOf<N>
  ): AsyncGenerator<ItemOf<N>> {
    const spec: OperationSpec = OPERATIONS[name];
    const nPath = pathParams(spec.path).length;
    const opts = (args[nPath] ?? {}) as CallOptions & { query?: Record<string, unknown> };
    let cursor: unknown = opts.query?.["cursor"] ?? null;
    for (let pages = 0; pages < 1_000_000; pages++) {
      const query = cursor === null ? opts.query : { ...opts.query, cursor };
      const page = (await this.call(name, ...args.slice(0, nPath), { ...opts, query })) as Page<ItemOf<N>>;
      yield* page.items;
      if (!page.next) return;
      cursor = page.next;
    }
  }

  /** Runs operation `name` of OPERATIONS: path arguments, then the body if it takes
   * one, then options. */
  async call(name: OperationName, ...args: unknown[]): Promise<unknown> {
    const spec: OperationSpec = OPERATIONS[name];
    if (spec === undefined) throw new TypeError(`unknown operation ${String(name)}`);
    const nPath = pathParams(spec.path).length;
    const path = fillPath(spec.path, args.slice(0, nPath) as string[]);
    let rest = args.slice(nPath);
    let body: string | Uint8Array | undefined;
    if (spec.body !== undefined) {
      if (rest[0] === undefined) throw new TypeError(`${name} takes a body`);
      body = encodeBody(name, spec, rest[0]);
      rest = rest.slice(1);
    }
    const opts = (rest[0] ?? {}) as CallOptions & {
      query?: Record<string, Scalar | null | undefined>;
      idempotencyKey?: string;
    };
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.idempotencyKey !== undefined) headers["idempotency-key"] = opts.idempotencyKey;
    const reply = await this.transport.send({
      operation: name,
      method: spec.method,
      target: path + queryString(spec, opts.query),
      body,
      contentType: opts.contentType,
      headers,
      retry: retryClass(spec),
      signal: opts.signal,
      timeoutMs: opts.timeoutMs,
    });
    if (spec.result === "text" && reply.status < 300) return reply.text;
    const value = jsonOrThrow(reply, name);
    return spec.result === "none" ? undefined : value;
  }
}

/** The request body's bytes; a publish without an `id` gets one here, so that even a
 * call through `client.events.publish` keeps one id across its retries. */
function encodeBody(name: string, spec: OperationSpec, body: unknown): string | Uint8Array {
  if (spec.body === "raw") {
    if (typeof body === "string" || body instanceof Uint8Array) return body;
    throw new TypeError(`${name}: the body is a string or bytes`);
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new TypeError(`${name}: the body is a JSON object`);
  }
  if (name === "events.publish" && (body as JsonObject)["id"] === undefined) {
    return JSON.stringify({ id: newEventId(), ...body });
  }
  return JSON.stringify(body);
}

function queryString(spec: OperationSpec, query?: Record<string, Scalar | null | undefined>): string {
  if (query === undefined) return "";
  const allowed = new Set(spec.query ?? []);
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (!allowed.has(k)) throw new TypeError(`unknown query parameter ${k}`);
    if (v !== undefined && v !== null) params.set(k, String(v));
  }
  const s = params.toString();
  return s === "" ? "" : `?${s}`;
}

export type { FailoverInfo };
