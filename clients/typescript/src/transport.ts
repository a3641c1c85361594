/**
 * Sends one operation over HTTP with region failover: each attempt goes to the region
 * `RegionPool` picks, with a per-attempt timeout (AbortSignal.timeout), and `failover.ts`
 * decides whether its outcome is final or moves to another region after a backoff. The
 * request (body, event id, Idempotency-Key) is the same bytes on every attempt. Bounded
 * by `maxAttempts` and the call's total deadline. Uses the built-in fetch (Node >= 20).
 */

import { ApiError, type AttemptRecord, UnavailableError } from "./errors.js";
import {
  backoffMs,
  DEFAULT_POLICY,
  describe,
  type FailoverPolicy,
  type Outcome,
  parseRetryAfter,
  RegionPool,
  verdict,
} from "./failover.js";

export interface TransportOptions {
  readonly token?: string;
  /** per attempt, ms (default 10,000) */
  readonly timeoutMs?: number;
  /** per call, across attempts and backoff, ms (default 30,000) */
  readonly deadlineMs?: number;
  readonly policy?: Partial<FailoverPolicy>;
  readonly userAgent?: string;
  /** called after a call succeeded in another region than its first attempt's */
  readonly onFailover?: (info: FailoverInfo) => void;
  /** seams for tests: the clock (Unix ms), the jitter source, the fetch */
  readonly now?: () => number;
  readonly random?: () => number;
  readonly fetch?: typeof fetch;
}

export interface FailoverInfo {
  readonly operation: string;
  readonly from: string;
  readonly to: string;
  /** from the end of the first failed attempt to the answer of the one that succeeded */
  readonly afterMs: number;
  readonly attempts: readonly AttemptRecord[];
}

export interface Request {
  readonly operation: string;
  readonly method: string;
  /** path and query, e.g. `/v1/tenants?limit=10` */
  readonly target: string;
  readonly body?: string | Uint8Array;
  readonly contentType?: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly retry: "always" | "unsent";
  readonly signal?: AbortSignal;
  readonly timeoutMs?: number;
}

export interface Reply {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
  readonly region: string;
}

const UNSENT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EADDRNOTAVAIL",
  "UND_ERR_CONNECT_TIMEOUT",
]);

/** The error code under a fetch failure (`TypeError: fetch failed` with a cause). */
function errorCode(err: unknown): string {
  let e: unknown = err;
  for (let depth = 0; depth < 4 && e instanceof Error; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string") return code;
    if (e instanceof AggregateError && e.errors.length > 0) e = e.errors[0];
    else e = (e as { cause?: unknown }).cause;
  }
  return "UNKNOWN";
}

function isTimeout(err: unknown): boolean {
  return err instanceof Error && err.name === "TimeoutError";
}

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (ms <= 0) return resolve();
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });

export class Transport {
  readonly pool: RegionPool;
  private readonly policy: FailoverPolicy;
  /** the clock (Unix ms) */
  readonly now: () => number;
  private readonly random: () => number;
  private readonly fetch: typeof fetch;

  constructor(
    regions: readonly string[],
    private readonly opts: TransportOptions = {},
  ) {
    this.policy = { ...DEFAULT_POLICY, ...opts.policy };
    if (!(this.policy.maxAttempts >= 1)) throw new RangeError("maxAttempts must be >= 1");
    this.pool = new RegionPool(regions, this.policy);
    this.now = opts.now ?? Date.now;
    this.random = opts.random ?? Math.random;
    this.fetch = opts.fetch ?? globalThis.fetch;
  }

