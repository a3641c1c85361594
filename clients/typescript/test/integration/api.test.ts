/**
 * Against running nodes (tests/integration/test_sdk_typescript.py starts three and passes
 * their URLs): the operations table agrees with `/openapi.json`, and every operation
 * answers through the SDK. Env: REGIONSYNC_URLS (comma-separated, nearest first),
 * REGIONSYNC_HOOK_URL (a receiver URL for endpoints). Skipped without REGIONSYNC_URLS
 * (the pytest test fails on a skip).
 */

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import { ApiError, Client, newEventId, OPERATIONS, type OperationSpec, pathParams } from "../../src/index.js";
import { generate } from "../../tools/codegen.js";

const URLS = (process.env["REGIONSYNC_URLS"] ?? "").split(",").filter((u) => u !== "");
const HOOK = process.env["REGIONSYNC_HOOK_URL"] ?? "http://127.0.0.1:9/hook";
const skip = URLS.length === 0 ? "REGIONSYNC_URLS is not set" : false;

interface OpenApiOperation {
  parameters?: { name: string; in: string }[];
  requestBody?: { content?: Record<string, unknown> };
  responses?: Record<string, unknown>;
}
type Doc = { paths: Record<string, Record<string, OpenApiOperation>> };

/** "METHOD path" -> what the document says of it (the comparable parts). */
function shape(method: string, path: string, op: OpenApiOperation): string {
  const params = op.parameters ?? [];
  const of = (where: string): string[] =>
    params.filter((p) => p.in === where).map((p) => p.name.toLowerCase()).sort();
  const success = Object.keys(op.responses ?? {}).filter((c) => c.startsWith("2"));
  return JSON.stringify({
    op: `${method.toUpperCase()} ${path}`,
    path: params.filter((p) => p.in === "path").map((p) => p.name),
    query: of("query"),
    headers: of("header"),
    jsonBody: op.requestBody?.content?.["application/json"] !== undefined,
    noContent: success.length === 1 && success[0] === "204",
  });
}

function specShape(spec: OperationSpec): string {
  return JSON.stringify({
    op: `${spec.method} ${spec.path}`,
    path: pathParams(spec.path),
    query: [...(spec.query ?? [])].sort(),
    headers: (spec.headers ?? []).map((h) => h.toLowerCase()).sort(),
    jsonBody: spec.body === "json",
    noContent: spec.result === "none",
  });
}

