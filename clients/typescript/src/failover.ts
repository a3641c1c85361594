/**
 * Decides where the next attempt of a request goes and when: which outcomes move to
 * another region, the order of the regions (nearest healthy first), how long a failed
 * region is avoided, and the backoff with jitter. Pure: the caller passes the time and
 * the random sample; nothing here reads a clock or touches the network (transport.ts
 * does).
 *
 * Rules (clients/typescript/README.md "Region failover"): a connection refused, a
 * connection lost, a timeout, 502/503/504 and 429 with Retry-After move to the next
 * region with the same event id and Idempotency-Key; a request that may have been
 * processed (lost, timed out, 502, 504) is repeated only when the operation is
 * idempotent (operations.ts `retry`). Backoff: "full jitter" (AWS
 * Architecture Blog, "Exponential Backoff And Jitter", 2015); a region not yet tried in
 * this call is tried at once.
 */

/** What one attempt came to. */
export type Outcome =
  | { readonly kind: "response"; readonly status: number; readonly retryAfterMs?: number }
  /** no connection was made (refused, unreachable, DNS): the request was not sent */
  | { readonly kind: "unsent"; readonly code: string }
  /** the connection failed after the request may have been sent */
  | { readonly kind: "lost"; readonly code: string }
  | { readonly kind: "timeout" };

export type Verdict = "done" | "failover";

/** Whether to return `outcome` to the caller ("done") or try another region. */
export function verdict(outcome: Outcome, retry: "always" | "unsent"): Verdict {
  switch (outcome.kind) {
    case "unsent":
      return "failover";
    case "lost":
    case "timeout":
      return retry === "always" ? "failover" : "done";
    case "response": {
      const s = outcome.status;
      if (s === 429) return outcome.retryAfterMs !== undefined ? "failover" : "done";
      // every 503 of a node comes before it processed the request (not_following,
      // shedding, overloaded, too many connections) but publish's not_replicated, and
      // publish is idempotent; 502 and 504 come from a proxy that may have forwarded it
      if (s === 503) return "failover";
      if (s === 502 || s === 504) return retry === "always" ? "failover" : "done";
      return "done";
    }
  }
}

/** A one-line description of an outcome, for errors and logs. */
export function describe(outcome: Outcome): string {
  switch (outcome.kind) {
    case "response":
      return `HTTP ${outcome.status}`;
    case "unsent":
      return `not connected (${outcome.code})`;
    case "lost":
      return `connection lost (${outcome.code})`;
    case "timeout":
      return "timed out";
  }
}

/**
 * `Retry-After` as milliseconds: delay-seconds or an HTTP-date (RFC 9110 section 10.2.3)
 * against `nowMs` (Unix ms); undefined when absent or malformed.
 */
