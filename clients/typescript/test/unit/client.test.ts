import assert from "node:assert/strict";
import { after, before, beforeEach, test } from "node:test";

import { ApiError, Client, type FailoverInfo, UnavailableError } from "../../src/index.js";
import { EVENT_ID_PATTERN } from "../../src/ulid.js";
import { type Answer, deadUrl, FakeRegion, type Seen } from "./fake_region.js";

const ACCEPTED = (req: Seen): Answer => {
  const body = JSON.parse(req.body) as { id: string; event_type: string };
  return { status: 202, body: { id: body.id, event_type: body.event_type, region: "x",
    received_at: "2026-12-04T22:00:00Z" } };
};

let a: FakeRegion;
let b: FakeRegion;
let dead: string;

before(async () => {
  a = await new FakeRegion().start();
  b = await new FakeRegion().start();
  dead = await deadUrl();
});
after(async () => {
  await a.stop();
  await b.stop();
});
beforeEach(() => {
  for (const r of [a, b]) {
    r.seen.length = 0;
    r.answer = ACCEPTED;
  }
});

const fast = { backoffBaseMs: 5, backoffMaxMs: 20 };

test("publish: a refused region fails over at once; the id is the client's", async () => {
  const moves: FailoverInfo[] = [];
  const c = new Client({ regions: [dead, b.url], policy: fast, onFailover: (i) => moves.push(i) });
  const ev = await c.publish("t1", "order.created", { n: 1 }, { idempotencyKey: "k1" });
  assert.match(ev.id, EVENT_ID_PATTERN);
  assert.equal(b.seen.length, 1);
  const sent = JSON.parse(b.seen[0]!.body);
  assert.deepEqual(sent, { id: ev.id, event_type: "order.created", payload: { n: 1 } });
  assert.equal(b.seen[0]!.headers["idempotency-key"], "k1");
  assert.equal(b.seen[0]!.url, "/v1/tenants/t1/events");
  assert.equal(moves.length, 1);
  assert.equal(moves[0]!.from, dead);
  assert.equal(moves[0]!.to, b.url);
  assert.match(moves[0]!.attempts[0]!.outcome, /ECONNREFUSED/);
  // the healthy region is remembered: the next call goes there first
  assert.equal(c.region, b.url);
  await c.publish("t1", "order.created", { n: 2 });
  assert.equal(moves.length, 1);
});

test("publish: 503, 502, 504, a dropped connection and a timeout all move on with the same bytes", async () => {
  for (const answer of [{ status: 503 }, { status: 502 }, { status: 504 }, "drop", "hang"] as Answer[]) {
    a.seen.length = 0;
    b.seen.length = 0;
    a.answer = () => answer;
    const c = new Client({ regions: [a.url, b.url], policy: fast, timeoutMs: 1000 });
    const ev = await c.publish("t1", "x.y", [1, "two"], { idempotencyKey: "same" });
    assert.equal(a.seen.length, 1, JSON.stringify(answer));
    assert.equal(b.seen.length, 1, JSON.stringify(answer));
    assert.equal(a.seen[0]!.body, b.seen[0]!.body, "same id and body on both regions");
    assert.equal(a.seen[0]!.headers["idempotency-key"], "same");
    assert.equal(b.seen[0]!.headers["idempotency-key"], "same");
    assert.equal(JSON.parse(b.seen[0]!.body).id, ev.id);
  }
});

