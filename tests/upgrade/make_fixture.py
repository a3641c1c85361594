"""Write the fixture stores of the current release (issue 40, upgrade in place).

    .venv/bin/python -m tests.upgrade.make_fixture            # from the repository root
    .venv/bin/python tests/upgrade/make_fixture.py [RELEASE]

RELEASE defaults to ``<pyproject version>-<today, UTC>``. The current code runs two
regions in-process over real gRPC on loopback (``REGION`` and ``PEER`` of
upgrade_support.py, production wiring, a loopback receiver) and drives them through the
HTTP API: tenants (one renamed, one deleted), event types (a schema, a deprecated one, one
added by the peer), endpoints (secret, headers, filter, a rotated secret, a paused one, a
deleted one), tokens (one revoked), a GitHub source and an inbound request, events (an
Idempotency-Key and its replay), deliveries delivered, dead (and retried), skipped and
one pending (its endpoint's rate limit holds it), the attempts and audit they leave, and
the peer's own tenant, events and deliveries replicated in. Log truncation is off, so
the log holds the records of both origins.

It writes ``tests/fixtures/stores/<RELEASE>/`` (replacing it): ``us-east-1.db.gz`` (the
SQLite store, VACUUMed, gzipped: its pages are mostly empty), ``us-east-1.sql.gz`` (the
same workload on PostgreSQL: a plain ``pg_dump`` by the Debian binaries tests/pgserver.py
finds, restored with their ``psql``), ``manifest.json`` (per store: counts, version
vector, log records per origin, the ids and secrets the test acts on; the fixture key
ring and admin token; the release and commit) and ``served.json`` (per store, what the
HTTP API served: ``api_snapshot``). Ids differ between the two stores and between runs;
the counts do not. Commit the script first, so that ``commit`` names the code that wrote
the stores. Never rewrite a released fixture: a new release adds a directory.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import gzip
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from pgserver import PgServer  # noqa: E402
from upgrade_support import (  # noqa: E402
    FIXTURES,
    PEER,
    REGION,
    Receiver,
    api_snapshot,
    fixture_key,
    fixture_settings,
    running,
    summary,
    until,
)

from regionsync.adapters.wiring import build_node  # noqa: E402
from regionsync.demo import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "fixture-admin-token-not-a-real-one"
# whsec_ + base64 of 24 bytes: fixed so that the manifest names them
SECRETS = {
    name: "whsec_" + base64.b64encode(name.encode().ljust(24, b".")).decode()
    for name in ("ok", "dead", "slow", "slow-rotated", "eu")
}
SOURCE_SECRET = "fixture github source secret"
E1_BODY = '{"event_type":"order.created","payload":{"id":"o-1","amount":25}}'
ORDER_SCHEMA = {
    "type": "object",
    "required": ["id", "amount"],
    "properties": {"id": {"type": "string"}, "amount": {"type": "number", "minimum": 0}},
}


async def ok(resp: Any, status: int = 200) -> dict[str, Any]:
    r = await resp
    assert r.status_code == status, (r.request.method, r.request.url, r.status_code, r.text)
    return r.json() if r.content else {}


async def registry(a: Any) -> None:
    """Tenants (one renamed, one deleted) and acme's event types."""
    for tid, name in (("acme", "Acme Corp"), ("globex", "Globex"), ("defunct", "Defunct")):
        await ok(a.post("/v1/tenants", json={"id": tid, "name": name}), 201)
    await ok(a.patch("/v1/tenants/globex", json={"name": "Globex Corporation"}))
    await ok(a.delete("/v1/tenants/defunct"), 204)
    types = "/v1/tenants/acme/event-types"
    await ok(a.post(types, json={"name": "order.created", "schema": ORDER_SCHEMA}), 201)
    await ok(a.post(types, json={"name": "order.cancelled", "description": "no schema"}), 201)
    await ok(a.post(types, json={"name": "legacy.ping", "deprecated": True}), 201)


