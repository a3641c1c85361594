"""The SDK and the node's API agree: every operation of ``/openapi.json`` is in the SDK's
table and every table entry is in the document, with the same query parameters, body,
success status and response type; ``types.py`` is what codegen.py makes of the
document's schemas."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from regionsync_client import OPERATIONS, AsyncClient, Client
from regionsync_client import types as sdk_types

HERE = Path(__file__).resolve().parents[1]
docs = pytest.importorskip("regionsync.docs")  # the node package (the repository's venv)


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return docs.openapi_document()


def _operations(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(m.upper(), p): op for p, ops in doc["paths"].items() for m, op in ops.items()}


def test_every_api_operation_is_in_the_sdk_and_back(doc: dict[str, Any]) -> None:
    api = set(_operations(doc))
    sdk = {(op.method, op.path) for op in OPERATIONS}
    assert not api - sdk, f"operations the SDK lacks: {sorted(api - sdk)}"
    assert not sdk - api, f"SDK operations the API lacks: {sorted(sdk - api)}"
    assert len(sdk) == len(OPERATIONS), "an operation is declared twice"
    assert len({op.name for op in OPERATIONS}) == len(OPERATIONS)


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.name)
def test_each_operation_matches_the_document(doc: dict[str, Any], op: Any) -> None:
    spec = _operations(doc)[(op.method, op.path)]
    params = spec.get("parameters", [])
    assert set(op.query) == {p["name"] for p in params if p["in"] == "query"}
    path = [p["name"] for p in params if p["in"] == "path"]
    assert sorted(path) == sorted(op.path.replace("}", "{").split("{")[1::2])
    assert op.body == ("requestBody" in spec), op.name
    ok = [int(s) for s in spec["responses"] if s.startswith("2")]
    assert ok == [op.status], op.name
    content = spec["responses"][str(op.status)].get("content", {})
    ref = content.get("application/json", {}).get("schema", {}).get("$ref")
    assert (ref.rsplit("/", 1)[-1] if ref else None) == op.returns, op.name
    if op.returns:
        assert hasattr(sdk_types, op.returns)
    for client in (Client, AsyncClient):
        assert callable(getattr(client, op.name))


def test_types_and_signatures_are_generated_from_the_document(doc: dict[str, Any]) -> None:
    spec = importlib.util.spec_from_file_location("codegen", HERE / "codegen.py")
    assert spec is not None and spec.loader is not None
    codegen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(codegen)
    for path, text in codegen.render(doc).items():
        stale = f"{path.name} is stale: run python clients/python/codegen.py"
        assert path.read_text() == text, stale


def test_publish_body_accepts_the_sdk_event_id(doc: dict[str, Any]) -> None:
    import re

    from regionsync_client.ulid import EVENT_ID_RE, new_event_id

    spec = _operations(doc)[("POST", "/v1/tenants/{tenant}/events")]
    schema = spec["requestBody"]["content"]["application/json"]["schema"]
    id_schema = schema["properties"]["id"]
    pattern = id_schema.get("pattern") or id_schema["anyOf"][0]["pattern"]
    assert pattern == f"^{EVENT_ID_RE.pattern}$"
    assert re.fullmatch(pattern, new_event_id())
