"""Region failover of both clients against scripted regions (httpx.MockTransport): what
moves a request to the next region, what is sent again (the same event id and
Idempotency-Key), what is never repeated, the bounds, and the region remembered."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import httpx
import pytest
from regionsync_client import ApiError, AsyncClient, Client, FailoverPolicy, RegionsUnavailable
from regionsync_client._failover import Plan, Regions, retry_after_s

A, B, C = "http://a.test", "http://b.test", "http://c.test"
ACCEPTED = {"id": "", "event_type": "t", "region": "b", "received_at": None}
Script = Callable[[httpx.Request], httpx.Response]


class Regionset:
    """Scripted regions: ``behaviour[base] `` answers or raises; ``seen`` the requests."""

    def __init__(self, **behaviour: Script) -> None:
        self.behaviour = {f"http://{k}.test": v for k, v in behaviour.items()}
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        base = f"{request.url.scheme}://{request.url.host}"
        return self.behaviour[base](request)

    def bases(self) -> list[str]:
        return [f"http://{r.url.host}" for r in self.seen]


def accept(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content or b"{}")
    return httpx.Response(202, json={**ACCEPTED, "id": body.get("id", "")})


def refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def lost(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadError("connection reset", request=request)


def status(code: int, **headers: str) -> Script:
    return lambda _r: httpx.Response(code, json={"error": "x", "detail": "y"}, headers=headers)


def client(regions: Regionset, urls: list[str] | None = None, **policy: float) -> Client:
    pol = FailoverPolicy(**{"backoff_base_s": 0.001, "backoff_max_s": 0.002, **policy})
    return Client(urls or [A, B, C], "tok", policy=pol, rng=random.Random(1),
                  transport=httpx.MockTransport(regions))  # fmt: skip


def test_publish_fails_over_with_the_same_id_and_key_and_remembers() -> None:
    regions = Regionset(a=refuse, b=lost, c=accept)
    c = client(regions)
    event = c.publish("acme", "order.paid", {"n": 1}, idempotency_key="k-1")
    assert regions.bases() == [A, B, C] and c.region == C
    bodies = [json.loads(r.content) for r in regions.seen]
    assert len({b["id"] for b in bodies}) == 1 and event["id"] == bodies[0]["id"]
    assert bodies[0]["id"].startswith("evt_") and len(bodies[0]["id"]) == 30
    assert {r.headers["idempotency-key"] for r in regions.seen} == {"k-1"}
    assert {r.headers["authorization"] for r in regions.seen} == {"Bearer tok"}
    regions.seen.clear()
    second = c.publish("acme", "order.paid", {"n": 2})
    assert regions.bases() == [C]  # a and b are marked down: c, remembered, goes first
    assert second["id"] != event["id"]


def test_each_publish_call_gets_its_own_id_unless_given() -> None:
    regions = Regionset(a=accept)
    c = client(regions, [A])
    ids = {c.publish("t", "x", {})["id"] for _ in range(5)}
    assert len(ids) == 5
    assert c.publish("t", "x", {}, event_id="evt_01JEV7Q0T4G5Z8C3M9WBX2N6HR")["id"] == (
        "evt_01JEV7Q0T4G5Z8C3M9WBX2N6HR"
    )


@pytest.mark.parametrize("first", [status(502), status(503), status(504),
                                   status(429, **{"retry-after": "1"}), refuse, lost])  # fmt: skip
def test_retryable_failures_move_a_publish_on(first: Script) -> None:
    regions = Regionset(a=first, b=accept, c=accept)
    assert client(regions).publish("t", "x", {})["id"]
    assert regions.bases() == [A, B]


@pytest.mark.parametrize("answer", [status(400), status(404), status(409), status(422),
                                    status(500), status(429)])  # fmt: skip
def test_refusals_are_not_retried(answer: Script) -> None:
    regions = Regionset(a=answer, b=accept)
    with pytest.raises(ApiError) as err:
        client(regions).publish("t", "x", {})
    assert regions.bases() == [A] and err.value.error == "x" and err.value.region == A


def test_a_write_that_may_have_been_applied_is_not_sent_again() -> None:
    for maybe in (lost, status(502), status(504)):
        regions = Regionset(a=maybe, b=accept)
        with pytest.raises((httpx.ReadError, ApiError)):
            client(regions).create_tenant(id="acme", name="Acme")
        assert regions.bases() == [A]
    regions = Regionset(a=refuse, b=status(503), c=lambda r: httpx.Response(201, json={}))
    assert client(regions).create_tenant(id="acme", name="Acme") == {}
    assert regions.bases() == [A, B, C]  # unsent each time: safe to send again


def test_reads_fail_over_after_any_failure() -> None:
    regions = Regionset(a=lost, b=lambda r: httpx.Response(200, json={"items": [], "next": None}))
    assert client(regions).list_tenants(limit=5) == {"items": [], "next": None}
    assert regions.seen[1].url.params["limit"] == "5"


def test_attempts_are_bounded() -> None:
    regions = Regionset(a=refuse, b=refuse, c=refuse)
    with pytest.raises(RegionsUnavailable) as err:
        client(regions, max_attempts=7).publish("t", "x", {})
    assert len(regions.seen) == 7 and len(err.value.failures) == 7
    assert isinstance(err.value.last, httpx.ConnectError)
    assert len({json.loads(r.content)["id"] for r in regions.seen}) == 1


def test_the_deadline_bounds_a_call() -> None:
    regions = Regionset(a=status(429, **{"retry-after": "30"}), b=refuse)
    c = client(regions, [A, B], deadline_s=0.5, max_attempts=100)
    with pytest.raises(RegionsUnavailable) as err:
        c.publish("t", "x", {})
    assert isinstance(err.value.last, httpx.ConnectError | ApiError)
    assert regions.bases().count(A) == 1  # its Retry-After is past the deadline


def test_one_url_discovers_the_others_from_the_cluster_view() -> None:
    cluster = {"peers": [{"region": "b", "http_url": B}, {"region": "c", "http_url": None}]}

    def a(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/cluster":
            return httpx.Response(200, json=cluster)
        return refuse(request)

    regions = Regionset(a=a, b=accept)
    c = client(regions, [A])
    c.publish("t", "x", {})
    assert c.regions.urls == [A, B]
    assert [r.url.path for r in regions.seen] == ["/v1/cluster", "/v1/tenants/t/events",
                                                  "/v1/tenants/t/events"]  # fmt: skip


def test_paths_are_encoded_and_arguments_checked() -> None:
    regions = Regionset(a=lambda r: httpx.Response(200, json={"id": "x"}))
    c = client(regions, [A])
    c.get_endpoint("ac me", "ep/1")
    assert regions.seen[-1].url.raw_path == b"/v1/tenants/ac%20me/endpoints/ep%2F1"
    with pytest.raises(TypeError):
        c.get_endpoint("acme")
    with pytest.raises(TypeError):
        c.list_tenants(bogus=1)


def test_iterate_follows_cursors() -> None:
    pages = {None: {"items": [1, 2], "next": "c2"}, "c2": {"items": [3], "next": None}}
    regions = Regionset(a=lambda r: httpx.Response(200, json=pages[r.url.params.get("cursor")]))
    assert list(client(regions, [A]).iterate("list_tenants", limit=2)) == [1, 2, 3]


async def test_async_client_fails_over_alike() -> None:
    regions = Regionset(a=lost, b=status(503), c=accept)
    pol = FailoverPolicy(backoff_base_s=0.001, backoff_max_s=0.002)
    async with AsyncClient([A, B, C], policy=pol, rng=random.Random(1),
                           transport=httpx.MockTransport(regions)) as c:  # fmt: skip
        event = await c.publish("t", "x", {"n": 1}, "k")
        assert c.region == C and regions.bases() == [A, B, C]
        assert {json.loads(r.content)["id"] for r in regions.seen} == {event["id"]}
        with pytest.raises(httpx.ReadError):
            regions.behaviour[C] = lost
            await c.create_endpoint("t", url="https://x.example/")
        regions.behaviour[C] = lambda r: httpx.Response(200, json={"items": [7], "next": None})
        assert [i async for i in c.iterate("list_events", "t")] == [7]


def test_plan_backs_off_with_jitter_after_each_round() -> None:
    pol = FailoverPolicy(backoff_base_s=0.1, backoff_max_s=0.25, max_attempts=9)
    regions = Regions([A, B], pol)
    plan, now, waits = Plan(regions, 0.0, lambda: 1.0), 0.0, []
    while (step := plan.next(now)) is not None:
        url, wait, _timeout = step
        waits.append(wait)
        plan.failed(url, now, None)
        now += wait
    assert waits == [0, 0, 0.2, 0.2, 0.25, 0.25, 0.25, 0.25, 0.25]
    zero = Plan(Regions([A], pol), 0.0, lambda: 0.0)
    assert zero.next(0.0) == (A, 0.0, pol.timeout_s)


def test_down_marks_grow_and_clear() -> None:
    pol = FailoverPolicy(down_for_s=1.0, down_max_s=3.0)
    regions = Regions([A, B], pol)
    regions.failed(A, 0.0)
    regions.failed(A, 0.5)  # a concurrent request of the same outage
    assert regions.down_until[A] == 1.0 and regions.order(0.5) == [B, A]
    regions.failed(A, 1.0)
    assert regions.down_until[A] == 3.0
    regions.failed(A, 3.0)
    assert regions.down_until[A] == 6.0 and regions.order(5.0) == [B, A]  # capped at 3 s
    assert regions.order(6.0) == [A, B]
    regions.failed(A, 0.0)
    regions.succeeded(A)
    assert regions.order(0.0) == [A, B]


def test_retry_after_forms() -> None:
    assert retry_after_s("3", 0.0) == 3.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:10 GMT", 1445412480.0) == 10.0
    assert retry_after_s("soon", 0.0) is None and retry_after_s(None, 0.0) is None
