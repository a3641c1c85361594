"""Upgrade in place (issue 40): the current code opens the store every earlier release
wrote, serves it, delivers what it left pending and replicates it to a fresh node, of
the current code or a ``regionsync serve`` process of the previous release.

Each directory of tests/fixtures/stores/ holds a release's stores (make_fixture.py): the
SQLite file and a PostgreSQL dump, ``manifest.json`` (ids, counts, the fixture key ring)
and ``served.json`` (what that release's HTTP API served of them). For each store: open
a copy (never the committed file) as ``REGION`` with a clock set just after the fixture
was written (the upgrade happens while its pending delivery and keys are current),
check that every object the old release served is served alike (a newer release may add
members), that tokens, the Idempotency-Key, the source secret and the sealed endpoint
secrets still work, that the pending delivery reaches a local receiver signed with the
old secrets, and that a fresh node converges with it (the log's two origins included):
one of this code, and one still on the previous release (a region not yet upgraded).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import hmac
import json
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from old_release import OldRelease, spawn
from pgserver import PgServer
from upgrade_support import (
    FIXTURES,
    FRESH,
    REGION,
    Receiver,
    RedirectingSender,
    ShiftedClock,
    api_snapshot,
    assert_subset,
    fixture_node,
    fixture_settings,
    running,
    signed_by,
    summary,
    until,
)

from regionsync import demo
from regionsync.demo import free_port

RELEASES = sorted(p for p in FIXTURES.iterdir() if p.is_dir())
STORES = ("sqlite", "postgresql")


def test_every_release_keeps_both_stores() -> None:
    assert RELEASES, f"no fixture store under {FIXTURES}"
    for release in RELEASES:
        manifest = json.loads((release / "manifest.json").read_text())
        assert manifest["release"] == release.name
        assert set(manifest["stores"]) == set(STORES), release
        served = json.loads((release / "served.json").read_text())
        assert set(served) == set(STORES), release
        for store in manifest["stores"].values():
            assert (release / store["file"]).is_file(), (release, store["file"])


PEERS = ("current", "previous release")  # the release of the fresh node


@pytest.fixture(params=PEERS)
def peer_release(request: pytest.FixtureRequest) -> OldRelease | None:
    """None (this code) or the previous release's build (skipped in a shallow clone)."""
    return None if request.param == "current" else request.getfixturevalue("old_release")


@pytest.mark.parametrize("release", RELEASES, ids=lambda p: p.name)
async def test_sqlite_store_opens_serves_delivers_and_replicates(
    release: Path, tmp_path: Path, peer_release: OldRelease | None
) -> None:
    manifest = json.loads((release / "manifest.json").read_text())
    data = tmp_path / REGION
    data.mkdir()
    packed = release / manifest["stores"]["sqlite"]["file"]
    (data / f"{REGION}.db").write_bytes(gzip.decompress(packed.read_bytes()))
    await upgrade(release, manifest, "sqlite", "sqlite", tmp_path, peer_release)


@pytest.mark.parametrize("release", RELEASES, ids=lambda p: p.name)
async def test_postgresql_store_opens_serves_delivers_and_replicates(
    release: Path, tmp_path: Path, pg_server: PgServer, pg_url: str,
    peer_release: OldRelease | None,
) -> None:  # fmt: skip
    manifest = json.loads((release / "manifest.json").read_text())
    restore(pg_server, pg_url, release / manifest["stores"]["postgresql"]["file"])
    await upgrade(release, manifest, "postgresql", pg_url, tmp_path, peer_release)