  /** The final answer of some region (any status), or UnavailableError. */
  async send(req: Request): Promise<Reply> {
    const started = this.now();
    const deadline = started + (this.opts.deadlineMs ?? 30_000);
    const attempts: AttemptRecord[] = [];
    const tried = new Set<string>();
    let firstFailureEnd: number | undefined;
    for (let n = 0; ; n++) {
      const planned = this.pool.peek(this.now(), tried);
      let wait = Math.max(
        backoffMs(n, !tried.has(planned), this.random(), this.policy),
        this.pool.waitMs(planned, this.now()),
      );
      if (this.now() + wait >= deadline) {
        if (n > 0) throw new UnavailableError(req.operation, attempts, "deadline");
        wait = 0; // every region is avoided: the first attempt goes anyway
      }
      await sleep(wait, req.signal);
      const region = this.pool.pick(this.now(), tried); // other calls may have learnt more
      const t0 = this.now();
      const { outcome, reply } = await this.once(region, req, Math.max(1, deadline - t0));
      const t1 = this.now();
      attempts.push({ region, outcome: describe(outcome), startedAtMs: t0, elapsedMs: t1 - t0 });
      tried.add(region);
      if (verdict(outcome, req.retry) === "done") {
        if (reply === undefined) {
          this.pool.failed(region, t1, undefined, t0); // may have been processed: not repeated
          throw new UnavailableError(req.operation, attempts, describe(outcome));
        }
        if (verdict(outcome, "always") === "done") this.pool.succeeded(region);
        else this.pool.failed(region, t1, retryAfterOf(outcome), t0);
        if (firstFailureEnd !== undefined && attempts[0]?.region !== region) {
          this.opts.onFailover?.({
            operation: req.operation,
            from: attempts[0]?.region ?? region,
            to: region,
            afterMs: t1 - firstFailureEnd,
            attempts,
          });
        }
        return reply;
      }
      firstFailureEnd ??= t1;
      this.pool.failed(region, t1, retryAfterOf(outcome), t0);
      if (n + 1 >= this.policy.maxAttempts) {
        throw new UnavailableError(req.operation, attempts, "attempts used up");
      }
      if (t1 >= deadline) throw new UnavailableError(req.operation, attempts, "deadline");
    }
  }

  /** One attempt; a fetch failure becomes an outcome, the caller's abort is rethrown. */
  private async once(
    region: string,
    req: Request,
    leftMs: number,
  ): Promise<{ outcome: Outcome; reply?: Reply }> {
    const timeout = AbortSignal.timeout(Math.min(req.timeoutMs ?? this.opts.timeoutMs ?? 10_000, leftMs));
    const signal = req.signal ? AbortSignal.any([req.signal, timeout]) : timeout;
    const headers: Record<string, string> = {
      accept: "application/json",
      "user-agent": this.opts.userAgent ?? "regionsync-client-ts",
      ...req.headers,
    };
    if (this.opts.token) headers["authorization"] = `Bearer ${this.opts.token}`;
    if (req.body !== undefined) headers["content-type"] = req.contentType ?? "application/json";
    try {
      const resp = await this.fetch(region + req.target, {
        method: req.method,
        headers,
        body: req.body,
        signal,
        redirect: "manual",
      });
      const text = await resp.text();
      const retryAfterMs = parseRetryAfter(resp.headers.get("retry-after"), this.now());
      const reply = { status: resp.status, headers: resp.headers, text, region };
      const outcome: Outcome = { kind: "response", status: resp.status, retryAfterMs };
      return { outcome, reply };
    } catch (err) {
      if (req.signal?.aborted) throw req.signal.reason;
      if (isTimeout(err)) return { outcome: { kind: "timeout" } };
      const code = errorCode(err);
      return { outcome: { kind: UNSENT_CODES.has(code) ? "unsent" : "lost", code } };
    }
  }
}

function retryAfterOf(outcome: Outcome): number | undefined {
  return outcome.kind === "response" ? outcome.retryAfterMs : undefined;
}

/** `reply`'s JSON body, or ApiError for a status >= 300. */
export function jsonOrThrow(reply: Reply, operation: string): unknown {
  const body = parseJson(reply.text);
  if (reply.status >= 300) {
    const problem = body !== null && typeof body === "object" ? body : { detail: reply.text };
    throw new ApiError(reply.status, problem as Record<string, unknown>, reply.region, operation);
  }
  return body;
}

function parseJson(text: string): unknown {
  if (text === "") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
