"""Simulated webhook receivers as an httpx transport that waits on virtual time.

Endpoint URLs name their receiver by host: ``https://<kind>-<n>.receivers.sim/hook``.
Kinds: ``fast`` (2xx after a few ms), ``slow`` (2xx after seconds), ``flaky`` (500 or
2xx at random), ``gone`` (410), ``tarpit`` (answers long after any deadline); during an
outage (``outage_until``) every receiver answers 503. Every request is recorded, so
checkers can compare deliveries with what receivers saw.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import httpx

__all__ = ["KINDS", "Receipt", "ReceiverTransport"]

KINDS = ("fast", "slow", "flaky", "gone", "tarpit")


@dataclass(frozen=True, slots=True)
class Receipt:
    at: float  # virtual seconds when the request arrived
    host: str
    webhook_id: str
    status: int | None  # None: the sender gave up before an answer
    path: str = ""  # the URL path: endpoints sharing a receiver host differ by it


class ReceiverTransport(httpx.AsyncBaseTransport):
    """Answers every request by the kind named in its host; records receipts."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.receipts: list[Receipt] = []
        self.outage_until = 0.0  # virtual seconds: until then every receiver answers 503

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        loop = asyncio.get_running_loop()
        host = request.url.host
        kind = host.split("-", 1)[0]
        await request.aread()
        wid = request.headers.get("webhook-id", "")
        if loop.time() < self.outage_until and kind in KINDS:
            delay, status = 0.01, 503
        elif kind == "fast":
            delay, status = self.rng.uniform(0.005, 0.08), 204
        elif kind == "slow":
            delay, status = self.rng.uniform(1.0, 8.0), 200
        elif kind == "flaky":
            delay = self.rng.uniform(0.01, 0.5)
            status = 500 if self.rng.random() < 0.5 else 200
        elif kind == "gone":
            delay, status = 0.02, 410
        elif kind == "tarpit":
            delay, status = 3600.0, 200
        else:
            raise httpx.ConnectError(f"no receiver at {host}", request=request)
        trace = request.extensions.get("trace")
        if trace is not None:  # as httpcore reports it: the request goes out
            await trace("http11.send_request_headers.started", {})
        receipt_at = loop.time()
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.receipts.append(Receipt(receipt_at, host, wid, None, request.url.path))
            raise
        self.receipts.append(Receipt(receipt_at, host, wid, status, request.url.path))
        # a stream, as a real transport returns (content= would be pre-read)
        return httpx.Response(status, stream=httpx.ByteStream(b"ok" if status < 300 else b"no"))
