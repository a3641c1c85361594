"""``Client`` (sync) and ``AsyncClient``: every operation of ``_operations.OPERATIONS`` as
a method (path parameters positional, then the body's members or the query parameters as
keywords), sent to the nearest healthy region with failover (``_failover``).

``publish`` gives each event an id (``evt_`` + ULID) before the first attempt and sends
it, with the Idempotency-Key if given, in every retry, so a retry that lands in another
region is the same event with the same ``webhook-id`` (README, "Client-chosen event ids").
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import httpx

from ._failover import FailoverPolicy, Plan, Regions, classify
from ._operations import OPERATIONS, Op
from ._request import BY_NAME, Request, answer, build, inbound_request, publish_request
from .errors import ApiError, RegionsUnavailable
from .types import Accepted
from .ulid import new_event_id

__all__ = ["AsyncClient", "Client"]


class _Core:
    """What both clients hold: regions, policy, auth, the region that answered last."""

    def __init__(
        self,
        regions: Sequence[str] | str,
        token: str | None,
        policy: FailoverPolicy | None,
        discover: bool | None,
        rng: random.Random | None,
    ):
        urls = [regions] if isinstance(regions, str) else list(regions)
        self.policy = policy or FailoverPolicy()
        self.regions = Regions(urls, self.policy)
        # one URL: read the others from its cluster view (peers' http_url) at first use
        self._discover = len(self.regions.urls) == 1 if discover is None else discover
        self._rng = rng or random.Random()
        self.headers = {"authorization": f"Bearer {token}"} if token else {}
        self.region: str | None = None  # the base URL that answered last

    def _timeout(self, timeout: float) -> httpx.Timeout:
        return httpx.Timeout(timeout, connect=min(self.policy.connect_timeout_s, timeout))

    def _found_peers(self, cluster: Any) -> None:
        for peer in cluster.get("peers", []) if isinstance(cluster, dict) else []:
            if isinstance(peer, dict) and isinstance(peer.get("http_url"), str):
                self.regions.add(peer["http_url"])

    def _settle(
        self,
        req: Request,
        plan: Plan,
        url: str,
        outcome: httpx.Response | Exception,
        failures: list[tuple[str, str]],
    ) -> tuple[bool, Any]:
        """(True, answer) when ``outcome`` ends the call; (False, None) to try again.
        Raises ApiError, or a transport error that must not be retried."""
        verdict = classify(outcome, time.time())
        if verdict is None:
            if isinstance(outcome, Exception):
                raise outcome
            self.regions.succeeded(url)
            self.region = url
            return True, answer(req.op, outcome, url)
        kind, hold = verdict
        failures.append((url, _describe(outcome)))
        plan.failed(url, time.monotonic(), hold)
        if kind == "maybe" and req.op.retry != "always":
            if isinstance(outcome, Exception):
                raise outcome  # perhaps processed: repeating it elsewhere could apply it twice
            answer(req.op, outcome, url)  # raises ApiError
        return False, None

    def _give_up(self, failures: list[tuple[str, str]], last: Any) -> RegionsUnavailable:
        exc = last if isinstance(last, Exception) else None
        if isinstance(last, httpx.Response):
            try:
                answer(BY_NAME["healthz"], last, failures[-1][0])
            except ApiError as err:
                exc = err
        return RegionsUnavailable(failures, exc)


def _describe(outcome: httpx.Response | Exception) -> str:
    if isinstance(outcome, Exception):
        return f"{type(outcome).__name__}: {outcome}"[:200]
    return f"HTTP {outcome.status_code}"


class Client(_Core):
    """The sync client: ``Client(regions=[url, ...], token=...)``; every API operation
    is a method (``client.list_tenants(limit=10)``), plus ``publish``,
    ``send_inbound`` and ``iterate``. ``policy``: failover bounds (``FailoverPolicy``);
    ``discover``: read more regions from the first one's ``/v1/cluster`` (default: when
    given one URL); ``transport``: an httpx transport (tests)."""

    def __init__(
        self,
        regions: Sequence[str] | str,
        token: str | None = None,
        *,
        policy: FailoverPolicy | None = None,
        discover: bool | None = None,
        rng: random.Random | None = None,
        transport: httpx.BaseTransport | None = None,
    ):
        super().__init__(regions, token, policy, discover, rng)
        self._http = httpx.Client(headers=self.headers, transport=transport)
        self._lock = threading.Lock()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def publish(
        self,
        tenant: str,
        event_type: str,
        payload: Any,
        idempotency_key: str | None = None,
        *,
        event_id: str | None = None,
    ) -> Accepted:
        """Publish one event; returns the accepted event (its ``id``). The id is
        ``event_id`` or a new ULID, the same in every attempt. Raises ApiError (refused)
        or RegionsUnavailable."""
        eid = event_id or new_event_id()
        return self._call(publish_request(tenant, event_type, payload, idempotency_key, eid))

    def send_inbound(self, source: str, body: bytes, headers: Mapping[str, str]) -> Accepted:
        """Forward a sender's webhook (raw ``body`` and its signature ``headers``) to
        ``POST /in/{source}``; its event id derives from the sender's delivery id."""
        return self._call(inbound_request(source, body, headers))

    def iterate(self, operation: str, *args: str, **query: Any) -> Iterator[Any]:
        """Every item of a list operation (``"list_events"``, ...), page after page."""
        cursor = query.pop("cursor", None)
        while True:
            page = getattr(self, operation)(*args, cursor=cursor, **query)
            yield from page["items"]
            cursor = page.get("next")
            if not cursor:
                return

    def _discover_once(self) -> None:
        with self._lock:
            if not self._discover:
                return
            self._discover = False
        first = self.regions.urls[0]
        try:
            resp = self._http.get(first + "/v1/cluster", timeout=self._timeout(5.0))
            if resp.status_code == 200:
                self._found_peers(resp.json())
        except (httpx.HTTPError, ValueError):
            pass  # one region known; discovery is tried once

    def _call(self, req: Request) -> Any:
        self._discover_once()
        plan = Plan(self.regions, time.monotonic(), self._rng.random)
        failures: list[tuple[str, str]] = []
        last: Any = None
        while (step := plan.next(time.monotonic())) is not None:
            url, wait, timeout = step
            if wait > 0:
                time.sleep(wait)
            try:
                last = self._http.request(
                    req.op.method, url + req.path, params=req.params, content=req.content,
                    headers=req.headers, timeout=self._timeout(timeout),
                )  # fmt: skip
            except httpx.TransportError as exc:
                last = exc
            done, result = self._settle(req, plan, url, last, failures)
            if done:
                return result
        raise self._give_up(failures, last)


