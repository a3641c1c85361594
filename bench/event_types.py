"""Benchmark of event-type catalogs at publish (issue 18): what the catalog check costs.

Run: ``.venv/bin/python bench/event_types.py [--events N]``. One process, one core.
Setup: a registry of 1000 tenants, 100 of them with a catalog of 20 types with JSON
Schemas (Draft 2020-12, nested objects and arrays), 10 in strict mode; a GitHub-sized
payload (about 1.4 kB). Baseline measured in the same run: ``json.loads`` of the payload,
which every publish does anyway. Prints the cost per publish of ``Catalog.check_event``
for a tenant without catalog, for a conforming payload against a cached validator, and
of compiling the validator each time (what the cache saves: ``jsonschema`` builds
validators lazily, so little); then PASS/FAIL: the check of a tenant without catalog
costs <= 5 % of the parse (tenants without schemas are not slowed down).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crdt import Timestamp  # noqa: E402
from regionsync.core.event_types import check_event_type_fields  # noqa: E402
from regionsync.core.registry import Registry  # noqa: E402
from regionsync.runtime.state import Catalog  # noqa: E402

GOAL_NO_CATALOG = 0.05

SCHEMA = {
    "type": "object",
    "required": ["action", "issue", "repository", "sender"],
    "properties": {
        "action": {"enum": ["opened", "closed", "edited", "labeled"]},
        "issue": {"type": "object", "required": ["id", "number", "title", "labels"],
                  "properties": {"id": {"type": "integer"}, "number": {"type": "integer"},
                                 "title": {"type": "string", "maxLength": 256},
                                 "labels": {"type": "array", "items": {"$ref": "#/$defs/label"}}}},
        "repository": {"type": "object", "required": ["full_name"]},
        "sender": {"type": "object", "required": ["login"]},
    },
    "$defs": {"label": {"type": "object", "required": ["name"],
                        "properties": {"name": {"type": "string"}}}},
}  # fmt: skip
PAYLOAD = {
    "action": "labeled",
    "issue": {"id": 123456789, "number": 42, "title": "Crash on start " * 4, "body": "x" * 600,
              "labels": [{"name": f"label-{i}", "color": "ff0000", "id": i} for i in range(8)]},
    "repository": {"full_name": "acme/widgets", "id": 1, "private": False, "topics": ["a"] * 10},
    "sender": {"login": "octocat", "id": 1, "type": "User", "site_admin": False},
}  # fmt: skip


def per_call(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000)
    n = ap.parse_args().events
    reg, actor = Registry(), "bench:1"
    fields = check_event_type_fields({"name": "x", "schema": SCHEMA}, create=True)
    for t in range(1000):
        tid, stamp = f"t{t}", Timestamp(t + 1, 0)
        reg.apply(reg.create_tenant(tid, tid, 1, actor, stamp, strict_event_types=t < 10))
        if t < 100:
            for k in range(20):
                reg.apply(reg.put_event_type(tid, f"issues.e{k}", fields, 1, actor, stamp, True))
    catalog = Catalog(reg)
    text = json.dumps(PAYLOAD)
    print(f"setup: 1000 tenants, 100 with 20 schema types, payload {len(text)} bytes, n={n}")
    parse = per_call(lambda: json.loads(text), n)
    plain = per_call(lambda: catalog.check_event("t500", "issues.e3", PAYLOAD), n * 10)
    cached = per_call(lambda: catalog.check_event("t50", "issues.e3", PAYLOAD), n)
    compiled = per_call(
        lambda: catalog.validators.__class__().get(fields["schema"]).is_valid(PAYLOAD), n // 10
    )
    print(f"json.loads (baseline)        {parse * 1e6:8.2f} us")
    print(f"check, tenant w/o catalog    {plain * 1e6:8.2f} us  ({plain / parse:.3f}x parse)")
    print(f"check, cached schema         {cached * 1e6:8.2f} us  ({cached / parse:.2f}x parse)")
    print(f"compile + validate each time {compiled * 1e6:8.2f} us  ({compiled / cached:.1f}x "
          "cached)")  # fmt: skip
    ok = plain / parse <= GOAL_NO_CATALOG
    print(f"{'PASS' if ok else 'FAIL'}: no-catalog check <= {GOAL_NO_CATALOG:.0%} of the parse")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
