/**
 * Publishes COUNT events through the SDK, CONCURRENCY at a time, at most RATE per second,
 * and prints one JSON line per outcome, for tests/integration/test_sdk_typescript_failover.py
 * (which kills and restarts a region meanwhile):
 *   {"accepted": i, "id", "region", "at_ms", "attempts"}   an event the SDK reported accepted
 *   {"failed": i, "error"}                                   a publish that threw
 *   {"failover": {from, to, after_ms, at_ms}}                the SDK moved to another region
 *   {"done": {accepted, failed, elapsed_ms}}
 * Env: REGIONSYNC_URLS (nearest first), TENANT, COUNT, CONCURRENCY, RATE, EVENT_TYPE.
 */

import { Client } from "../src/index.js";

const env = (name: string, fallback?: string): string => {
  const v = process.env[name] ?? fallback;
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};

const regions = env("REGIONSYNC_URLS").split(",");
const tenant = env("TENANT");
const count = Number(env("COUNT", "300"));
const concurrency = Number(env("CONCURRENCY", "4"));
const rate = Number(env("RATE", "100"));
const eventType = env("EVENT_TYPE", "sdk.ts");
const out = (o: unknown): void => {
  process.stdout.write(JSON.stringify(o) + "\n");
};

const client = new Client({
  regions,
  timeoutMs: 2000,
  deadlineMs: 60_000,
  onFailover: (f) =>
    out({ failover: { from: f.from, to: f.to, after_ms: f.afterMs, at_ms: Date.now(),
      attempts: f.attempts.map((a) => `${a.region} ${a.outcome}`) } }),
});

const started = Date.now();
let next = 0;
let accepted = 0;
let failed = 0;

async function worker(): Promise<void> {
  for (;;) {
    const i = next++;
    if (i >= count) return;
    const due = started + (i * 1000) / rate;
    if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
    try {
      const ev = await client.publish(tenant, eventType, { i }, { idempotencyKey: `ts-${i}` });
      accepted++;
      out({ accepted: i, id: ev.id, region: ev.region, at_ms: Date.now(), duplicate: ev.duplicate ?? false });
    } catch (err) {
      failed++;
      out({ failed: i, error: String(err) });
    }
  }
}

await Promise.all(Array.from({ length: concurrency }, worker));
out({ done: { accepted, failed, elapsed_ms: Date.now() - started } });
