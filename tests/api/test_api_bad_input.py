"""Bad input against one real node: every rejection is the JSON problem body of
docs/api.md with the right status and ``field``, never a 500, and nothing is written
(registry hash, version vector, event/delivery counts and the endpoint list unchanged)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from api_support import Api, assert_problem, running_node, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

T = "acme"
# Endpoint ids are generated: paths name the fixture's two endpoints by these stand-ins,
# which ``at`` replaces with the ids the node gave them.
EP, FUZZ_EP = "<ep-x>", "<ep-fuzz>"
JSON = {"content-type": "application/json"}
OK_URL = "http://127.0.0.1:9/hook"


# One node for the whole module: every case checks its own before/after snapshot, and the
# cases that write (fuzzing, the under-the-limit body) only add objects of their own.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Api]:
    """A node with tenant ``acme``."""
    async with running_node(tmp_path_factory.mktemp("bad-input")) as running:
        resp = await running.client.post("/v1/tenants", json={"id": T, "name": "Acme"})
        assert resp.status_code == 201, resp.text
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ids(shared: Api) -> dict[str, str]:
    """Two endpoints of ``acme`` (types a, b): stand-in -> generated id."""
    out = {}
    for stand_in in (EP, FUZZ_EP):
        resp = await shared.client.post(
            f"/v1/tenants/{T}/endpoints", json={"url": OK_URL, "event_types": ["a", "b"]}
        )
        assert resp.status_code == 201, resp.text
        out[stand_in] = resp.json()["id"]
    return out


def at(path: str, ids: dict[str, str]) -> str:
    for stand_in, eid in ids.items():
        path = path.replace(stand_in, eid)
    return path


def raw(data: bytes | str, ctype: str | None = "application/json") -> dict[str, Any]:
    content = data.encode() if isinstance(data, str) else data
    return {"content": content, "headers": {"content-type": ctype} if ctype else {}}


def ep(**fields: Any) -> dict[str, Any]:
    return {"json": {"url": OK_URL, **fields}}


TENANTS = f"/v1/tenants/{T}"
ENDPOINTS = f"{TENANTS}/endpoints"
ENDPOINT = f"{ENDPOINTS}/{EP}"
EVENTS = f"{TENANTS}/events"

# (method, path, request kwargs, status, field)
CASES: list[tuple[str, str, dict[str, Any], int, str | None]] = [
    # -- tenants
    ("POST", "/v1/tenants", raw("{"), 400, "body"),
    ("POST", "/v1/tenants", raw(b"\xff\xfe{}"), 400, "body"),
    ("POST", "/v1/tenants", raw(""), 400, "body"),
    ("POST", "/v1/tenants", raw('{"name": NaN}'), 400, "body"),
    ("POST", "/v1/tenants", raw("[1, 2]"), 422, "body"),
    ("POST", "/v1/tenants", raw('"name"'), 422, "body"),
    ("POST", "/v1/tenants", raw("null"), 422, "body"),
    ("POST", "/v1/tenants", {"json": {}}, 422, "name"),
    ("POST", "/v1/tenants", {"json": {"name": 5}}, 422, "name"),
    ("POST", "/v1/tenants", {"json": {"name": ""}}, 422, "name"),
    ("POST", "/v1/tenants", {"json": {"name": "x" * 257}}, 422, "name"),
    ("POST", "/v1/tenants", {"json": {"name": "x", "id": 5}}, 422, "id"),
    ("POST", "/v1/tenants", {"json": {"name": "x", "id": "a b"}}, 422, "id"),
    ("POST", "/v1/tenants", {"json": {"name": "x", "id": "a/b"}}, 422, "id"),
    ("POST", "/v1/tenants", {"json": {"name": "x", "plan": "gold"}}, 422, "plan"),
    ("POST", "/v1/tenants", raw('{"name": "x"}', "text/plain"), 415, "content-type"),
    ("POST", "/v1/tenants", raw('{"name": "x"}', None), 415, "content-type"),
    ("POST", "/v1/tenants", raw('{"name": "x"}', "application/xml"), 415, "content-type"),
    ("POST", "/v1/tenants", {"json": {"id": T, "name": "again"}}, 409, "id"),
    ("GET", "/v1/tenants/nope", {}, 404, "tenant"),
    ("DELETE", "/v1/tenants/nope", {}, 404, "tenant"),
    # -- endpoints: create
    ("POST", ENDPOINTS, raw("{"), 400, "body"),
    ("POST", ENDPOINTS, raw("[]"), 422, "body"),
    ("POST", ENDPOINTS, {"json": {}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": 5}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": None}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "ftp://127.0.0.1/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "file:///etc/passwd"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "not a url"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http:///nohost"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://u:p@127.0.0.1/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://127.0.0.1:99999/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://10.0.0.1/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://192.168.1.10/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://172.16.0.1/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://100.64.0.1/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://169.254.169.254/latest/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://0.0.0.0/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://127.0.0.2/"}}, 422, "url"),  # not in /32
    ("POST", ENDPOINTS, {"json": {"url": "http://[::1]/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://[fe80::1]/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://[fd00::1]/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://[::ffff:10.0.0.1]/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://[64:ff9b::a9fe:a9fe]/"}}, 422, "url"),
    ("POST", ENDPOINTS, {"json": {"url": "http://167772161/"}}, 422, "url"),  # 10.0.0.1
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "secrets": []}}, 422, "secrets"),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "id": "a b"}}, 422, "id"),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "id": "ep_1"}}, 422, "id"),  # generated
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "id": None}}, 422, "id"),
    (
        "POST",
        ENDPOINTS,
        {"json": {"url": OK_URL, "headers": {"webhook-id": "x"}}},
        422,
        "headers.webhook-id",
    ),
    (
        "POST",
        ENDPOINTS,
        {"json": {"url": OK_URL, "headers": {"Webhook-Signature": "v1,x"}}},
        422,
        "headers.Webhook-Signature",
    ),
    (
        "POST",
        ENDPOINTS,
        {"json": {"url": OK_URL, "headers": {"Host": "evil"}}},
        422,
        "headers.Host",
    ),
    (
        "POST",
        ENDPOINTS,
        {"json": {"url": OK_URL, "headers": {"X-A": "a\r\nX-B: b"}}},
        422,
        "headers.X-A",
    ),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "headers": ["X-A"]}}, 422, "headers"),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "event_types": "a"}}, 422, "event_types"),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "event_types": None}}, 422, "event_types"),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "event_types": ["a b"]}}, 422, "event_types[0]"),
    (
        "POST",
        ENDPOINTS,
        {"json": {"url": OK_URL, "event_types": ["ok", "x" * 129]}},
        422,
        "event_types[1]",
    ),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "event_types": [1]}}, 422, "event_types[0]"),
    ("POST", ENDPOINTS, ep(rate_limit_per_s="5"), 422, "rate_limit_per_s"),
    ("POST", ENDPOINTS, ep(rate_limit_per_s=0), 422, "rate_limit_per_s"),
    ("POST", ENDPOINTS, ep(rate_limit_per_s=True), 422, "rate_limit_per_s"),
    (
        "POST",
        ENDPOINTS,
        raw(f'{{"url": "{OK_URL}", "rate_limit_per_s": 1e400}}'),
        422,
        "rate_limit_per_s",
    ),  # fmt: skip
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "max_in_flight": 1.5}}, 422, "max_in_flight"),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "max_in_flight": 0}}, 422, "max_in_flight"),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "paused": "yes"}}, 422, "paused"),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "secret": "abc"}}, 422, "secret"),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "secret": "whsec_!!"}}, 422, "secret"),
    (
        "POST",
        ENDPOINTS,
        {"json": {"url": OK_URL, "filter": {"a": {"$regex": "x"}}}},
        422,
        "filter.a.$regex",
    ),
    (
        "POST",
        ENDPOINTS,
        {"json": {"url": OK_URL, "filter": {"a": {"$gt": []}}}},
        422,
        "filter.a.$gt",
    ),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "filter": [1]}}, 422, "filter"),
    ("POST", ENDPOINTS, {"json": {"url": OK_URL, "description": 5}}, 422, "description"),
    ("POST", ENDPOINTS, raw(f'{{"url": "{OK_URL}"}}', "text/plain"), 415, "content-type"),
    ("POST", "/v1/tenants/nope/endpoints", {"json": {"url": OK_URL}}, 404, "tenant"),
    ("GET", "/v1/tenants/nope/endpoints", {}, 404, "tenant"),
    ("GET", f"{ENDPOINTS}/nope", {}, 404, "endpoint"),
    ("DELETE", f"{ENDPOINTS}/nope", {}, 404, "endpoint"),
    # -- endpoints: patch
    ("PATCH", ENDPOINT, raw("{"), 400, "body"),
    ("PATCH", ENDPOINT, raw("[]"), 422, "body"),
    ("PATCH", ENDPOINT, {"json": {"url": "http://10.0.0.1/"}}, 422, "url"),
    ("PATCH", ENDPOINT, {"json": {"url": "http://[::1]:8080/"}}, 422, "url"),
    ("PATCH", ENDPOINT, {"json": {"url": None}}, 422, "url"),
    ("PATCH", ENDPOINT, {"json": {"nope": 1}}, 422, "nope"),
    ("PATCH", ENDPOINT, {"json": {"tenant": "other"}}, 422, "tenant"),
    ("PATCH", ENDPOINT, {"json": {"event_types_add": ["a b"]}}, 422, "event_types_add[0]"),
    ("PATCH", ENDPOINT, {"json": {"event_types_add": "c"}}, 422, "event_types_add"),
    ("PATCH", ENDPOINT, {"json": {"event_types_remove": [None]}}, 422, "event_types_remove[0]"),
    (
        "PATCH",
        ENDPOINT,
        {"json": {"description": "ok", "headers": {"webhook-timestamp": "1"}}},
        422,
        "headers.webhook-timestamp",
    ),
    ("PATCH", ENDPOINT, {"json": {"paused": None}}, 422, "paused"),
    ("PATCH", ENDPOINT, {"json": {"max_in_flight": 1001}}, 422, "max_in_flight"),
    ("PATCH", ENDPOINT, raw('{"paused": true}', "text/plain"), 415, "content-type"),
    ("PATCH", f"{ENDPOINTS}/nope", {"json": {"paused": True}}, 404, "endpoint"),
    # -- publish
    ("POST", EVENTS, raw("{"), 400, "body"),
    ("POST", EVENTS, raw('{"event_type": "a", "payload": Infinity}'), 400, "body"),
    ("POST", EVENTS, raw("[]"), 422, "body"),
    ("POST", EVENTS, raw("42"), 422, "body"),
    ("POST", EVENTS, {"json": {}}, 422, "event_type"),
    ("POST", EVENTS, {"json": {"payload": {}}}, 422, "event_type"),
    ("POST", EVENTS, {"json": {"event_type": "a"}}, 422, "payload"),
    ("POST", EVENTS, {"json": {"event_type": "a b", "payload": {}}}, 422, "event_type"),
    ("POST", EVENTS, {"json": {"event_type": "x" * 129, "payload": {}}}, 422, "event_type"),
    ("POST", EVENTS, {"json": {"event_type": "", "payload": {}}}, 422, "event_type"),
    ("POST", EVENTS, {"json": {"event_type": 5, "payload": {}}}, 422, "event_type"),
    ("POST", EVENTS, {"json": {"event_type": ["a"], "payload": {}}}, 422, "event_type"),
    ("POST", EVENTS, {"json": {"event_type": "a", "payload": {}, "x": 1}}, 422, "x"),
    ("POST", EVENTS, raw('{"event_type": "a", "payload": {}}', "text/plain"), 415, "content-type"),
    (
        "POST",
        EVENTS,
        {"json": {"event_type": "a", "payload": {}}, "headers": {"Idempotency-Key": ""}},
        422,
        "Idempotency-Key",
    ),
    (
        "POST",
        EVENTS,
        {"json": {"event_type": "a", "payload": {}}, "headers": {"Idempotency-Key": "k" * 257}},
        422,
        "Idempotency-Key",
    ),
    (
        "POST",
        EVENTS,
        # a C1 control character (U+0085, one latin-1 byte): refused like in every other id
        {"json": {"event_type": "a", "payload": {}}, "headers": {"Idempotency-Key": b"k\x85"}},
        422,
        "Idempotency-Key",
    ),
    (
        "POST",
        "/v1/tenants/nope/events",
        {"json": {"event_type": "a", "payload": {}}},
        404,
        "tenant",
    ),  # fmt: skip
    ("GET", f"{EVENTS}/evt_nope", {}, 404, "event"),
    ("GET", f"{TENANTS}/deliveries/dlv_nope/attempts", {}, 404, "delivery"),
    # -- delivery log query parameters
    ("GET", f"{ENDPOINT}/deliveries?limit=0", {}, 422, "limit"),
    ("GET", f"{ENDPOINT}/deliveries?limit=1001", {}, 422, "limit"),
    ("GET", f"{ENDPOINT}/deliveries?limit=-5", {}, 422, "limit"),
    ("GET", f"{ENDPOINT}/deliveries?limit=abc", {}, 422, "limit"),
    ("GET", f"{ENDPOINT}/deliveries?status=bogus", {}, 422, "status"),
    ("GET", f"{ENDPOINT}/deliveries?since=notatime", {}, 422, "since"),
    ("GET", f"{ENDPOINT}/deliveries?since=2024-01-01T00:00:00", {}, 422, "since"),
    ("GET", f"{ENDPOINTS}/nope/deliveries", {}, 404, "endpoint"),
    # -- routes and methods
    ("GET", "/nope", {}, 404, None),
    ("PATCH", "/v1/tenants", {}, 405, None),  # GET lists tenants (issue 15)
    ("PUT", TENANTS, {"json": {"name": "x"}}, 405, None),
    ("POST", "/v1/cluster", {"json": {}}, 405, None),
    ("DELETE", EVENTS, {}, 405, None),
]


def _case_id(case: tuple[str, str, dict[str, Any], int, str | None]) -> str:
    method, path, kw, status, field = case
    body = kw.get("json", kw.get("content", b""))
    text = body.decode(errors="replace") if isinstance(body, bytes) else json.dumps(body)
    return f"{method} {path.replace(TENANTS, '~')} {text[:40]} -> {status} {field}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
async def test_rejected_with_problem_body_and_nothing_written(
    shared: Api, ids: dict[str, str], case: tuple[str, str, dict[str, Any], int, str | None]
) -> None:
    method, path, kw, status, field = case
    before = await snapshot(shared, T)
    resp = await shared.client.request(method, at(path, ids), **kw)
    assert_problem(resp, status, field)
    assert await snapshot(shared, T) == before


@pytest.mark.parametrize("path", [ENDPOINTS, EVENTS, "/v1/tenants", ENDPOINT])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_body_over_256_kib_is_413_before_anything_is_written(
    shared: Api, ids: dict[str, str], path: str, chunked: bool
) -> None:
    body = json.dumps(
        {"event_type": "a", "payload": {"blob": "x" * (256 * 1024)}, "url": OK_URL}
    ).encode()
    assert len(body) > 256 * 1024

    async def stream() -> Any:
        for i in range(0, len(body), 16 * 1024):
            yield body[i : i + 16 * 1024]

    before = await snapshot(shared, T)
    method = "PATCH" if path == ENDPOINT else "POST"
    resp = await shared.client.request(
        method, at(path, ids), content=stream() if chunked else body, headers=JSON
    )
    assert_problem(resp, 413, "body")
    if chunked:
        assert resp.request.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in resp.request.headers
    else:
        assert resp.request.headers["content-length"] == str(len(body))
    assert await snapshot(shared, T) == before


async def test_body_just_under_the_limit_is_accepted(shared: Api) -> None:
    envelope = json.dumps({"event_type": "a", "payload": ""}).encode()
    body = envelope.replace(b'""', b'"' + b"x" * (256 * 1024 - len(envelope)) + b'"')
    assert len(body) == 256 * 1024
    resp = await shared.client.post(f"/v1/tenants/{T}/events", content=body, headers=JSON)
    assert resp.status_code == 202, resp.text[:300]


async def test_url_to_allowed_loopback_address_is_accepted(shared: Api) -> None:
    """The fixture's allow list holds 127.0.0.1/32 only: that address is accepted."""
    resp = await shared.client.post(f"/v1/tenants/{T}/endpoints", json={"url": OK_URL})
    assert resp.status_code == 201, resp.text


