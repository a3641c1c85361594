import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { OPERATIONS, type OperationSpec } from "../../src/operations.js";

test("the README's table lists every operation, with its HTTP route", () => {
  const readme = readFileSync(new URL("../../../README.md", import.meta.url), "utf8");
  const rows = readme.split("\n").filter((l) => /^\| `[a-zA-Z]+\.[a-zA-Z]+` \|/.test(l));
  assert.equal(rows.length, Object.keys(OPERATIONS).length);
  for (const [name, spec] of Object.entries(OPERATIONS) as [string, OperationSpec][]) {
    assert.ok(readme.includes(`| \`${name}\` | \`${spec.method} ${spec.path}\` |`), name);
  }
});
