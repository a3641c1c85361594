/**
 * Writes src/schema.ts, the TypeScript types of the API, from the node's OpenAPI document:
 * one type per component schema (members sorted by name, so the document's key order does
 * not matter), and per operation of `OPERATIONS` its request body
 * (`RequestBodies`) and its success answer (`Responses`).
 *
 *   npm run codegen -- http://127.0.0.1:8080/openapi.json   (a running node)
 *   npm run codegen -- openapi.json                          (python -m regionsync.docs --json)
 *
 * test/integration/api.test.ts fails when src/schema.ts differs from what this generates
 * from a running node's document. Only the JSON Schema a node's document uses is read:
 * $ref, const, enum, anyOf, allOf, type (string, integer, number, boolean, null, array,
 * object with properties, required and additionalProperties); other keywords constrain
 * values, not shapes, and are left to the node.
 */

import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

import { OPERATIONS, type OperationSpec } from "../src/operations.js";

type Schema = { [key: string]: unknown };
interface Doc {
  paths: Record<string, Record<string, Schema>>;
  components?: { schemas?: Record<string, Schema> };
}

const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

function comment(text: unknown, pad: string): string {
  if (typeof text !== "string" || text.trim() === "") return "";
  const oneLine = text.replace(/\s+/g, " ").replace(/\*\//g, "* /").trim();
  return `${pad}/** ${oneLine} */\n`;
}

/** The TypeScript type of a JSON Schema, indented by `pad` on its later lines. */
export function tsType(s: Schema | boolean | undefined, pad = ""): string {
  if (s === undefined || s === true) return "Json";
  if (s === false) return "never";
  if (typeof s["$ref"] === "string") return s["$ref"].split("/").pop() as string;
  if ("const" in s) return JSON.stringify(s["const"]);
  if (Array.isArray(s["enum"])) return s["enum"].map((v) => JSON.stringify(v)).join(" | ");
  if (Array.isArray(s["anyOf"])) return union((s["anyOf"] as Schema[]).map((x) => tsType(x, pad)));
  if (Array.isArray(s["allOf"])) return (s["allOf"] as Schema[]).map((x) => wrap(tsType(x, pad))).join(" & ");
  const type = s["type"];
  if (Array.isArray(type)) return union(type.map((t) => tsType({ ...s, type: t }, pad)));
  switch (type) {
    case "string":
      return "string";
    case "integer":
    case "number":
      return "number";
    case "boolean":
      return "boolean";
    case "null":
      return "null";
    case "array":
      return `${wrap(tsType(s["items"] as Schema | undefined, pad))}[]`;
    case "object":
      return objectType(s, pad);
    default:
      return s["properties"] !== undefined ? objectType(s, pad) : "Json";
  }
}

function objectType(s: Schema, pad: string): string {
  const props = (s["properties"] ?? {}) as Record<string, Schema>;
  const required = new Set((s["required"] ?? []) as string[]);
  const extra = s["additionalProperties"] as Schema | boolean | undefined;
  const inner = `${pad}  `;
  const lines: string[] = [];
  for (const [name, p] of Object.entries(props).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const key = IDENT.test(name) ? name : JSON.stringify(name);
    lines.push(`${comment(p["description"], inner)}${inner}${key}${required.has(name) ? "" : "?"}: ${tsType(p, inner)};`);
  }
  if (Object.keys(props).length === 0 && extra !== false) {
    lines.push(`${inner}[key: string]: ${tsType(extra === undefined ? true : extra, inner)};`);
  }
  return lines.length === 0 ? "Record<string, never>" : `{\n${lines.join("\n")}\n${pad}}`;
}

function union(parts: string[]): string {
  return [...new Set(parts)].map(wrap).join(" | ");
}

function wrap(t: string): string {
  return /^[\w"$.-]+(\[\])?$/.test(t) || t.startsWith("{") ? t : `(${t})`;
}

function successSchema(op: Schema): { schema?: Schema; text: boolean; none: boolean } {
  const responses = (op["responses"] ?? {}) as Record<string, Schema>;
  const code = Object.keys(responses).find((c) => c.startsWith("2"));
  const content = code === undefined ? undefined : (responses[code]?.["content"] as Record<string, Schema> | undefined);
  if (code === "204" || content === undefined) return { none: code === "204", text: false };
  const json = content["application/json"];
  if (json !== undefined) return { schema: json["schema"] as Schema, text: false, none: false };
  return { text: true, none: false };
}

/** src/schema.ts for the document `doc`. */
export function generate(doc: Doc): string {
  const out = [
    "// Generated from the node's /openapi.json by tools/codegen.ts (npm run codegen); do not edit.",
    "",
    "/** Any JSON value. */",
    "export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };",
    "",
  ];
  // components, and the $defs a request body declares inline (`#/$defs/Name` refs)
  const schemas: Record<string, Schema> = {};
  for (const spec of Object.values(OPERATIONS) as OperationSpec[]) {
    const op = doc.paths[spec.path]?.[spec.method.toLowerCase()];
    const body = (op?.["requestBody"] as Schema | undefined)?.["content"] as Record<string, Schema> | undefined;
    Object.assign(schemas, (body?.["application/json"]?.["schema"] as Schema | undefined)?.["$defs"] ?? {});
  }
  Object.assign(schemas, doc.components?.schemas ?? {});
  for (const name of Object.keys(schemas).sort()) {
    const s = schemas[name] as Schema;
    out.push(`${comment(s["description"], "")}export type ${name} = ${tsType(s)};`, "");
  }
  const bodies: string[] = [];
  const answers: string[] = [];
  for (const [name, spec] of Object.entries(OPERATIONS) as [string, OperationSpec][]) {
    const op = doc.paths[spec.path]?.[spec.method.toLowerCase()];
    if (op === undefined) throw new Error(`${name}: ${spec.method} ${spec.path} is not in the document`);
    const body = (op["requestBody"] as Schema | undefined)?.["content"] as Record<string, Schema> | undefined;
    const bodySchema = body?.["application/json"]?.["schema"] as Schema | undefined;
    if (bodySchema !== undefined) bodies.push(`  ${JSON.stringify(name)}: ${tsType(bodySchema, "  ")};`);
    const ok = successSchema(op);
    const answer = ok.none ? "void" : ok.text ? "string" : tsType(ok.schema, "  ");
    answers.push(`  ${JSON.stringify(name)}: ${answer};`);
  }
  out.push("/** The JSON request body of each operation that takes one. */");
  out.push("export interface RequestBodies {", ...bodies, "}", "");
  out.push("/** The success answer of each operation. */");
  out.push("export interface Responses {", ...answers, "}", "");
  return out.join("\n");
}

async function main(source: string | undefined): Promise<void> {
  if (source === undefined) throw new Error("usage: npm run codegen -- <openapi.json file or URL>");
  const text = /^https?:/.test(source) ? await (await fetch(source)).text() : readFileSync(source, "utf8");
  const target = new URL("../../src/schema.ts", import.meta.url);
  writeFileSync(target, generate(JSON.parse(text) as Doc));
  process.stdout.write(`wrote ${target.pathname}\n`);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main(process.argv[2]);
}