test("create (not idempotent): moves on only when the request surely was not processed", async () => {
  for (const answer of [{ status: 502 }, { status: 504 }, "drop", "hang"] as Answer[]) {
    a.seen.length = 0;
    b.seen.length = 0;
    a.answer = () => answer;
    const c = new Client({ regions: [a.url, b.url], policy: fast, timeoutMs: 1000 });
    await assert.rejects(c.tenants.create({ id: "t1", name: "T" }), (err: Error) =>
      answer === "drop" || answer === "hang" ? err instanceof UnavailableError : err instanceof ApiError);
    assert.equal(b.seen.length, 0, `${JSON.stringify(answer)} must not reach another region`);
  }
  b.answer = () => ({ status: 201, body: { id: "t1" } });
  for (const answer of [{ status: 429, headers: { "retry-after": "1" } }, { status: 503 }] as Answer[]) {
    a.answer = () => answer;
    const c = new Client({ regions: [a.url, b.url], policy: fast });
    assert.deepEqual(await c.tenants.create({ id: "t1", name: "T" }), { id: "t1" }, JSON.stringify(answer));
  }
  const refused = new Client({ regions: [dead, b.url], policy: fast });
  assert.deepEqual(await refused.tenants.create({ id: "t1", name: "T" }), { id: "t1" });
});

test("429: with Retry-After the region is avoided that long; without it the caller gets it", async () => {
  a.answer = () => ({ status: 429, headers: { "retry-after": "60" }, body: { error: "rate_limited" } });
  const c = new Client({ regions: [a.url, b.url], policy: fast });
  await c.publish("t1", "x", 1);
  await c.publish("t1", "x", 2);
  assert.equal(a.seen.length, 1, "avoided for its Retry-After");
  assert.equal(b.seen.length, 2);
  a.answer = () => ({ status: 429, body: { error: "rate_limited", detail: "slow down" } });
  const d = new Client({ regions: [a.url, b.url], policy: fast });
  const err = await d.publish("t1", "x", 3).catch((e: unknown) => e);
  assert.ok(err instanceof ApiError);
  assert.equal(err.status, 429);
  assert.equal(err.code, "rate_limited");
});

test("attempts are bounded, and so is the call's time", async () => {
  a.answer = () => ({ status: 503 });
  b.answer = () => ({ status: 503 });
  const c = new Client({ regions: [a.url, b.url], policy: { ...fast, maxAttempts: 5, avoidBaseMs: 1 } });
  const err = await c.publish("t1", "x", 1).catch((e: unknown) => e);
  assert.ok(err instanceof UnavailableError, String(err));
  assert.equal(err.attempts.length, 5);
  assert.equal(a.seen.length + b.seen.length, 5);
  const ids = new Set([...a.seen, ...b.seen].map((s) => JSON.parse(s.body).id));
  assert.equal(ids.size, 1, "one event id on every attempt");

  a.answer = () => "hang";
  b.answer = () => "hang";
  const t0 = Date.now();
  const slow = new Client({ regions: [a.url, b.url], policy: fast, timeoutMs: 200, deadlineMs: 700 });
  const late = await slow.publish("t1", "x", 1).catch((e: unknown) => e);
  assert.ok(late instanceof UnavailableError, String(late));
  assert.ok(Date.now() - t0 < 5000, "the deadline bounds the call");
});

test("after a failure one call probes the nearest region; the others stay on the healthy one", async () => {
  a.answer = () => ({ status: 503 });
  let clock = 1_000_000; // the pool's clock, moved by hand
  const c = new Client({ regions: [a.url, b.url], policy: fast, now: () => clock });
  await c.publish("t1", "x", 0);
  assert.equal(a.seen.length, 1);
  await Promise.all([1, 2, 3, 4].map((i) => c.publish("t1", "x", i)));
  assert.equal(a.seen.length, 1, "avoided for avoidBaseMs");
  clock += 1000;
  await Promise.all([5, 6, 7, 8].map((i) => c.publish("t1", "x", i)));
  assert.equal(a.seen.length, 2, "one probe, not four");
  assert.equal(b.seen.length, 9);
  a.answer = ACCEPTED;
  clock += 2000; // the second failure: avoided 2 s
  await c.publish("t1", "x", 9);
  assert.equal(a.seen.length, 3, "the probe succeeds");
  assert.equal(c.region, a.url, "back to the nearest");
});