def restore(pg_server: PgServer, url: str, dump: Path) -> None:
    """Load the gzipped plain dump ``dump`` into the empty database ``url`` with psql."""
    done = subprocess.run(
        [str(pg_server.bindir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url],
        input=gzip.decompress(dump.read_bytes()),
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")


async def upgrade(
    release: Path, manifest: dict[str, Any], kind: str, store: str, tmp: Path,
    peer_release: OldRelease | None = None,
) -> None:  # fmt: skip
    """Open ``store`` (the fixture ``kind`` restored) beside a fresh node (of this code,
    or a process of ``peer_release``) and check it."""
    fixture = manifest["stores"][kind]
    served = json.loads((release / "served.json").read_text())[kind]
    clock = ShiftedClock(fixture["written_at_ms"] + 1000 - time.time_ns() // 1_000_000)
    token = manifest["admin_token"]
    ports = {r: (free_port(), free_port()) for r in (REGION, FRESH)}
    rcv = Receiver()
    nodes = {}
    for region, peer, where, keys in (
        (REGION, FRESH, store, manifest["secrets_keys"]),
        *([(FRESH, REGION, "sqlite", None)] if peer_release is None else []),
    ):
        settings = fixture_settings(
            region,
            tmp / region,
            store=where,
            keys=keys,
            admin_token=token,
            http_port=ports[region][0],
            grpc_port=ports[region][1],
            peers={peer: ports[peer][1]},
        )
        nodes[region] = fixture_node(
            settings, clock, RedirectingSender(fixture["receiver"], rcv.origin)
        )
    sender = nodes[REGION].sender
    sender.gate.clear()  # no attempt until what was stored has been compared
    fresh_node = (
        running(nodes[FRESH], token)
        if peer_release is None
        else previous_release_node(tmp, peer_release, ports)
    )
    async with rcv.running(), fresh_node as fresh, running(nodes[REGION], token) as a:
        snap = await api_snapshot(a)
        assert summary(snap) == fixture["counts"]
        assert_subset(served, snap)
        cluster = (await a.get("/v1/cluster")).json()
        assert cluster["counts"] == fixture["store_counts"]
        assert covers(cluster["version_vector"], fixture["version_vector"])
        await still_works(a, fixture)
        sender.gate.set()
        await pending_delivered(a, rcv, fixture)
        await converges(a, fresh, fixture, sorted(t["id"] for t in served["tenants"]))


@contextlib.asynccontextmanager
async def previous_release_node(
    tmp: Path, release: OldRelease, ports: dict[str, tuple[int, int]]
) -> AsyncIterator[httpx.AsyncClient]:
    """``FRESH`` as a ``regionsync serve`` process of ``release`` (a region not upgraded
    yet), peered with ``REGION``, on an empty store; a client of its API (loopback, no
    tokens)."""
    http, grpc = ports[FRESH]
    config = tmp / f"{FRESH}.toml"
    config.write_text(
        f'region = "{FRESH}"\ndata_dir = "{tmp / FRESH}"\n'
        f'http_listen = "127.0.0.1:{http}"\ngrpc_listen = "127.0.0.1:{grpc}"\n'
        'log_level = "warning"\n'
        f'[[peers]]\nregion = "{REGION}"\naddress = "127.0.0.1:{ports[REGION][1]}"\n'
        "[replication]\nreconnect_min_s = 0.05\nreconnect_max_s = 0.5\n"
    )
    proc = spawn(tmp, FRESH, config, release)
    base = f"http://127.0.0.1:{http}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10.0) as client:
            await demo.wait_ready(client, base, time.monotonic() + 60)
            yield client
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        print((tmp / f"{FRESH}.log").read_text(errors="replace")[-2000:])


def covers(vv: dict[str, int], old: dict[str, int]) -> bool:
    return all(vv.get(actor, 0) >= seq for actor, seq in old.items())


async def still_works(a: Any, fixture: dict[str, Any]) -> None:
    """Tokens, the Idempotency-Key and the source's secret of the old store."""
    tokens = fixture["tokens"]
    for name in ("acme-publisher", "acme-reader"):
        who = await a.get("/v1/whoami", headers=bearer(tokens[name]["token"]))
        assert who.status_code == 200 and who.json()["scope"] == tokens[name]["scope"], who.text
    revoked = await a.get("/v1/whoami", headers=bearer(tokens["retired"]["token"]))
    assert revoked.status_code == 401, revoked.text
    idem = fixture["idempotency"]
    again = await a.post(
        f"/v1/tenants/{idem['tenant']}/events",
        content=idem["body"],
        headers=bearer(tokens["acme-publisher"]["token"])
        | {"idempotency-key": idem["key"], "content-type": "application/json"},
    )
    assert again.status_code == 202, again.text
    assert again.json()["id"] == idem["event"] and again.json()["duplicate"], again.text
    source = fixture["source"]
    body = b'{"ref":"refs/heads/upgrade"}'
    sig = "sha256=" + hmac.new(source["secret"].encode(), body, hashlib.sha256).hexdigest()
    headers = {"content-type": "application/json", "x-hub-signature-256": sig,
               "x-github-event": "push", "x-github-delivery": "after-upgrade"}  # fmt: skip
    inbound = await a.post(f"/in/{source['id']}", content=body, headers=headers)
    assert inbound.status_code == 202, inbound.text


async def pending_delivered(a: Any, rcv: Receiver, fixture: dict[str, Any]) -> None:
    """The delivery the old release left pending is sent, with the endpoint's sealed
    headers and signed by its current and its previous (overlapping) secret."""
    pending = fixture["pending"]
    url = f"/v1/tenants/{pending['tenant']}/events/{pending['event']}"

    async def sent() -> Any:
        doc = (await a.get(url)).json()
        mine = [d for d in doc["deliveries"] if d["id"] == pending["delivery"]]
        return mine and mine[0]["status"] == "delivered"

    await until(sent, what="the pending delivery delivered")
    hits = [h for h in rcv.hits if h.headers["webhook-id"] == pending["event"]]
    assert len(hits) == 1, rcv.hits
    name, value = pending["header"]
    assert hits[0].headers[name] == value
    assert all(signed_by(hits[0], s) for s in pending["secrets"]), hits[0].headers


async def converges(a: Any, fresh: Any, fixture: dict[str, Any], tenants: list[str]) -> None:
    """A fresh node gets the whole registry and every origin's records and events."""

    async def same() -> bool:
        mine, theirs = [(await c.get("/v1/cluster")).json() for c in (a, fresh)]
        return (
            mine["registry_hash"] == theirs["registry_hash"]
            and covers(theirs["version_vector"], fixture["version_vector"])
            and covers(theirs["version_vector"], mine["version_vector"])
        )

    await until(same, what="the fresh node converged")
    for c in (a, fresh):
        ids = [t["id"] for t in (await c.get("/v1/tenants")).json()["items"]]
        assert sorted(ids) == tenants

    async def events_of(c: Any) -> list[str]:
        items = (await c.get("/v1/tenants/acme/events")).json()["items"]
        return sorted(e["id"] for e in items)

    await until(lambda: equal(events_of(a), events_of(fresh)), what="the fresh node's events")


async def equal(x: Any, y: Any) -> bool:
    return bool(await x == await y)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}
