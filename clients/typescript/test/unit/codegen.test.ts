import assert from "node:assert/strict";
import { test } from "node:test";

import { tsType } from "../../tools/codegen.js";

test("JSON Schema to TypeScript: the keywords a node's document uses", () => {
  assert.equal(tsType({ type: "string" }), "string");
  assert.equal(tsType({ type: "integer" }), "number");
  assert.equal(tsType({ type: "null" }), "null");
  assert.equal(tsType({ $ref: "#/components/schemas/Tenant" }), "Tenant");
  assert.equal(tsType({ enum: ["local", "one-remote"] }), '"local" | "one-remote"');
  assert.equal(tsType({ const: "standard-webhooks" }), '"standard-webhooks"');
  assert.equal(tsType({ anyOf: [{ type: "string" }, { type: "null" }] }), "string | null");
  assert.equal(tsType({ anyOf: [{ enum: ["a", "b"] }, { type: "null" }] }), '("a" | "b") | null');
  assert.equal(tsType({ type: "array", items: { $ref: "#/x/Job" } }), "Job[]");
  assert.equal(tsType({ type: "array", items: { anyOf: [{ type: "string" }, { type: "integer" }] } }),
    "(string | number)[]");
  assert.equal(tsType({ type: ["string", "null"] }), "string | null");
  assert.equal(tsType({}), "Json");
  assert.equal(tsType({ type: "object" }), "{\n  [key: string]: Json;\n}");
  assert.equal(tsType({ type: "object", additionalProperties: { type: "integer" } }),
    "{\n  [key: string]: number;\n}");
  assert.equal(
    tsType({ type: "object", additionalProperties: false, required: ["id"],
      properties: { id: { type: "string", description: "the id" }, "x-y": { type: "boolean" } } }),
    '{\n  /** the id */\n  id: string;\n  "x-y"?: boolean;\n}',
  );
  assert.equal(tsType({ type: "object", additionalProperties: false }), "Record<string, never>");
});
