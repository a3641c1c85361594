"""Issue 38 over real HTTP: a schema that loops is refused at registration (422
``invalid_schema`` naming the place), a stored one answers a 4xx at publish without a
traceback in the log; a payload's validation is bounded (422 ``schema_too_costly``) and
runs off the event loop and outside the write lock, so another tenant's publish and
``GET /healthz`` answer while it runs."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import threading
from typing import Any

import pytest
from api_support import Api, assert_problem, snapshot

from regionsync.core import filter_compiler, filters, schema_checks, schema_validator

T, OTHER = "acme", "globex"
EXPONENTIAL = {
    "$defs": {
        "n": {"allOf": [{"$ref": "#/$defs/m"}, {"$ref": "#/$defs/m"}]},
        "m": {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}},
    },
    "$ref": "#/$defs/n",
}
LOOPS = [
    ({"$ref": "#"}, "#"),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
     "#/$defs/a"),
    ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}},
     "#/$defs/a"),
    ({"allOf": [{"$ref": "#"}]}, "#"),
    ({"$dynamicAnchor": "n", "$ref": "#/$defs/x", "$defs": {"x": {"$dynamicRef": "#n"}}}, "#"),
]  # fmt: skip


def nested(depth: int) -> Any:
    payload: Any = {}
    for _ in range(depth):
        payload = {"a": payload}
    return payload


async def _type(api: Api, tenant: str, schema: Any, name: str = "deep") -> None:
    resp = await api.client.post(
        f"/v1/tenants/{tenant}/event-types", json={"name": name, "schema": schema}
    )
    assert resp.status_code == 201, resp.text


async def _publish(api: Api, tenant: str, payload: Any, name: str = "deep") -> Any:
    return await api.client.post(
        f"/v1/tenants/{tenant}/events", json={"event_type": name, "payload": payload}
    )


@pytest.mark.parametrize(("schema", "where"), LOOPS)
async def test_a_looping_schema_is_refused_at_registration(
    api: Api, tenant: str, schema: Any, where: str
) -> None:
    before = await snapshot(api, T)
    resp = await api.client.post(
        f"/v1/tenants/{T}/event-types", json={"name": "x", "schema": schema}
    )
    body = assert_problem(resp, 422, "schema")
    assert body["error"] == "invalid_schema" and f"at {where}:" in body["detail"], body
    assert await snapshot(api, T) == before


@pytest.mark.parametrize(("schema", "where"), LOOPS)
async def test_a_stored_looping_schema_is_a_4xx_at_publish_without_a_log_flood(
    api: Api,
    tenant: str,
    schema: Any,
    where: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As if registered before the check (or replicated from an older node): every
    publish was a 500 with a ~155 KB traceback in the log."""
    with monkeypatch.context() as patched:
        patched.setattr(schema_checks, "reference_problem", lambda schema: None)
        await _type(api, T, schema)
    caplog.set_level(logging.INFO)
    for _ in range(2):
        body = assert_problem(await _publish(api, T, {"x": 1}), 422, "event_type")
        assert body["error"] == "schema_unusable" and f"at {where}:" in body["detail"], body
    assert sum(len(r.getMessage()) + len(r.exc_text or "") for r in caplog.records) < 5_000
    assert not any(r.exc_info for r in caplog.records)


async def test_the_issues_exponential_schema_is_refused_quickly_inbound_too(
    api: Api, tenant: str
) -> None:
    """Depth 16 took 9 s of validation in the issue (each level doubles it); depth 24
    would take minutes. Bounded, it is refused within the step bound, well under 10 s."""
    await _type(api, T, EXPONENTIAL)
    assert (await _publish(api, T, nested(6))).status_code == 202
    secret = "hmac-secret"
    src = await api.client.post(
        "/v1/sources",
        json={"tenant": T, "kind": "hmac", "secret": secret, "default_event_type": "deep"},
    )
    assert src.status_code == 201, src.text
    raw = ('{"a":' * 24 + "{}" + "}" * 24).encode()
    sig = hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    before = await snapshot(api, T)
    started = asyncio.get_running_loop().time()
    body = assert_problem(await _publish(api, T, nested(24)), 422, "payload")
    assert body["error"] == "schema_too_costly" and "steps" in body["detail"], body
    inbound = await api.client.post(
        f"/in/{src.json()['id']}",
        content=raw,
        headers={"content-type": "application/json", "x-signature": sig},
    )
    assert assert_problem(inbound, 422, "payload")["error"] == "schema_too_costly"
    assert asyncio.get_running_loop().time() - started < 10
    assert await snapshot(api, T) == before  # nothing stored or counted