class AsyncClient(_Core):
    """``Client``'s asyncio twin: the same methods, awaited (``iterate`` is an async
    iterator); ``transport``: an httpx async transport (tests)."""

    def __init__(
        self,
        regions: Sequence[str] | str,
        token: str | None = None,
        *,
        policy: FailoverPolicy | None = None,
        discover: bool | None = None,
        rng: random.Random | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        super().__init__(regions, token, policy, discover, rng)
        self._http = httpx.AsyncClient(headers=self.headers, transport=transport)
        self._discovering: asyncio.Lock | None = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def publish(
        self,
        tenant: str,
        event_type: str,
        payload: Any,
        idempotency_key: str | None = None,
        *,
        event_id: str | None = None,
    ) -> Accepted:
        """As ``Client.publish``."""
        eid = event_id or new_event_id()
        req = publish_request(tenant, event_type, payload, idempotency_key, eid)
        return await self._call(req)  # type: ignore[no-any-return]

    async def send_inbound(self, source: str, body: bytes, headers: Mapping[str, str]) -> Accepted:
        """As ``Client.send_inbound``."""
        return await self._call(inbound_request(source, body, headers))  # type: ignore[no-any-return]

    async def iterate(self, operation: str, *args: str, **query: Any) -> AsyncIterator[Any]:
        """As ``Client.iterate``."""
        cursor = query.pop("cursor", None)
        while True:
            page = await getattr(self, operation)(*args, cursor=cursor, **query)
            for item in page["items"]:
                yield item
            cursor = page.get("next")
            if not cursor:
                return

    async def _discover_once(self) -> None:
        if not self._discover:
            return
        self._discovering = self._discovering or asyncio.Lock()
        async with self._discovering:
            if not self._discover:
                return
            try:
                first = self.regions.urls[0]
                resp = await self._http.get(first + "/v1/cluster", timeout=self._timeout(5.0))
                if resp.status_code == 200:
                    self._found_peers(resp.json())
            except (httpx.HTTPError, ValueError):
                pass
            self._discover = False

    async def _call(self, req: Request) -> Any:
        await self._discover_once()
        plan = Plan(self.regions, time.monotonic(), self._rng.random)
        failures: list[tuple[str, str]] = []
        last: Any = None
        while (step := plan.next(time.monotonic())) is not None:
            url, wait, timeout = step
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                last = await self._http.request(
                    req.op.method, url + req.path, params=req.params, content=req.content,
                    headers=req.headers, timeout=self._timeout(timeout),
                )  # fmt: skip
            except httpx.TransportError as exc:
                last = exc
            done, result = self._settle(req, plan, url, last, failures)
            if done:
                return result
        raise self._give_up(failures, last)


def _sync_method(op: Op) -> Any:
    def method(self: Client, *args: str, **kwargs: Any) -> Any:
        return self._call(build(op, args, kwargs))

    return _named(method, op)


def _async_method(op: Op) -> Any:
    async def method(self: AsyncClient, *args: str, **kwargs: Any) -> Any:
        return await self._call(build(op, args, kwargs))

    return _named(method, op)


def _named(method: Any, op: Op) -> Any:
    method.__name__ = method.__qualname__ = op.name
    returns = f" -> {op.returns}" if op.returns else ""
    method.__doc__ = f"``{op.method} {op.path}``{returns}. {op.doc}".rstrip()
    return method


for _op in OPERATIONS:  # the table is the one declaration of every operation
    setattr(Client, _op.name, _sync_method(_op))
    setattr(AsyncClient, _op.name, _async_method(_op))