test("the caller's abort is final", async () => {
  a.answer = () => "hang";
  const c = new Client({ regions: [a.url, b.url], policy: fast });
  const ctl = new AbortController();
  setTimeout(() => ctl.abort(new Error("stop")), 100);
  await assert.rejects(c.publish("t1", "x", 1, { signal: ctl.signal }), /stop/);
  assert.equal(b.seen.length, 0);
});

test("problems become ApiError naming the field; the token is sent", async () => {
  a.answer = () => ({ status: 422, body: { error: "invalid", detail: "is required", field: "name" } });
  const c = new Client({ regions: [a.url], token: "rs_secret" });
  // @ts-expect-error: name is required (the node says so too)
  const err = await c.tenants.create({ id: "t1" }).catch((e: unknown) => e);
  assert.ok(err instanceof ApiError);
  assert.equal(err.status, 422);
  assert.equal(err.field, "name");
  assert.match(err.message, /field name/);
  assert.equal(a.seen[0]!.headers["authorization"], "Bearer rs_secret");
});

test("paths are encoded, queries checked, 204 and text results", async () => {
  a.answer = (req) => req.method === "DELETE" ? { status: 204 }
    : { status: 200, body: { items: [], next: null, url: req.url } };
  const c = new Client({ regions: [a.url] });
  const page = await c.events.list("t 1", { query: { event_type: "a.*", limit: 5, cursor: null } });
  assert.equal((page as unknown as { url: string }).url, "/v1/tenants/t%201/events?event_type=a.*&limit=5");
  assert.equal(await c.tenants.delete("t/1"), undefined);
  assert.equal(a.seen[1]!.url, "/v1/tenants/t%2F1");
  // @ts-expect-error: not a query parameter of this operation
  await assert.rejects(c.tenants.list({ query: { tenant: "x" } }), TypeError);
  // @ts-expect-error: a path argument is missing
  await assert.rejects(c.tenants.get(), TypeError);
  a.answer = () => ({ status: 200, body: "metric 1" });
  assert.equal(await c.cluster.metrics(), JSON.stringify("metric 1"));
});

test("iterate follows next cursors", async () => {
  a.answer = (req) => {
    const cursor = new URL(req.url, "http://x").searchParams.get("cursor");
    const n = cursor === null ? 0 : Number(cursor);
    return { status: 200, body: { items: [{ n }], next: n < 2 ? String(n + 1) : null } };
  };
  const c = new Client({ regions: [a.url] });
  const items = [];
  for await (const item of c.iterate("tenants.list", { query: { limit: 1 } })) items.push(item);
  assert.deepEqual(items, [{ n: 0 }, { n: 1 }, { n: 2 }]);
  const dead = [];
  for await (const d of c.iterate("deliveries.list", "acme", { query: { status: "dead" } })) dead.push(d);
  assert.equal(dead.length, 3);
  assert.match(a.seen.at(-1)!.url, /^\/v1\/tenants\/acme\/deliveries\?status=dead&cursor=2$/);
  a.answer = () => ({ status: 200, body: { items: [{ name: "a.b" }], next: null } });
  const types = [];
  for await (const t of c.iterate("eventTypes.list", "acme")) types.push(t);
  assert.deepEqual(types, [{ name: "a.b" }]);
  assert.equal(a.seen.at(-1)!.url, "/v1/tenants/acme/event-types");
});

test("discover adds the peers the cluster view names", async () => {
  a.answer = () => ({ status: 200, body: { region: "a", peers: [{ region: "b", http_url: b.url },
    { region: "c", http_url: null }] } });
  const c = await Client.connect({ regions: [a.url] });
  assert.deepEqual(c.regions, [a.url, b.url]);
  a.answer = () => ({ status: 403, body: { error: "forbidden", field: "authorization" } });
  const d = await Client.connect({ regions: [a.url] });
  assert.deepEqual(d.regions, [a.url]);
});