async def test_validation_waits_for_no_one_and_no_one_waits_for_it(
    api: Api, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one tenant's payload is being validated (held here until released), another
    tenant's publish (judged by a schema too) and GET /healthz answer. It ran on the event
    loop under the write lock: both waited until it ended (7.6 s in the issue)."""
    assert (await api.client.post("/v1/tenants", json={"id": OTHER, "name": "G"})).is_success
    await _type(api, T, EXPONENTIAL)
    await _type(api, OTHER, {"type": "object", "required": ["id"]}, "order")
    started, release = threading.Event(), threading.Event()
    timed_out: list[bool] = []
    original = schema_validator.best_match

    def held(errors: Any, *args: Any, **kwargs: Any) -> Any:
        if not started.is_set():  # the first validation: acme's
            started.set()
            timed_out.append(not release.wait(10))  # on the loop, nothing could release it
        return original(errors, *args, **kwargs)

    monkeypatch.setattr(schema_validator, "best_match", held)
    slow = asyncio.create_task(_publish(api, T, nested(6)))
    try:
        assert await asyncio.to_thread(started.wait, 10)
        other = await _publish(api, OTHER, {"id": 1}, "order")
        health = await api.client.get("/healthz")
        assert not slow.done()  # still being validated
        assert other.status_code == 202, other.text
        assert health.status_code == 200
    finally:
        release.set()
    assert (await slow).status_code == 202
    assert timed_out == [False]


async def test_a_schema_is_checked_off_the_event_loop(
    api: Api, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checking a schema at registration costs up to seconds for one of 256 KB (the
    metaschema's validation): /healthz answers meanwhile (held here until released)."""
    started, release = threading.Event(), threading.Event()
    timed_out: list[bool] = []
    original = schema_checks._regex_problems

    def held(schema: Any, *args: Any) -> Any:
        started.set()
        timed_out.append(not release.wait(10))  # on the loop, nothing could release it
        return original(schema, *args)

    monkeypatch.setattr(schema_checks, "_regex_problems", held)
    made = asyncio.create_task(
        api.client.post(f"/v1/tenants/{T}/event-types", json={"name": "x", "schema": {}})
    )
    try:
        assert await asyncio.to_thread(started.wait, 10)
        assert (await api.client.get("/healthz")).status_code == 200
        assert not made.done()
    finally:
        release.set()
    assert (await made).status_code == 201
    assert timed_out == [False]


@pytest.mark.parametrize("path", ["publish", "test-filter"])
async def test_filters_are_applied_off_the_event_loop(
    api: Api, tenant: str, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A filter of 256 values over a 256 KB payload takes up to about 0.5 s, for each of
    a tenant's endpoints, and ran on the event loop under the write lock: another tenant's
    publish and /healthz answer while one is applied (held here until released)."""
    assert (await api.client.post("/v1/tenants", json={"id": OTHER, "name": "G"})).is_success
    made = await api.client.post(
        f"/v1/tenants/{T}/endpoints",
        json={"url": "http://127.0.0.1:9/x", "filter": {"a": {"$eq": {"k": 1}}}},
    )
    assert made.status_code == 201, made.text
    started, release = threading.Event(), threading.Event()
    timed_out: list[bool] = []
    original = filters.json_equal

    def held(a: Any, b: Any) -> bool:
        if not started.is_set():
            started.set()
            timed_out.append(not release.wait(10))  # on the loop, nothing could release it
        return original(a, b)

    monkeypatch.setattr(filters, "json_equal", held)  # the reference evaluator (test-filter)
    monkeypatch.setattr(filter_compiler, "json_equal", held)  # compiled predicates (publish)
    if path == "publish":
        slow = asyncio.create_task(_publish(api, T, {"a": {"k": 1}}, "x"))
    else:
        slow = asyncio.create_task(
            api.client.post(
                f"/v1/tenants/{T}/endpoints/{made.json()['id']}/test-filter",
                json={"payload": {"a": {"k": 1}}},
            )
        )
    try:
        assert await asyncio.to_thread(started.wait, 10)
        assert (await _publish(api, OTHER, {"id": 1}, "order")).status_code == 202
        assert (await api.client.get("/healthz")).status_code == 200
        assert not slow.done()
    finally:
        release.set()
    resp = await slow
    assert resp.status_code == (202 if path == "publish" else 200), resp.text
    assert timed_out == [False]
    if path == "test-filter":
        assert resp.json()["matches"] is True