async def test_rejected_patch_leaves_every_field_as_it_was(
    shared: Api, ids: dict[str, str]
) -> None:
    """A PATCH whose later field is bad must not apply its earlier, valid fields."""
    endpoint = at(ENDPOINT, ids)
    before = (await shared.client.get(endpoint)).json()
    resp = await shared.client.patch(
        endpoint,
        json={
            "description": "changed",
            "paused": True,
            "event_types_add": ["c"],
            "event_types_remove": ["a"],
            "max_in_flight": "lots",
        },
    )
    assert_problem(resp, 422, "max_in_flight")
    assert (await shared.client.get(endpoint)).json() == before


# -- fuzzing: arbitrary JSON bodies never produce a 500 -----------------------------------

FUZZ = settings(
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
# URLs are IP literals or not http at all: the node must never resolve a name (and so
# never send DNS traffic) while fuzzing.
urls = (
    st.sampled_from(
        [OK_URL, "http://10.1.2.3/", "https://[::1]/", "ftp://127.0.0.1/", "", "http://", "x"]
    )
    | json_values
)
event_types = st.sampled_from(["a", "order.created", "a b", "x" * 129, ""]) | json_values


def _problem_or_success(resp: httpx.Response) -> None:
    assert resp.status_code < 500, resp.text
    if resp.status_code >= 400:
        assert_problem(resp, resp.status_code)


@FUZZ
@given(
    body=st.fixed_dictionaries(
        {}, optional={"event_type": event_types, "payload": json_values, "extra": json_values}
    )
    | json_values
)
async def test_fuzz_publish_never_500(shared: Api, body: Any) -> None:
    resp = await shared.client.post(EVENTS, json=body)
    _problem_or_success(resp)
    if resp.status_code == 202:
        ev = await shared.client.get(f"{EVENTS}/{resp.json()['id']}")
        assert ev.status_code == 200
        assert ev.json()["payload"] == body["payload"]


endpoint_bodies = st.fixed_dictionaries(
    {},
    optional={
        "url": urls,
        "event_types": st.lists(event_types, max_size=3) | json_values,
        "event_types_add": st.lists(event_types, max_size=3) | json_values,
        "event_types_remove": st.lists(event_types, max_size=3) | json_values,
        "description": json_values,
        "rate_limit_per_s": json_values,
        "max_in_flight": json_values,
        "headers": st.dictionaries(st.text(max_size=8), json_values, max_size=3) | json_values,
        "paused": json_values,
        "secret": json_values,
        "filter": json_values,
        "id": json_values,
    },
)


@FUZZ
@given(body=endpoint_bodies | json_values)
async def test_fuzz_endpoint_create_never_500(shared: Api, body: Any) -> None:
    _problem_or_success(await shared.client.post(ENDPOINTS, json=body))


@FUZZ
@given(body=endpoint_bodies | json_values)
async def test_fuzz_endpoint_patch_never_500(shared: Api, ids: dict[str, str], body: Any) -> None:
    _problem_or_success(await shared.client.patch(f"{ENDPOINTS}/{ids[FUZZ_EP]}", json=body))


@FUZZ
@given(body=st.binary(max_size=64))
async def test_fuzz_raw_bytes_never_500(shared: Api, body: bytes) -> None:
    for path in ("/v1/tenants", ENDPOINTS, EVENTS):
        _problem_or_success(await shared.client.post(path, content=body, headers=JSON))
