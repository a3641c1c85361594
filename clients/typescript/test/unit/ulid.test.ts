import assert from "node:assert/strict";
import { test } from "node:test";

import { EVENT_ID_PATTERN, newEventId, ulid } from "../../src/ulid.js";

test("ULID layout: spec vector of time and randomness", () => {
  // ulid spec: time 1469918176385 encodes as 01ARYZ6S41
  const zeros = new Uint8Array(10);
  assert.equal(ulid(1469918176385, zeros), "01ARYZ6S410000000000000000");
  assert.equal(ulid(0, new Uint8Array(10).fill(255)), "0000000000ZZZZZZZZZZZZZZZZ");
  assert.equal(ulid(2 ** 48 - 1, zeros), "7ZZZZZZZZZ0000000000000000");
  const one = new Uint8Array(10);
  one[9] = 1;
  assert.equal(ulid(0, one), "00000000000000000000000001");
  assert.throws(() => ulid(2 ** 48, zeros), RangeError);
  assert.throws(() => ulid(-1, zeros), RangeError);
  assert.throws(() => ulid(0, new Uint8Array(9)), RangeError);
});

test("event ids match the node's form, differ per call, and sort by time", () => {
  const ids = new Set<string>();
  for (let i = 0; i < 1000; i++) {
    const id = newEventId();
    assert.match(id, EVENT_ID_PATTERN);
    ids.add(id);
  }
  assert.equal(ids.size, 1000);
  assert.ok(newEventId(1_000) < newEventId(2_000));
});
