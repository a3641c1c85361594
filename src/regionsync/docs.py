"""The HTTP API reference ``docs/api.md``, generated from the node's ``/openapi.json``.

``python -m regionsync.docs`` rewrites ``docs/api.md``; ``python -m regionsync.docs
--check`` exits 1 if the committed file differs (tests/test_api_doc.py runs the same
comparison). The document is built from an app over an unstarted node (no file, socket
or network is touched), so it is the same on every machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["DOC_PATH", "openapi_document", "render_markdown"]

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "api.md"
_METHODS = ("get", "post", "put", "patch", "delete")


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document ``GET /openapi.json`` serves (a node that is never started)."""
    from .adapters.http_api import create_app
    from .adapters.memory_store import MemoryStore
    from .adapters.memory_transport import MemoryNetwork
    from .adapters.system import SystemClock, SystemResolver, UlidSource, system_rng
    from .config import load_settings
    from .runtime.node import Node

    class _NoSender:
        async def send(self, request: Any) -> Any:  # never called: the node is not started
            raise RuntimeError("documentation node does not deliver")

    settings = load_settings(None, region="docs", http_listen="127.0.0.1:8080")
    clock, rng = SystemClock(), system_rng()
    node = Node(
        settings, store=MemoryStore(), clock=clock, rng=rng, ids=UlidSource(clock, rng),
        transport=MemoryNetwork().transport("docs"), sender=_NoSender(),
        resolver=SystemResolver(),
    )  # fmt: skip
    return create_app(node).app.openapi()


def _type(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    return str(schema.get("type", "any"))


def _error_responses(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every error status any operation declares (the same problem body for each)."""
    out: dict[str, dict[str, Any]] = {}
    for ops in doc["paths"].values():
        for op in ops.values():
            out.update({c: r for c, r in op.get("responses", {}).items() if int(c) >= 400})
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_markdown(doc: dict[str, Any]) -> str:
    """Markdown of an OpenAPI document: one section per operation, in path order, with
    its description, parameters, request body fields, responses and authentication."""
    schemes = doc.get("components", {}).get("securitySchemes", {})
    out = [
        f"# {doc['info']['title']} HTTP API {doc['info']['version']}",
        "",
        "Generated from `/openapi.json` by `python -m regionsync.docs`; do not edit by "
        "hand. The live document is served at `/openapi.json` and rendered at `/docs`.",
        "",
        "Errors are the JSON problem body `{error, detail, field}`; `field` names the "
        "offending parameter or member. Lists answer `{items, next}`: pass `next` as "
        "`cursor` for the following page (null on the last page).",
        "",
        "| error status | meaning |",
        "|---|---|",
        *(
            f"| {code} | {_cell(r.get('description', ''))} |"
            for code, r in sorted(_error_responses(doc).items())
        ),
        "",
        "## Authentication",
        "",
    ]
    for name, s in sorted(schemes.items()):
        out.append(f"- `{name}`: {s['type']} {s.get('scheme', '')}. {s.get('description', '')}")
    out += ["", "## Operations", ""]
    default_security = doc.get("security", [])
    for path in sorted(doc["paths"]):
        for method in _METHODS:
            op = doc["paths"][path].get(method)
            if op is None:
                continue
            out += [f"### `{method.upper()} {path}`", ""]
            if op.get("description"):
                out += [" ".join(op["description"].split()), ""]
            security = op.get("security", default_security)
            out += [f"Authentication: {'bearer token' if security else 'none'}.", ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | type |", "|---|---|---|---|"]
                for p in params:
                    t = _type(p.get("schema", {}))
                    req = "yes" if p.get("required") else "no"
                    out.append(f"| `{p['name']}` | {p['in']} | {req} | {_cell(t)} |")
                out.append("")
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                schema = body["schema"]
                required = set(schema.get("required", []))
                out += ["| body member | required | type | description |", "|---|---|---|---|"]
                for name, prop in schema.get("properties", {}).items():
                    req = "yes" if name in required else "no"
                    desc = _cell(prop.get("description", ""))
                    out.append(f"| `{name}` | {req} | {_cell(_type(prop))} | {desc} |")
                out.append("")
            ok = sorted(c for c in op.get("responses", {}) if int(c) < 400)
            shown = []
            for c in ok:
                ref = (op["responses"][c].get("content", {}).get("application/json", {})
                       .get("schema", {}).get("$ref", ""))  # fmt: skip
                shown.append(f"{c} (`{ref.rsplit('/', 1)[1]}`)" if ref else c)
            out += [f"Success: {', '.join(shown)}; errors: the problem body.", ""]
    out += _response_bodies(doc)
    return "\n".join(out).rstrip() + "\n"


def _response_bodies(doc: dict[str, Any]) -> list[str]:
    """A section per success-body schema the operations reference: members and types."""
    schemas = doc.get("components", {}).get("schemas", {})
    used = sorted(
        {
            body["schema"]["$ref"].rsplit("/", 1)[1]
            for ops in doc["paths"].values()
            for op in ops.values()
            for resp in op.get("responses", {}).values()
            if (body := resp.get("content", {}).get("application/json"))
            and "$ref" in body.get("schema", {})
            and body["schema"]["$ref"].rsplit("/", 1)[1] != "Problem"
        }
    )
    out = ["## Response bodies", ""]
    for name in used:
        schema = schemas.get(name, {})
        parts = schema.get("allOf", [schema])
        out += [f"### `{name}`", "", "| member | type |", "|---|---|"]
        for part in parts:
            if "$ref" in part:
                out.append(f"| (all of `{part['$ref'].rsplit('/', 1)[1]}`) | |")
            for member, prop in part.get("properties", {}).items():
                out.append(f"| `{member}` | {_cell(_type(prop))} |")
        out.append("")
    return out


def main(argv: list[str]) -> int:
    """``python -m regionsync.docs [--check | --json]``: rewrite docs/api.md, compare it
    (exit 1 when it differs), or print the OpenAPI document. argparse handles ``--help``
    and refuses an unknown argument (exit 2) before anything is written."""
    parser = argparse.ArgumentParser(
        prog="python -m regionsync.docs",
        description=f"Generate {DOC_PATH.name} (the HTTP API reference) from /openapi.json.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help=f"exit 1 if {DOC_PATH} differs from what would be written")  # fmt: skip
    mode.add_argument("--json", action="store_true", help="print the OpenAPI document")
    args = parser.parse_args(argv)
    if args.json:
        sys.stdout.write(json.dumps(openapi_document(), indent=1, sort_keys=True) + "\n")
        return 0
    text = render_markdown(openapi_document())
    if args.check:
        same = DOC_PATH.is_file() and DOC_PATH.read_text() == text
        if not same:
            print(f"{DOC_PATH} is out of date: run python -m regionsync.docs", file=sys.stderr)
        return 0 if same else 1
    DOC_PATH.parent.mkdir(parents=True, exist_ok=True)
    DOC_PATH.write_text(text)
    print(f"wrote {DOC_PATH}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
