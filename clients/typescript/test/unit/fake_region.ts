/** A fake region on loopback for the unit tests: records every request and answers with
 * what `answer` says (a status, headers and body; "hang" never answers; "drop" closes
 * the connection). */

import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface Seen {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingMessage["headers"];
  readonly body: string;
}

export type Answer =
  | { status: number; headers?: Record<string, string>; body?: unknown }
  | "hang"
  | "drop";

export class FakeRegion {
  readonly seen: Seen[] = [];
  answer: (req: Seen) => Answer = () => ({ status: 200, body: {} });
  private server?: Server;
  url = "";

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const seen = { method: req.method ?? "", url: req.url ?? "", headers: req.headers,
          body: Buffer.concat(chunks).toString() };
        this.seen.push(seen);
        const a = this.answer(seen);
        if (a === "hang") return;
        if (a === "drop") {
          req.socket.destroy();
          return;
        }
        const text = a.body === undefined ? "" : JSON.stringify(a.body);
        res.writeHead(a.status, { "content-type": "application/json", ...a.headers });
        res.end(text);
      });
    });
    await new Promise<void>((r) => this.server?.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((r) => this.server?.close(() => r()));
  }
}

/** A URL on loopback where nothing listens (a port just released). */
export async function deadUrl(): Promise<string> {
  const r = await new FakeRegion().start();
  const url = r.url;
  await r.stop();
  return url;
}
