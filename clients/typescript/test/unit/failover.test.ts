import assert from "node:assert/strict";
import { test } from "node:test";

import {
  backoffMs,
  DEFAULT_POLICY,
  type Outcome,
  parseRetryAfter,
  RegionPool,
  verdict,
} from "../../src/failover.js";

const A = "http://a.test";
const B = "http://b.test";
const C = "http://c.test";

test("verdict over every outcome kind and retry class", () => {
  const cases: [Outcome, "done" | "failover", "done" | "failover"][] = [
    // outcome, verdict for "always", for "unsent"
    [{ kind: "unsent", code: "ECONNREFUSED" }, "failover", "failover"],
    [{ kind: "lost", code: "ECONNRESET" }, "failover", "done"],
    [{ kind: "timeout" }, "failover", "done"],
    [{ kind: "response", status: 200 }, "done", "done"],
    [{ kind: "response", status: 202 }, "done", "done"],
    [{ kind: "response", status: 404 }, "done", "done"],
    [{ kind: "response", status: 409 }, "done", "done"],
    [{ kind: "response", status: 422 }, "done", "done"],
    [{ kind: "response", status: 500 }, "done", "done"],
    [{ kind: "response", status: 429 }, "done", "done"],
    [{ kind: "response", status: 429, retryAfterMs: 1000 }, "failover", "failover"],
    [{ kind: "response", status: 502 }, "failover", "done"],
    [{ kind: "response", status: 503 }, "failover", "failover"],
    [{ kind: "response", status: 503, retryAfterMs: 1000 }, "failover", "failover"],
    [{ kind: "response", status: 504 }, "failover", "done"],
  ];
  for (const [outcome, always, unsent] of cases) {
    assert.equal(verdict(outcome, "always"), always, JSON.stringify(outcome));
    assert.equal(verdict(outcome, "unsent"), unsent, JSON.stringify(outcome));
  }
});

test("Retry-After: seconds, HTTP-date, malformed", () => {
  const now = Date.parse("2026-12-04T22:00:00Z");
  assert.equal(parseRetryAfter("3", now), 3000);
  assert.equal(parseRetryAfter(" 0 ", now), 0);
  assert.equal(parseRetryAfter("Fri, 04 Dec 2026 22:00:05 GMT", now), 5000);
  assert.equal(parseRetryAfter("Fri, 04 Dec 2026 21:00:00 GMT", now), 0);
  assert.equal(parseRetryAfter("soon", now), undefined);
  assert.equal(parseRetryAfter("-1", now), undefined);
  assert.equal(parseRetryAfter(null, now), undefined);
});

test("backoff: none before the first attempt or a region not yet tried; full jitter, capped", () => {
  assert.equal(backoffMs(0, false, 0.99), 0);
  assert.equal(backoffMs(3, true, 0.99), 0);
  assert.equal(backoffMs(1, false, 0), 0);
  assert.equal(backoffMs(1, false, 0.5), 25); // base 50
  assert.equal(backoffMs(3, false, 0.5), 100); // 50 * 4 / 2
  assert.equal(backoffMs(30, false, 0.999), 1998); // capped at 2000
  for (let n = 1; n < 40; n++) {
    const d = backoffMs(n, false, 0.999999);
    assert.ok(d >= 0 && d < DEFAULT_POLICY.backoffMaxMs, `attempt ${n}: ${d}`);
  }
});

test("pool: nearest healthy first, failed regions avoided, then tried again", () => {
  const pool = new RegionPool([A + "/", B, C]);
  assert.deepEqual(pool.urls, [A, B, C]);
  assert.equal(pool.pick(0), A);
  pool.failed(A, 1000);
  assert.equal(pool.pick(1000), B, "A is avoided");
  assert.equal(pool.pick(1999), B);
  assert.equal(pool.preferred(2000), A, "A's avoidance (1 s) ended: the nearest again");
  assert.equal(pool.pick(2000), A, "one call probes A");
  assert.equal(pool.pick(2000), B, "the others stay away while it does");
  pool.failed(A, 2000);
  assert.equal(pool.waitMs(A, 2000), 2000, "second failure in a row: 2 s");
  pool.succeeded(A);
  assert.equal(pool.pick(2001), A);
  assert.equal(pool.waitMs(A, 2001), 0);
});

test("pool: attempts in flight at one failure count once", () => {
  const pool = new RegionPool([A, B]);
  pool.failed(A, 1000, undefined, 900); // four calls in flight when A crashed at ~950
  pool.failed(A, 1001, undefined, 910);
  pool.failed(A, 1002, undefined, 920);
  pool.failed(A, 1003, undefined, 930);
  assert.equal(pool.waitMs(A, 1003), 1000, "one failure: avoided 1 s, not 8");
  pool.failed(A, 2500, undefined, 2400); // a new attempt after that fails again
  assert.equal(pool.waitMs(A, 2500), 2000);
  pool.succeeded(A);
  pool.failed(A, 3000, undefined, 100);
  assert.equal(pool.waitMs(A, 3000), 1000, "after a success the count starts over");
});

test("pool: a call's tried regions are excluded while another is available", () => {
  const pool = new RegionPool([A, B, C]);
  assert.equal(pool.pick(0, new Set([A])), B);
  assert.equal(pool.pick(0, new Set([A, B])), C);
  pool.failed(A, 0);
  pool.failed(B, 0);
  pool.failed(B, 0);
  pool.failed(C, 0, 5000);
  // all avoided and all tried: the one whose avoidance ends first
  assert.equal(pool.pick(10, new Set([A, B, C])), A);
  // all avoided, one untried: the untried one
  assert.equal(pool.pick(10, new Set([A, B])), C);
  assert.equal(pool.waitMs(C, 10), 4990, "Retry-After longer than the avoidance");
});

test("pool: avoidance capped; regions added once; URLs checked", () => {
  const pool = new RegionPool([A]);
  for (let i = 0; i < 50; i++) pool.failed(A, i);
  assert.equal(pool.waitMs(A, 49), DEFAULT_POLICY.avoidMaxMs);
  assert.equal(pool.add(B), true);
  assert.equal(pool.add(B + "/"), false);
  assert.deepEqual(pool.urls, [A, B]);
  assert.throws(() => new RegionPool([]), TypeError);
  assert.throws(() => new RegionPool(["ftp://x.test"]), TypeError);
  assert.throws(() => new RegionPool(["not a url"]), TypeError);
});
