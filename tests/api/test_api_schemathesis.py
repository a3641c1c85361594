"""schemathesis against ``/openapi.json`` of a real node process (issue 14, issue 15's
"request constraints written in the schema"): every operation gets generated requests
over loopback HTTP, at least 1,000 in all; none may answer 5xx, and every answer must be
documented (status code, content type, body schema). Deterministic: hypothesis is
derandomized (the examples follow from the schema alone), without a database and without
shrinking."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from regionsync.demo import free_port

ADMIN = "schemathesis-admin-token-0123456789"
EXAMPLES_PER_OPERATION = 40
MIN_REQUESTS = 1000
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _seed(url: str) -> dict[str, str]:
    """One live object of every kind, so generated requests reach past the 404 of an
    unknown id: path parameter name -> id."""
    c = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"})

    def ok(method: str, path: str, **kw: object) -> dict:
        resp = c.request(method, path, **kw)
        assert resp.is_success, resp.text
        return resp.json()

    ok("POST", "/v1/tenants", json={"id": "acme", "name": "Acme"})
    ep = ok("POST", "/v1/tenants/acme/endpoints", json={"url": "http://127.0.0.1:9/hook"})
    src = ok("POST", "/v1/sources", json={"tenant": "acme", "kind": "github", "secret": "s"})
    event = ok("POST", "/v1/tenants/acme/events", json={"event_type": "a.b", "payload": {}})
    delivery = ok("GET", f"/v1/tenants/acme/events/{event['id']}")["deliveries"][0]["id"]
    job = ok("POST", f"/v1/tenants/acme/endpoints/{ep['id']}/recover",
             json={"since": "2020-01-01T00:00:00Z"})  # fmt: skip
    token = ok("POST", "/v1/tokens", json={"scope": "tenant:acme:read", "name": "r"})
    c.close()
    return {"tenant": "acme", "endpoint": ep["id"], "source": src["id"], "event": event["id"],
            "delivery": delivery, "job": job["id"], "token": token["id"]}  # fmt: skip


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A node process on loopback with a static admin token (every request carries it)."""
    root = tmp_path_factory.mktemp("schemathesis")
    port = free_port()
    (root / "node.toml").write_text(
        f'region = "us-east-1"\ndata_dir = "{root}"\nhttp_listen = "127.0.0.1:{port}"\n'
        f'grpc_listen = "127.0.0.1:{free_port()}"\nlog_level = "warning"\n'
        f'[[tokens]]\ntoken = "{ADMIN}"\nscope = "admin"\n'
        '[delivery]\nallow_private_networks = ["127.0.0.0/8"]\nretry_schedule_s = [0.1]\n'
    )
    with open(root / "node.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "regionsync.cli", "serve", "--config", str(root / "node.toml")],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (root / "node.log").read_text()
            time.sleep(0.05)
        yield url, _seed(url)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "Traceback" not in (root / "node.log").read_text()


def _fuzz(
    op,
    base: str,
    ids: dict[str, str],
    session: requests.Session,
    sent: dict[str, int],
    label: str,
    statuses: dict[str, dict[int, int]],
) -> None:
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy(), seeded=st.booleans())
    def run(case: schemathesis.Case, seeded: bool) -> None:
        if seeded and case.path_parameters:  # half of them on live objects
            case.path_parameters = {k: ids.get(k, v) for k, v in case.path_parameters.items()}
        response = case.call(
            base_url=base, session=session, headers={"Authorization": f"Bearer {ADMIN}"}
        )
        sent[label] += 1
        by = statuses.setdefault(label, {})
        by[response.status_code] = by.get(response.status_code, 0) + 1
        if response.status_code == 422:
            f = response.json().get("field")
            by[f"422:{f}"] = by.get(f"422:{f}", 0) + 1
        case.validate_response(response, checks=CHECKS)

    run()


def test_generated_requests_get_documented_answers_and_no_server_error(
    node: tuple[str, dict[str, str]],
) -> None:
    base, ids = node
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    session = requests.Session()
    sent: dict[str, int] = {}
    failures: dict[str, str] = {}
    statuses: dict[str, dict[int, int]] = {}
    ops = [result.ok() for result in schema.get_all_operations()]
    # deletions last, the tenant's the very last: the others run on live objects
    ops.sort(key=lambda op: (op.method == "delete", op.path == "/v1/tenants/{tenant}"))
    for op in ops:
        label = f"{op.method.upper()} {op.path}"
        sent[label] = 0
        try:
            _fuzz(op, base, ids, session, sent, label, statuses)
        except (Exception, BaseExceptionGroup) as exc:  # collected, reported together below
            failures[label] = str(exc)[:1500]
    for label, by in statuses.items():
        print(f"{label!r:64s} {dict(sorted(by.items(), key=str))}")
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
    assert sum(sent.values()) >= MIN_REQUESTS, sent
    assert len(sent) >= 30 and all(n > 0 for n in sent.values()), sent
