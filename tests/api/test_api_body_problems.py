"""Every request body's edge checks answer the exact problem body: an unknown, refused or
missing member and the first bad value, in the order the checks run (issue 39: the bodies
are judged by the models of adapters/routes/bodies.py; these answers were recorded before
them and must not change)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from api_support import Api, running_node

from regionsync.adapters.routes.bodies import EventTypeIn, EventTypePatch, SourceIn
from regionsync.core.sources import KIND_FIELDS

pytestmark = pytest.mark.asyncio(loop_scope="module")

T = "acme"
OK_URL = "http://127.0.0.1:9/hook"
EP = "/v1/tenants/acme/endpoints/<ep>"
MANAGE = "manage"  # send with the tenant's manage token instead of the admin's

# (method, path, body, who) -> (status, problem body)
CASES: list[tuple[str, str, dict[str, Any], str | None]] = [
    # tenants
    ("POST", "/v1/tenants", {"name": "x", "bogus": 1, "aaa": 2}, None),
    ("POST", "/v1/tenants", {}, None),
    (
        "POST",
        "/v1/tenants",
        {"name": "x", "delivery_max_in_flight": 0, "publish_rate_per_s": 0},
        None,
    ),  # fmt: skip
    (
        "POST",
        "/v1/tenants",
        {
            "name": "x",
            "delivery_max_in_flight": 16.0,
            "publish_rate_per_s": True,
            "ack_policy": "z",
        },
        None,
    ),  # fmt: skip
    ("POST", "/v1/tenants", {"name": "", "ack_policy": "z"}, None),
    ("POST", "/v1/tenants", {"name": "x", "ack_policy": "z", "strict_event_types": 1}, None),
    ("POST", "/v1/tenants", {"name": "x", "strict_event_types": 1, "id": "a b"}, None),
    ("POST", "/v1/tenants", {"name": "a\u0001", "id": "a b"}, None),
    ("POST", "/v1/tenants", {"name": "a\u202e"}, None),
    ("POST", "/v1/tenants", {"id": "..", "name": "x"}, None),
    ("PATCH", "/v1/tenants/acme", {"zz": 1, "name": 5}, None),
    ("PATCH", "/v1/tenants/acme", {"publish_rate_per_s": 0, "name": ""}, None),
    ("PATCH", "/v1/tenants/acme", {"name": 1, "ack_policy": "z"}, None),
    ("PATCH", "/v1/tenants/acme", {"ack_policy": "z"}, None),
    ("PATCH", "/v1/tenants/acme", {"strict_event_types": "no"}, None),
    ("PATCH", "/v1/tenants/acme", {"zz": 1, "ack_policy": "local"}, MANAGE),
    ("PATCH", "/v1/tenants/acme", {"name": "", "ack_policy": "zz"}, MANAGE),
    ("PATCH", "/v1/tenants/acme", {"name": "", "publish_rate_per_s": 5}, MANAGE),
    ("PATCH", "/v1/tenants/acme", {"name": ""}, MANAGE),
    ("PATCH", "/v1/tenants/nope", {"name": ""}, None),
    # endpoints
    ("POST", "/v1/tenants/acme/endpoints", {"id": "x", "bogus": 1}, None),
    ("POST", "/v1/tenants/acme/endpoints", {"bogus": 1, "url": OK_URL}, None),
    ("POST", "/v1/tenants/acme/endpoints", {"disabled": True, "url": OK_URL}, None),
    ("POST", "/v1/tenants/acme/endpoints", {"event_types": []}, None),
    ("POST", "/v1/tenants/acme/endpoints", {"url": "ftp://x", "description": 5}, None),
    (
        "POST",
        "/v1/tenants/acme/endpoints",
        {"url": OK_URL, "description": 5, "rate_limit_per_s": 0},
        None,
    ),  # fmt: skip
    (
        "POST",
        "/v1/tenants/acme/endpoints",
        {"url": OK_URL, "rate_limit_per_s": 0, "max_in_flight": 0},
        None,
    ),  # fmt: skip
    (
        "POST",
        "/v1/tenants/acme/endpoints",
        {"url": OK_URL, "max_in_flight": 16.5, "headers": []},
        None,
    ),  # fmt: skip
    (
        "POST",
        "/v1/tenants/acme/endpoints",
        {"url": OK_URL, "headers": {"Host": "x"}, "secret": "nope"},
        None,
    ),  # fmt: skip
    ("POST", "/v1/tenants/acme/endpoints", {"url": OK_URL, "headers": {"X-A": "\u0001"}}, None),
    (
        "POST",
        "/v1/tenants/acme/endpoints",
        {"url": OK_URL, "headers": {"x-a": "1", "X-A": "2"}},
        None,
    ),  # fmt: skip
    (
        "POST",
        "/v1/tenants/acme/endpoints",
        {"url": OK_URL, "secret": "nope", "payload_format": "x"},
        None,
    ),  # fmt: skip
    ("POST", "/v1/tenants/acme/endpoints", {"url": OK_URL, "secret": "whsec_AAAA"}, None),
    (
        "POST",
        "/v1/tenants/acme/endpoints",
        {"url": OK_URL, "paused": "yes", "payload_format": "x"},
        None,
    ),  # fmt: skip
    (
        "POST",
        "/v1/tenants/acme/endpoints",
        {"url": OK_URL, "paused": "yes", "filter": {"$bogus": 1}},
        None,
    ),  # fmt: skip
    (
        "POST",
        "/v1/tenants/acme/endpoints",
        {"url": OK_URL, "filter": {"$bogus": 1}, "event_types": ["a b"]},
        None,
    ),  # fmt: skip
    ("POST", "/v1/tenants/acme/endpoints", {"url": OK_URL, "event_types": ["a", "a b"]}, None),
    ("POST", "/v1/tenants/acme/endpoints", {"url": OK_URL, "event_types": "a"}, None),
    ("PATCH", EP, {"bogus": 1, "url": "x"}, None),
    ("PATCH", EP, {"id": "x"}, None),
    ("PATCH", EP, {"event_types_add": ["a"], "event_types_remove": ["a"]}, None),
    ("PATCH", EP, {"event_types": ["b"], "event_types_remove": ["b"]}, None),
    ("PATCH", EP, {"secret": None, "description": 5}, None),
    ("PATCH", EP, {"disabled": "x", "paused": True}, None),
    ("PATCH", EP, {"url": "http://u:p@127.0.0.1/"}, None),
    ("POST", EP + "/test-filter", {"x": 1, "payload": 1}, None),
    ("POST", EP + "/test-filter", {}, None),
    # events
    ("POST", "/v1/tenants/acme/events", {"event_type": "a", "payload": 1, "zz": 1}, None),
    ("POST", "/v1/tenants/acme/events", {"payload": 1}, None),
    ("POST", "/v1/tenants/acme/events", {"event_type": "a"}, None),
    ("POST", "/v1/tenants/acme/events", {"event_type": "a b", "payload": 1}, None),
    ("POST", "/v1/tenants/acme/events", {"event_type": 5, "payload": 1}, None),
    # sources
    ("POST", "/v1/sources", {"id": "x", "tenant": "acme", "zz": 1}, None),
    ("POST", "/v1/sources", {"zz": 1, "tenant": "acme"}, None),
    ("POST", "/v1/sources", {"kind": "github", "header": "x"}, None),
    ("POST", "/v1/sources", {"tenant": "acme", "kind": "hmac", "header": "x"}, None),
    ("POST", "/v1/sources", {"tenant": "acme", "kind": "nope", "secret": "s"}, None),
    (
        "POST",
        "/v1/sources",
        {"tenant": "acme", "kind": "standard-webhooks", "secret": "s"},
        None,
    ),  # fmt: skip
    (
        "POST",
        "/v1/sources",
        {"tenant": "acme", "kind": "hmac", "secret": "s", "id_from": "body:x"},
        None,
    ),  # fmt: skip
    ("POST", "/v1/sources", {"tenant": "nope", "kind": "github", "secret": "s"}, None),
    # tokens
    ("POST", "/v1/tokens", {"scope": "admin", "name": "n", "zz": 1}, None),
    ("POST", "/v1/tokens", {"name": "n"}, None),
    ("POST", "/v1/tokens", {"scope": "admin"}, None),
    ("POST", "/v1/tokens", {"scope": "bad", "name": "", "expires_at": 5}, None),
    ("POST", "/v1/tokens", {"scope": "bad", "name": "", "expires_at": "nope"}, None),
    ("POST", "/v1/tokens", {"scope": "bad", "name": ""}, None),
    ("POST", "/v1/tokens", {"scope": "admin", "name": ""}, None),
    (
        "POST",
        "/v1/tokens",
        {"scope": "admin", "name": "n", "expires_at": "2000-01-01T00:00:00Z"},
        None,
    ),  # fmt: skip
    ("POST", "/v1/tokens", {"scope": "tenant:nope:read", "name": "n"}, None),
    # event types
    ("POST", "/v1/tenants/acme/event-types", {"name": "a", "zz": 1}, None),
    ("POST", "/v1/tenants/acme/event-types", {}, None),
    ("POST", "/v1/tenants/acme/event-types", {"name": "a b", "description": 5}, None),
    (
        "POST",
        "/v1/tenants/acme/event-types",
        {"name": "a", "description": 5, "schema": "x"},
        None,
    ),  # fmt: skip
    (
        "POST",
        "/v1/tenants/acme/event-types",
        {"name": "a", "schema": "string", "deprecated": "x"},
        None,
    ),  # fmt: skip
    ("POST", "/v1/tenants/nope/event-types", {"name": "a", "zz": 1}, None),
    ("PATCH", "/v1/tenants/acme/event-types/a", {"name": "a"}, None),
    ("PATCH", "/v1/tenants/acme/event-types/a", {"deprecated": 1}, None),
    # recovery jobs
    ("POST", EP + "/recover", {"zz": 1, "since": 5}, None),
    ("POST", EP + "/recover", {}, None),
    ("POST", EP + "/replay-missing", {"since": 5}, None),
    ("POST", EP + "/replay-missing", {"since": "x"}, None),
    ("POST", EP + "/recover", {"since": "2999-01-01T00:00:00Z"}, None),
    ("POST", EP + "/recover", {"since": "2020-01-01T00:00:00"}, None),
]

EXPECTED: list[tuple[int, dict[str, Any]]] = json.loads(
    (Path(__file__).parent / "body_problems.json").read_text()
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Api, str, str]]:
    """A node with tenant ``acme``, one endpoint of it and a manage token: (api, endpoint
    id, token)."""
    async with running_node(tmp_path_factory.mktemp("body-problems")) as api:
        resp = await api.client.post("/v1/tenants", json={"id": T, "name": "Acme"})
        assert resp.status_code == 201, resp.text
        resp = await api.client.post(f"/v1/tenants/{T}/endpoints", json={"url": OK_URL})
        assert resp.status_code == 201, resp.text
        ep = resp.json()["id"]
        resp = await api.client.post("/v1/tokens", json={"scope": f"tenant:{T}:manage",
                                                         "name": "m"})  # fmt: skip
        assert resp.status_code == 201, resp.text
        yield api, ep, resp.json()["token"]


async def _answers(shared: tuple[Api, str, str]) -> list[tuple[int, dict[str, Any]]]:
    api, ep, token = shared
    out = []
    for method, path, body, who in CASES:
        headers = {"authorization": f"Bearer {token}"} if who == MANAGE else {}
        resp = await api.client.request(
            method, path.replace("<ep>", ep), json=body, headers=headers
        )
        out.append((resp.status_code, resp.json()))
    return out


async def test_each_body_check_answers_the_recorded_problem(
    shared: tuple[Api, str, str],
) -> None:
    got = await _answers(shared)
    if os.environ.get("RECORD_BODY_PROBLEMS"):  # write the answers of the code under test
        (Path(__file__).parent / "body_problems.json").write_text(
            json.dumps([list(g) for g in got], indent=1, ensure_ascii=False) + "\n"
        )
    assert len(EXPECTED) == len(CASES)
    for case, want, answer in zip(CASES, EXPECTED, got, strict=True):
        assert list(answer) == list(want), case


async def test_models_name_the_members_the_core_checks_take() -> None:
    """The bodies whose values core functions judge as a whole (sources, event types)
    have the members those functions take (the id of a source is refused first;
    core.event_types.check_event_type_fields)."""
    kind_specific = {f for fields in KIND_FIELDS.values() for f in fields}
    assert SourceIn._known == {"tenant", "kind", "secret", "priority", "ack_policy"} | (
        kind_specific
    )
    assert EventTypeIn._known == {"name", "description", "schema", "deprecated"}
    assert EventTypePatch._known == EventTypeIn._known - {"name"}