async def endpoints(a: Any, rcv: Receiver) -> dict[str, str]:
    eps = "/v1/tenants/acme/endpoints"
    body = {
        "ok": {"event_types": ["order.*"], "filter": {"amount": {"$gte": 10}},
               "headers": {"X-Fixture": "ok"}, "description": "delivered"},
        "dead": {"event_types": ["order.cancelled"], "description": "always answers 500"},
        # one attempt per 100 s: a second event stays pending
        "slow": {"event_types": ["order.created"], "rate_limit_per_s": 0.01,
                 "headers": {"X-Fixture": "slow"}},
    }  # fmt: skip
    ids = {}
    for name, extra in body.items():
        created = await ok(
            a.post(eps, json={"url": rcv.url(name), "secret": SECRETS[name], **extra}), 201
        )
        ids[name] = created["id"]
    temp = await ok(a.post(eps, json={"url": rcv.url("temp")}), 201)
    await ok(a.delete(f"{eps}/{temp['id']}"), 204)
    paused = await ok(
        a.post("/v1/tenants/globex/endpoints", json={"url": rcv.url("paused"), "paused": True}),
        201,
    )
    ids["paused"] = paused["id"]
    return ids


async def tokens(a: Any, now: dt.datetime) -> dict[str, Any]:
    later = (now + dt.timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    made = {}
    for name, scope, expires in (
        ("acme-publisher", "tenant:acme:publish", later),
        ("acme-reader", "tenant:acme:read", None),
        ("retired", "admin", None),
    ):
        body = {"scope": scope, "name": name, "expires_at": expires}
        made[name] = await ok(a.post("/v1/tokens", json=body), 201)
    await ok(a.delete(f"/v1/tokens/{made['retired']['id']}"), 204)
    return {
        name: {"id": t["id"], "token": t["token"], "scope": t["scope"]} for name, t in made.items()
    }


async def peer_writes(b: Any, rcv: Receiver) -> dict[str, Any]:
    """The peer's own tenant, type, endpoint and events, and a type in a tenant of ours."""
    await until(
        lambda: ok_status(b.get("/v1/tenants/acme/event-types/legacy.ping")), what="acme at peer"
    )
    await ok(b.post("/v1/tenants", json={"id": "initech", "name": "Initech"}), 201)
    schema = {"type": "object", "required": ["invoice"]}
    await ok(
        b.post("/v1/tenants/initech/event-types", json={"name": "invoice.paid", "schema": schema}),
        201,
    )
    await ok(b.post("/v1/tenants/acme/event-types", json={"name": "order.refunded"}), 201)
    ep = await ok(
        b.post(
            "/v1/tenants/initech/endpoints",
            json={"url": rcv.url("eu"), "secret": SECRETS["eu"], "event_types": ["invoice.*"]},
        ),
        201,
    )
    events = []
    for n in (1, 2):
        body = {"event_type": "invoice.paid", "payload": {"invoice": f"inv-{n}", "total": n * 100}}
        events.append((await ok(b.post("/v1/tenants/initech/events", json=body), 202))["id"])
    return {"endpoint": ep["id"], "events": events}


async def ok_status(resp: Any) -> bool:
    return (await resp).status_code == 200


async def delivered(a: Any, tenant: str, n: int, status: str = "delivered") -> bool:
    resp = await a.get(f"/v1/tenants/{tenant}/deliveries", params={"status": status})
    return len(resp.json()["items"]) == n


async def events(a: Any, eps: dict[str, str], publisher: str) -> dict[str, Any]:
    """Acme's and globex's events, in an order that makes each delivery's fate certain."""
    pub = {"authorization": f"Bearer {publisher}"}
    url = "/v1/tenants/acme/events"
    key = {"idempotency-key": "fixture-order-1", "content-type": "application/json"}
    e1_body = {"content": E1_BODY, "headers": pub | key}
    e1 = await ok(a.post(url, **e1_body), 202)
    await until(lambda: delivered(a, "acme", 2), what="e1 to ok and slow")
    # the previous secret keeps signing (secret_overlap_s): the pending delivery has both
    await ok(a.patch("/v1/tenants/acme/endpoints/" + eps["slow"],
                     json={"secret": SECRETS["slow-rotated"]}))  # fmt: skip
    again = await ok(a.post(url, **e1_body), 202)
    assert again["id"] == e1["id"] and again["duplicate"], again
    cancel = {"event_type": "order.cancelled", "payload": {"id": "o-1", "amount": 25}}
    e2 = await ok(a.post(url, json=cancel), 202)
    await until(lambda: delivered(a, "acme", 1, "dead"), what="e2 dead")
    await until(lambda: delivered(a, "acme", 3), what="e2 to ok")
    dead = (await ok(a.get("/v1/tenants/acme/deliveries", params={"status": "dead"})))["items"]
    await ok(a.post(f"/v1/tenants/acme/deliveries/{dead[0]['id']}/retry"), 202)
    await until(lambda: dead_again(a, dead[0]["id"]), what="the retried delivery dead again")
    small = {"event_type": "order.created", "payload": {"id": "o-2", "amount": 5}}
    e3 = await ok(a.post(url, json=small, headers=pub), 202)  # ok: filtered out; slow: waits
    await ok(a.post(url, json={"event_type": "legacy.ping", "payload": {}}), 202)
    await ok(a.post("/v1/tenants/globex/events",
                    json={"event_type": "hello", "payload": ["x"]}), 202)  # fmt: skip
    await until(lambda: delivered(a, "globex", 1, "skipped"), what="globex skipped")
    return {"e1": e1["id"], "e2": e2["id"], "e3": e3["id"], "dead_delivery": dead[0]["id"]}


async def dead_again(a: Any, delivery: str) -> bool:
    resp = await a.get("/v1/tenants/acme/deliveries", params={"status": "dead"})
    return any(d["id"] == delivery and d["generation"] == 1 for d in resp.json()["items"])


async def inbound(a: Any) -> dict[str, str]:
    import hashlib
    import hmac

    src = await ok(
        a.post("/v1/sources", json={"tenant": "acme", "kind": "github", "secret": SOURCE_SECRET}),
        201,
    )
    body = b'{"ref":"refs/heads/main"}'
    sig = "sha256=" + hmac.new(SOURCE_SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"content-type": "application/json", "x-hub-signature-256": sig,
               "x-github-event": "push", "x-github-delivery": "fixture-delivery-1"}  # fmt: skip
    got = await ok(a.post(f"/in/{src['id']}", content=body, headers=headers), 202)
    return {"id": src["id"], "secret": SOURCE_SECRET, "event": got["id"]}


async def converged(a: Any, b: Any) -> bool:
    ca, cb = [(await ok(c.get("/v1/cluster"))) for c in (a, b)]
    same = ca["registry_hash"] == cb["registry_hash"]
    return same and ca["version_vector"] == cb["version_vector"]


async def write_one(store: str, data: Path, release: str) -> dict[str, Any]:
    """Run the workload with ``REGION``'s store ``store`` under ``data``; returns its
    manifest section (the node is stopped when this returns)."""
    rcv = Receiver(fail={"dead"})
    ports = {r: (free_port(), free_port()) for r in (REGION, PEER)}
    nodes = {}
    for region, peer in ((REGION, PEER), (PEER, REGION)):
        settings = fixture_settings(
            region,
            data / region,
            store=store if region == REGION else "sqlite",
            keys=fixture_key(release) if region == REGION else None,
            admin_token=ADMIN_TOKEN,
            http_port=ports[region][0],
            grpc_port=ports[region][1],
            peers={peer: ports[peer][1]},
            replication={"truncate_interval_s": 86400.0},  # the log keeps every record
        )
        nodes[region] = build_node(settings)
    now = dt.datetime.now(dt.UTC)
    async with rcv.running(), running(nodes[REGION], ADMIN_TOKEN) as a:
        async with running(nodes[PEER], ADMIN_TOKEN) as b:
            await registry(a)
            eps = await endpoints(a, rcv)
            made_tokens = await tokens(a, now)
            peer = await peer_writes(b, rcv)
            acts = await events(a, eps, made_tokens["acme-publisher"]["token"])
            source = await inbound(a)
            await until(lambda: delivered(a, "initech", 2), what="the peer's deliveries")
            await until(lambda: converged(a, b), what="both regions converged")
            assert len(rcv.of("eu")) == 2 and len(rcv.of("slow")) == 1, rcv.hits
        snap = await api_snapshot(a)
        cluster = await ok(a.get("/v1/cluster"))
        written_at_ms = nodes[REGION].clock.wall_ms()
    pending = [d for d in snap["of_tenant"]["acme"]["deliveries"] if d["status"] == "pending"]
    assert [d["event"] for d in pending] == [acts["e3"]], pending
    return {
        "written_at_ms": written_at_ms,
        "counts": summary(snap),
        "store_counts": cluster["counts"],
        "version_vector": cluster["version_vector"],
        "receiver": rcv.origin,
        "endpoints": eps,
        "tokens": made_tokens,
        "source": source,
        "peer": peer,
        "events": acts,
        "pending": {
            "tenant": "acme",
            "delivery": pending[0]["id"],
            "endpoint": eps["slow"],
            "event": acts["e3"],
            "secrets": [SECRETS["slow-rotated"], SECRETS["slow"]],
            "header": ["x-fixture", "slow"],
        },
        "idempotency": {
            "tenant": "acme",
            "key": "fixture-order-1",
            "event": acts["e1"],
            "body": E1_BODY,  # the bytes whose hash the key holds
        },
        "api": snap,
    }


def vacuum(src: Path, dst: Path) -> None:
    """``src`` VACUUMed, gzipped into ``dst`` (its 8 KiB pages are mostly empty)."""
    with tempfile.TemporaryDirectory() as tmp:
        flat = Path(tmp) / src.name
        with sqlite3.connect(src) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.execute("VACUUM INTO ?", (str(flat),))
        db.close()
        gzip_to(flat.read_bytes(), dst)


def gzip_to(data: bytes, dst: Path) -> None:
    dst.write_bytes(gzip.compress(data, 9, mtime=0))


def log_origins_sqlite(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT origin, count(*) FROM log GROUP BY origin").fetchall()
    db.close()
    return dict(sorted(rows))


def pg_dump(pg: PgServer, dbname: str, dst: Path) -> None:
    """A plain-format dump (no owners, no grants) of ``dbname``, gzipped into ``dst``."""
    out = subprocess.run(
        [str(pg.bindir / "pg_dump"), "--no-owner", "--no-privileges", "--format=plain",
         pg.url(dbname)],
        check=True, capture_output=True,
    )  # fmt: skip
    gzip_to(out.stdout, dst)


def log_origins_pg(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url) as c:
        rows = c.execute("SELECT origin, count(*) FROM log GROUP BY origin").fetchall()
    return dict(sorted(rows))


def release_name() -> str:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return f"{version}-{dt.datetime.now(dt.UTC):%Y-%m-%d}"


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip()


def write_stores(release: str, out: Path, tmp: Path) -> dict[str, Any]:
    """Both stores into ``out``; their manifest sections (``api``: what was served)."""
    stores: dict[str, Any] = {}
    section = asyncio.run(write_one("sqlite", tmp / "sqlite", release))
    db = tmp / "sqlite" / REGION / f"{REGION}.db"
    vacuum(db, out / f"{REGION}.db.gz")
    stores["sqlite"] = {"file": f"{REGION}.db.gz", "log_origins": log_origins_sqlite(db), **section}
    pg = PgServer()
    pg.start()
    try:
        url = pg.create_database("fixture")
        section = asyncio.run(write_one(url, tmp / "pg", release))
        pg_dump(pg, "fixture", out / f"{REGION}.sql.gz")
        stores["postgresql"] = {"file": f"{REGION}.sql.gz", "log_origins": log_origins_pg(url),
                                **section}  # fmt: skip
    finally:
        pg.stop()
    for kind, s in stores.items():
        assert len(s["log_origins"]) == 2, (kind, s["log_origins"])
    return stores


def main(release: str | None = None) -> Path:
    """Write ``tests/fixtures/stores/<release>/``; returns that directory."""
    release = release or release_name()
    out = FIXTURES / release
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="regionsync-fixture-") as tmp:
        stores = write_stores(release, out, Path(tmp))
    served = {kind: s.pop("api") for kind, s in stores.items()}
    manifest = {
        "release": release,
        "commit": commit(),
        "region": REGION,
        "peer_region": PEER,
        "secrets_keys": fixture_key(release),
        "admin_token": ADMIN_TOKEN,
        "stores": stores,
    }
    for name, doc in (("manifest.json", manifest), ("served.json", served)):
        (out / name).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return out


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else None))
