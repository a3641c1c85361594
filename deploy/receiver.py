"""A receiver for deploy/compose.yaml: logs each delivery's id and event type, answers 204.

Standard library only, so it runs in the regionsync image: ``python /deploy/receiver.py``.
Verifying signatures needs the endpoint's secret: see ``standardwebhooks`` in README.md.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        line = {
            "path": self.path,
            "webhook_id": self.headers.get("webhook-id"),
            "event_type": self.headers.get("webhook-event-type"),
            "bytes": len(body),
        }
        print(json.dumps(line), flush=True)
        self.send_response(204)
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802 - health check
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()