describe("against a running node", { skip }, () => {
  const client = new Client({ regions: URLS, timeoutMs: 10_000 });
  const tenant = `ts-${Date.now().toString(36)}`;

  test("the operations table and /openapi.json name the same operations, alike", async () => {
    const resp = await fetch(`${URLS[0]}/openapi.json`);
    assert.equal(resp.status, 200);
    const doc = (await resp.json()) as Doc;
    const served = new Set<string>();
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) served.add(shape(method, path, op));
    }
    const sdk = new Set(Object.values(OPERATIONS).map((s) => specShape(s as OperationSpec)));
    const missing = [...served].filter((s) => !sdk.has(s));
    const extra = [...sdk].filter((s) => !served.has(s));
    assert.deepEqual({ missing, extra }, { missing: [], extra: [] },
      "missing: in /openapi.json, not in OPERATIONS (or different); extra: the reverse");
    assert.equal(sdk.size, Object.keys(OPERATIONS).length, "one row per operation");
  });

  test("src/schema.ts is what the served /openapi.json generates", async () => {
    const doc = await (await fetch(`${URLS[0]}/openapi.json`)).json();
    const committed = readFileSync(new URL("../../../src/schema.ts", import.meta.url), "utf8");
    assert.ok(committed === generate(doc as Parameters<typeof generate>[0]),
      `src/schema.ts is stale: npm run codegen -- ${URLS[0]}/openapi.json`);
  });

  test("discovery reads the other regions from /v1/cluster", async () => {
    const c = await Client.connect({ regions: [URLS[0] as string] });
    assert.deepEqual([...c.regions].sort(), [...URLS].sort());
  });

  test("every operation through the SDK", async () => {
    // tenants and event types
    assert.equal((await client.tenants.create({ id: tenant, name: "TS" }))["id"], tenant);
    assert.ok((await client.tenants.list({ query: { limit: 500 } })).items.some((t) => t["id"] === tenant));
    assert.equal((await client.tenants.update(tenant, { name: "TS 2" }))["name"], "TS 2");
    assert.equal((await client.tenants.get(tenant))["name"], "TS 2");
    await client.eventTypes.create(tenant, { name: "order.created", description: "made" });
    await client.eventTypes.create(tenant, { name: "order.gone" });
    assert.equal((await client.eventTypes.update(tenant, "order.gone", { deprecated: true }))["deprecated"], true);
    assert.equal((await client.eventTypes.get(tenant, "order.created"))["description"], "made");
    await client.eventTypes.delete(tenant, "order.gone");
    const types = (await client.eventTypes.list(tenant)).items.map((t) => t["name"]);
    assert.deepEqual(types, ["order.created"]);

    // endpoints
    const ep = await client.endpoints.create(tenant, { url: HOOK, event_types: ["order.*"] });
    const epId = ep["id"] as string;
    assert.match(epId, /^ep_/);
    assert.equal((await client.endpoints.get(tenant, epId))["url"], HOOK);
    assert.equal((await client.endpoints.update(tenant, epId, { description: "d" }))["description"], "d");
    assert.equal((await client.endpoints.list(tenant)).items.length, 1);
    const matched = await client.endpoints.testFilter(tenant, epId, { payload: { n: 1 } });
    assert.equal(typeof matched["matches"], "boolean");
    const rotated = await client.endpoints.rotateSecret(tenant, epId);
    assert.match(String(rotated["secret"]), /^whsec_/);

    // events: a publish, a repeat of its id, a list and a read
    const ev = await client.publish(tenant, "order.created", { n: 1 }, { idempotencyKey: "k-1" });
    assert.equal(ev.event_type, "order.created");
    const again = await client.publish(tenant, "order.created", { n: 1 }, { idempotencyKey: "k-1", id: ev.id });
    assert.equal(again.id, ev.id);
    assert.equal(again.duplicate, true);
    const conflict = await client.publish(tenant, "order.created", { n: 1 }, { idempotencyKey: "k-1" })
      .catch((e: unknown) => e);
    assert.ok(conflict instanceof ApiError && conflict.status === 409, String(conflict));
    const raw = await client.events.publish(tenant, { event_type: "order.created", payload: [2] });
    assert.match(raw.id, /^evt_/);
    assert.ok((await client.events.list(tenant, { query: { event_type: "order.*" } })).items.length >= 2);
    const full = await client.events.get(tenant, ev.id);
    assert.deepEqual(full["payload"], { n: 1 });

    // deliveries, attempts, recovery jobs
    const dl = await client.deliveries.list(tenant, { query: { endpoint: epId } });
    assert.ok(dl.items.length >= 1);
    assert.ok((await client.deliveries.listForEndpoint(tenant, epId)).items.length >= 1);
    const dlv = dl.items[0]?.["id"] as string;
    assert.ok(Array.isArray((await client.attempts.list(tenant, dlv)).items));
    assert.ok(Array.isArray((await client.attempts.listForEndpoint(tenant, epId)).items));
    const retried = await client.deliveries.retry(tenant, dlv).catch((e: unknown) => e);
    assert.ok(!(retried instanceof Error) || (retried instanceof ApiError && retried.status === 409), String(retried));
    const since = new Date(Date.now() - 60_000).toISOString();
    const job = await client.endpoints.recover(tenant, epId, { since });
    const job2 = await client.endpoints.replayMissing(tenant, epId, { since });
    assert.match(String(job["id"]), /./);
    assert.equal((await client.jobs.get(tenant, job["id"] as string))["id"], job["id"]);
    const jobs = (await client.jobs.list(tenant)).items.map((j) => j["id"]);
    assert.ok(jobs.includes(job["id"]!) && jobs.includes(job2["id"]!));

    // sources, and a signed inbound webhook through one
    const secret = "s3cret-inbound";
    const src = await client.sources.create({ tenant, kind: "hmac", secret, default_event_type: "order.created" });
    const srcId = src["id"] as string;
    assert.equal((await client.sources.get(srcId))["tenant"], tenant);
    assert.ok((await client.sources.list({ query: { tenant } })).items.some((s) => s["id"] === srcId));
    const inbound = JSON.stringify({ type: "order.created", n: 3 });
    const sig = createHmac("sha256", secret).update(inbound).digest("hex");
    const got = await client.sources.receive(srcId, inbound, { headers: { "x-signature": sig } });
    assert.match(String(got["id"]), /^evt_/);
    await client.sources.delete(srcId);
    await assert.rejects(client.sources.get(srcId), (e: unknown) => e instanceof ApiError && e.status === 404);

    // tokens: a publish token works for its tenant only
    const tok = await client.tokens.create({ scope: `tenant:${tenant}:publish`, name: "ts-sdk" });
    assert.ok((await client.tokens.list()).items.some((t) => t["id"] === tok["id"]));
    const publisher = new Client({ regions: URLS, token: tok["token"] as string });
    assert.equal((await publisher.tokens.whoami())["right"], "publish");
    assert.match((await publisher.publish(tenant, "order.created", { n: 4 })).id, /^evt_/);
    await assert.rejects(publisher.tenants.list(), (e: unknown) => e instanceof ApiError && e.status === 403);
    await client.tokens.revoke(tok["id"] as string);
    await assert.rejects(publisher.tokens.whoami(), (e: unknown) => e instanceof ApiError && e.status === 401);

    // the audit log, the cluster and the probes
    assert.ok((await client.audit.list({ query: { tenant } })).items.length >= 1);
    const view = await client.cluster.get();
    assert.equal(typeof view["region"], "string");
    assert.equal((await client.cluster.regions() as { items: unknown[] }).items.length, URLS.length);
    const removal = await client.cluster.removeRegion("no-such-region").catch((e: unknown) => e);
    assert.ok(removal instanceof ApiError && removal.status === 404, String(removal));
    assert.equal((await client.cluster.health())["status"], "ok");
    assert.equal((await client.cluster.ready())["status"], "ready");
    assert.match(await client.cluster.metrics(), /^# (HELP|TYPE) /m);

    await client.endpoints.delete(tenant, epId);
    await client.tenants.delete(tenant);
    await assert.rejects(client.tenants.get(tenant), (e: unknown) => e instanceof ApiError && e.status === 404);
  });

  test("one id published in two regions at once is one event", async () => {
    const t = `${tenant}-x`;
    await client.tenants.create({ id: t, name: "X" });
    const [first, second] = URLS;
    const one = new Client({ regions: [first as string] });
    const two = new Client({ regions: [second as string] });
    for (let i = 0; i < 100; i++) {
      try {
        await two.tenants.get(t);
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    const id = newEventId();
    const [a, b] = await Promise.all([
      one.publish(t, "x.y", { same: true }, { id }),
      two.publish(t, "x.y", { same: true }, { id }),
    ]);
    assert.equal(a.id, id);
    assert.equal(b.id, id);
    const other = await one.publish(t, "x.y", { same: false }, { id }).catch((e: unknown) => e);
    assert.ok(other instanceof ApiError && other.status === 409 && other.field === "id", String(other));
    const bad = await one.publish(t, "x.y", 1, { id: "evt_lowercase" }).catch((e: unknown) => e);
    assert.ok(bad instanceof ApiError && bad.status === 422 && bad.field === "id", String(bad));
  });
});