export function parseRetryAfter(value: string | null, nowMs: number): number | undefined {
  if (value === null) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  if (!/^[A-Za-z]{3}/.test(v)) return undefined; // an HTTP-date starts with the day name
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

export interface FailoverPolicy {
  /** attempts of one call, across all regions (>= 1) */
  readonly maxAttempts: number;
  /** the first backoff step and its cap, ms */
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
  /** how long a failed region is avoided: base doubled per consecutive failure, capped */
  readonly avoidBaseMs: number;
  readonly avoidMaxMs: number;
}

export const DEFAULT_POLICY: FailoverPolicy = {
  maxAttempts: 8,
  backoffBaseMs: 50,
  backoffMaxMs: 2000,
  avoidBaseMs: 1000,
  avoidMaxMs: 30_000,
};

/**
 * The wait before attempt `attempt` (0 for the first), given whether that attempt goes to
 * a region this call has not tried yet and `random` in [0, 1). (A Retry-After is kept by
 * the pool as the region's avoidance: `RegionPool.waitMs`.)
 */
export function backoffMs(
  attempt: number,
  freshRegion: boolean,
  random: number,
  policy: FailoverPolicy = DEFAULT_POLICY,
): number {
  if (attempt <= 0 || freshRegion) return 0;
  const cap = Math.min(policy.backoffMaxMs, policy.backoffBaseMs * 2 ** (attempt - 1));
  return Math.floor(random * cap);
}

interface RegionState {
  failures: number;
  avoidUntilMs: number;
  lastFailedMs: number;
}

/**
 * The regions in the caller's order of preference (nearest first) and what is known of
 * their health. The nearest region not being avoided is preferred; a region that failed
 * is avoided for a while (longer after each consecutive failure, or as long as its
 * Retry-After asked), then tried again, so the client returns to the nearest region once
 * it is back; a success clears it.
 */
export class RegionPool {
  readonly urls: string[];
  private readonly state = new Map<string, RegionState>();

  constructor(
    urls: readonly string[],
    private readonly policy: FailoverPolicy = DEFAULT_POLICY,
  ) {
    if (urls.length === 0) throw new TypeError("regions: at least one URL is required");
    this.urls = [];
    for (const u of urls) this.add(u);
  }

  /** Adds a region at the end (least preferred); returns false if already known. */
  add(url: string): boolean {
    const u = normalizeUrl(url);
    if (this.state.has(u)) return false;
    this.urls.push(u);
    this.state.set(u, { failures: 0, avoidUntilMs: 0, lastFailedMs: -Infinity });
    return true;
  }

  /** The region for the next attempt: the nearest not avoided and, when another is
   * available, not in `exclude` (this call's regions that just failed); when all are
   * avoided, the one whose avoidance ends first. A failed region whose avoidance ended
   * is probed by one call: picking it avoids it again for `avoidBaseMs` meanwhile, so
   * concurrent calls stay where they are until the probe succeeds. */
  pick(nowMs: number, exclude: ReadonlySet<string> = new Set()): string {
    const url = this.peek(nowMs, exclude);
    const s = this.st(url);
    if (s.failures > 0 && s.avoidUntilMs <= nowMs) s.avoidUntilMs = nowMs + this.policy.avoidBaseMs;
    return url;
  }

  /** Where a call would go now (no probe is started). */
  preferred(nowMs: number): string {
    return this.peek(nowMs);
  }

  /** What `pick` would choose, without starting a probe. */
  peek(nowMs: number, exclude: ReadonlySet<string> = new Set()): string {
    const open = this.urls.filter((u) => this.st(u).avoidUntilMs <= nowMs);
    const fresh = open.filter((u) => !exclude.has(u));
    if (fresh.length > 0) return fresh[0] as string;
    const untried = this.urls.filter((u) => !exclude.has(u));
    const pool = untried.length > 0 ? untried : this.urls;
    return pool.reduce((a, b) => (this.st(b).avoidUntilMs < this.st(a).avoidUntilMs ? b : a));
  }

  /** How long until `url` is no longer avoided (0: now). */
  waitMs(url: string, nowMs: number): number {
    return Math.max(0, this.st(url).avoidUntilMs - nowMs);
  }

  /** Records a failed attempt that started at `startedMs` (default: now). Attempts that
   * were already in flight when the region last failed are the same outage: they do not
   * lengthen its avoidance again (concurrent calls all fail at one crash). */
  failed(url: string, nowMs: number, retryAfterMs?: number, startedMs: number = nowMs): void {
    const s = this.st(url);
    if (startedMs > s.lastFailedMs || s.failures === 0) s.failures += 1;
    s.lastFailedMs = Math.max(s.lastFailedMs, nowMs);
    const p = this.policy;
    const avoid = Math.min(p.avoidMaxMs, p.avoidBaseMs * 2 ** (s.failures - 1));
    s.avoidUntilMs = Math.max(s.avoidUntilMs, nowMs + Math.max(avoid, retryAfterMs ?? 0));
  }

  succeeded(url: string): void {
    const s = this.st(url);
    s.failures = 0;
    s.avoidUntilMs = 0;
    s.lastFailedMs = -Infinity;
  }

  private st(url: string): RegionState {
    const s = this.state.get(url);
    if (s === undefined) throw new Error(`unknown region ${url}`);
    return s;
  }
}

/** A base URL without trailing slashes; throws TypeError for a non-http(s) URL. */
export function normalizeUrl(url: string): string {
  const parsed = new URL(url);
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    throw new TypeError(`region URL must be http or https: ${url}`);
  }
  return url.replace(/\/+$/, "");
}
