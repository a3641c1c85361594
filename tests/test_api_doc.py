"""docs/api.md is what ``python -m regionsync.docs`` generates from /openapi.json."""

from __future__ import annotations

from regionsync.docs import DOC_PATH, openapi_document, render_markdown


def test_committed_api_reference_is_up_to_date() -> None:
    doc = openapi_document()
    text = render_markdown(doc)
    assert DOC_PATH.read_text() == text, "docs/api.md is stale: run python -m regionsync.docs"
    for route in ("`GET /v1/tenants`", "`GET /v1/tenants/{tenant}/events`", "bearerAuth"):
        assert route in text
