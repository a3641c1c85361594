"""Matching against the real GitHub payloads of tests/data/github-webhooks (a subset:
one example per event type, see its README.md).

The event type of a GitHub delivery is ``<event>.<action>`` (``push`` when there is no
action), so ``issues.*`` and exact subscriptions both get exercised.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from regionsync.core.filter_compiler import compile_filter
from regionsync.core.filters import explain, reference_match
from regionsync.core.matching import SubscriptionIndex
from regionsync.core.registry import EndpointView

DATASET = Path(__file__).resolve().parents[1] / "data/github-webhooks"


def _load() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    manifest = json.loads((DATASET / "MANIFEST.json").read_text(encoding="utf-8"))
    out = []
    for row in manifest["files"]:
        payload = json.loads((DATASET / row["file"]).read_bytes())
        event_type = row["event"] + (f".{row['action']}" if row["action"] else "")
        out.append((event_type, row, payload))
    return out


EVENTS = _load()

FILTERS: list[Any] = [
    {"repository.full_name": "Codertocat/Hello-World"},
    {"repository": {"full_name": {"$in": ["octo-org/octo-repo", "Octocoders/Hello-World"]}}},
    {"action": "opened", "sender.type": "User"},
    {"sender.type": {"$neq": "User"}},
    {"sender.type": {"$in": ["Bot", "Organization"]}},
    {"action": {"$exist": False}},
    {"issue.labels.name": "bug"},
    {"issue.labels": {"name": {"$startsWith": "enh"}}},
    {"repository.stargazers_count": {"$gte": 1}},
    {"repository.private": False, "repository.fork": {"$neq": True}},
    {"ref": {"$startsWith": "refs/tags/"}},
    {"commits.author.name": {"$exist": True}},
    {"$or": [{"action": {"$endsWith": "ed"}}, {"ref": {"$contains": "main"}}]},
    {"$not": {"repository.owner.login": {"$in": ["Codertocat", "octo-org"]}}},
    {"pull_request.head.repo.full_name": {"$contains": "/"}, "action": {"$nin": ["closed"]}},
    {"sender": {"login": {"$gt": "N"}, "site_admin": False}},
    {"installation.id": {"$lt": 0}},
]


def _view(eid: str, tenant: str, types: tuple[str, ...], flt: Any) -> EndpointView:
    return EndpointView(
        id=eid,
        tenant=tenant,
        url="https://example.com/hook",
        event_types=types,
        filter=flt,
        description="",
        rate_limit_per_s=50,
        max_in_flight=16,
        headers={},
        paused=False,
        disabled=False,
        secret="",
        created_at_ms=0,
        updated_at_ms=0,
    )


def test_dataset_is_the_one_we_expect() -> None:
    assert len(EVENTS) == 66  # the subset of tests/data/github-webhooks/README.md
    assert len({row["event"] for _, row, _ in EVENTS}) == 64


@pytest.mark.parametrize("doc", FILTERS, ids=lambda d: json.dumps(d)[:60])
def test_compiled_agrees_with_reference_on_every_payload(doc: Any) -> None:
    predicate = compile_filter(doc)
    matched = [predicate(payload) for _, _, payload in EVENTS]
    assert matched == [reference_match(doc, payload) for _, _, payload in EVENTS]


def test_filter_selectivity_on_known_fields() -> None:
    def count(doc: Any) -> int:
        predicate = compile_filter(doc)
        return sum(predicate(p) for _, _, p in EVENTS)

    full_names = Counter(p.get("repository", {}).get("full_name") for _, _, p in EVENTS)
    assert count(FILTERS[0]) == full_names["Codertocat/Hello-World"] > 30
    assert (
        count(FILTERS[1]) == full_names["octo-org/octo-repo"] + full_names["Octocoders/Hello-World"]
    )
    senders = Counter(p.get("sender", {}).get("type") for _, _, p in EVENTS)
    assert count({"sender.type": "Bot"}) == senders["Bot"] > 0
    # missing sender counts as "not User" (negation holds on a missing field)
    assert count(FILTERS[3]) == len(EVENTS) - senders["User"]
    no_action = sum(1 for _, row, _ in EVENTS if row["action"] is None)
    assert count(FILTERS[5]) == no_action
    opened_by_user = sum(
        1 for _, row, p in EVENTS if row["action"] == "opened" and p["sender"]["type"] == "User"
    )
    assert count(FILTERS[2]) == opened_by_user > 0
    # labels is an array of objects: any element's name
    labelled_bug = sum(
        1
        for _, _, p in EVENTS
        if any(label.get("name") == "bug" for label in (p.get("issue") or {}).get("labels") or [])
    )
    assert count(FILTERS[6]) == labelled_bug > 0


def test_index_routes_github_events() -> None:
    idx = SubscriptionIndex(
        [
            _view("ep_issues_hello", "acme", ("issues.*",), FILTERS[0]),
            _view("ep_opened", "acme", ("issues.opened", "pull_request.opened"), FILTERS[2]),
            _view("ep_push_tags", "acme", ("push",), FILTERS[10]),
            _view("ep_bots", "initech", ("*",), {"sender.type": "Bot"}),
            _view("ep_other", "globex", (), None),
        ]
    )
    routed: Counter[str] = Counter()
    for event_type, row, payload in EVENTS:
        got = idx.match("acme", event_type, payload)
        routed.update(got)
        routed.update(idx.match("initech", event_type, payload))
        if row["event"] == "issues" and payload["repository"]["full_name"] == (
            "Codertocat/Hello-World"
        ):
            assert "ep_issues_hello" in got
        if not event_type.startswith(("issues.", "pull_request.", "push")):
            assert got == []
    assert routed["ep_opened"] == sum(
        1
        for e, _, p in EVENTS
        if e in ("issues.opened", "pull_request.opened") and p["sender"]["type"] == "User"
    )
    assert routed["ep_push_tags"] == sum(
        1 for e, _, p in EVENTS if e == "push" and p["ref"].startswith("refs/tags/")
    )
    assert routed["ep_bots"] == 1  # check_suite.rerequested.1.json
    # second pass: every type without a candidate for acme is a negative-cache hit
    with_candidates = sum(1 for e, _, _ in EVENTS if idx.candidates("acme", e))
    hits, misses = idx.hits, idx.misses
    for event_type, _, payload in EVENTS:
        idx.match("acme", event_type, payload)
    assert idx.misses - misses == with_candidates
    assert idx.hits - hits == len(EVENTS) - with_candidates > 50


def test_explain_on_a_github_payload() -> None:
    payload = next(p for e, _, p in EVENTS if e == "issues.opened")
    doc = {"repository.full_name": "Codertocat/Hello-World", "action": "closed"}
    assert explain(doc, payload) == (False, "action.$eq")
    assert explain({"sender": {"type": {"$in": ["Bot"]}}}, payload) == (False, "sender.type.$in")
