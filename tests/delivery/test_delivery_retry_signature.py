"""A retry more than five minutes after the first try carries a fresh timestamp and
signature, and the same webhook-id: the official verifier (5 minute tolerance) accepts it."""

from __future__ import annotations

import asyncio
import time

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from regionsync.adapters.memory_store import MemoryStore
from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.adapters.system import UlidSource, system_rng
from regionsync.config import load_settings
from regionsync.core.retry import AttemptOutcome, OutcomeKind
from regionsync.runtime.node import Node
from regionsync.runtime.ports import OutboundRequest

SIX_MINUTES_MS = 6 * 60 * 1000


class LaggingClock:
    """Wall time that starts six minutes behind the real clock and can catch up."""

    def __init__(self) -> None:
        self.offset_ms = -SIX_MINUTES_MS

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class VerifyingSender:
    """Answers 500 the first time, then 204; checks each request with the official lib."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.seen: list[tuple[dict, bool]] = []
        self.arrived = asyncio.Event()

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        headers = dict(request.headers)
        try:
            Webhook(self.secret).verify(request.body, headers)
            ok = True
        except WebhookVerificationError:
            ok = False
        self.seen.append((headers, ok))
        self.arrived.set()
        if len(self.seen) == 1:
            return AttemptOutcome(OutcomeKind.FAILED, status_code=500, reason="http_500")
        return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=204)


class PublicResolver:
    async def resolve(self, host: str, port: int) -> list[str]:
        return ["93.184.216.34"]


async def test_retry_after_five_minutes_verifies() -> None:
    clock = LaggingClock()
    settings = load_settings(None, region="r1", delivery={"retry_schedule_s": [300]})
    secret = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3"
    sender = VerifyingSender(secret)
    rng = system_rng()
    node = Node(
        settings,
        store=MemoryStore(),
        clock=clock,
        rng=rng,
        ids=UlidSource(clock, rng),  # type: ignore[arg-type]
        transport=MemoryNetwork().transport("r1"),
        sender=sender,
        resolver=PublicResolver(),
    )
    await node.start()
    try:
        await node.registry_ops.create_tenant("t", "T")
        await node.registry_ops.create_endpoint(
            "t", {"url": "https://hooks.example/x", "secret": secret}
        )
        event, _ = await node.ingest.publish("t", "a", b'{"n":1}', None)
        async with asyncio.timeout(5):
            await sender.arrived.wait()
        sender.arrived.clear()
        first_headers, first_ok = sender.seen[0]
        assert not first_ok  # its timestamp is six minutes old by the real clock
        clock.offset_ms = 0  # five minutes later (and then some): the retry is due
        node.queue.wake.set()
        async with asyncio.timeout(5):
            await sender.arrived.wait()
        retry_headers, retry_ok = sender.seen[1]
        assert retry_ok
        assert retry_headers["webhook-id"] == first_headers["webhook-id"] == event.id
        assert (
            int(retry_headers["webhook-timestamp"]) - int(first_headers["webhook-timestamp"]) >= 300
        )
        assert retry_headers["webhook-signature"] != first_headers["webhook-signature"]
    finally:
        await node.stop()
