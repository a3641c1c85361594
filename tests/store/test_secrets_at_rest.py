"""Signing secrets encrypted at rest: the key ring, the SQLite and PostgreSQL stores'
sealing (real files scanned byte for byte: the SQLite file and WAL; every table of the
PostgreSQL database dumped with COPY, and its data files and WAL after a CHECKPOINT),
rotation, rows written before encryption, and three real
node processes (each with its own generated key) whose data directories and logs hold
no secret while the registry still converges."""

from __future__ import annotations

import base64
import hashlib
import os
import sqlite3
import stat
import sys
from pathlib import Path

import httpx
import psycopg
import pytest
from pgserver import PgServer

from crdt import LWWRegister, Timestamp
from regionsync.adapters.postgres_store import PostgresStore
from regionsync.adapters.secretbox import MAGIC, NodeKeys, SealedKeyError, is_sealed
from regionsync.adapters.sqlite_store import SqliteStore
from regionsync.core.model import Event, Record, WriteBatch
from regionsync.core.records import encode_body
from regionsync.core.signing import make_secret
from regionsync.demo import start_cluster
from regionsync.errors import CannotStart

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
from cluster_support import converged, eventually, expect  # noqa: E402

REGION = "eu-central-1"
SECRET = make_secret(b"S" * 8 + os.urandom(24))


def _ring(*ids: str) -> NodeKeys:
    return NodeKeys([(i, hashlib.sha256(i.encode()).digest()) for i in ids])


def _forms(secret: str) -> list[bytes]:
    """The byte strings a leak would show: the text, its base64, its HMAC key bytes."""
    raw = secret.encode()
    out = [raw, base64.b64encode(raw), base64.urlsafe_b64encode(raw)]
    if secret.startswith("whsec_"):
        out.append(base64.b64decode(secret[6:]))
    return out


def _leaks(paths: list[Path], secrets: list[str]) -> list[str]:
    found = []
    for path in paths:
        data = path.read_bytes()
        for s in secrets:
            for form in _forms(s):
                if form in data:
                    found.append(f"{path.name}: {form[:12]!r}...")
    return found


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())


# -- key ring ---------------------------------------------------------------------------


def test_seal_open_round_trip_and_binding() -> None:
    ring = _ring("k1")
    blob = ring.seal(b"whsec_abc", b"registry\0e/x/secret")
    assert blob.startswith(MAGIC) and is_sealed(blob) and b"whsec_abc" not in blob
    assert ring.open(blob, b"registry\0e/x/secret") == b"whsec_abc"
    assert ring.seal(b"whsec_abc", b"a") != ring.seal(b"whsec_abc", b"a")  # fresh nonces
    with pytest.raises(SealedKeyError):
        ring.open(blob, b"registry\0e/y/secret")  # moved to another row
    with pytest.raises(SealedKeyError):
        ring.open(blob[:-1] + bytes([blob[-1] ^ 1]), b"registry\0e/x/secret")
    assert ring.open(b"\x93plain", b"any") == b"\x93plain"  # rows from before encryption


def test_rotation_reads_old_keys_and_writes_with_the_first() -> None:
    old = _ring("k1")
    blob = old.seal(b"v", b"aad")
    k2, k1 = (base64.b64encode(hashlib.sha256(k).digest()).decode() for k in (b"k2", b"k1"))
    rotated = NodeKeys.parse(f"k2:{k2}\n# the previous key stays readable\nk1:{k1}")
    assert rotated.ids == ["k2", "k1"] and rotated.current == "k2"
    assert rotated.open(blob, b"aad") == b"v"
    assert rotated.seal(b"v", b"aad")[5:7] == b"k2"
    with pytest.raises(SealedKeyError, match="k2"):
        old.open(rotated.seal(b"v", b"aad"), b"aad")


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "empty"),
        ("k1", "key id"),
        ("k1:!!", "base64"),
        (f"k1:{base64.b64encode(b'x' * 16).decode()}", "32 bytes"),
        (f"bad id:{base64.b64encode(b'x' * 32).decode()}", "bad key id"),
        (f"k:{base64.b64encode(b'x' * 32).decode()},k:{base64.b64encode(b'y' * 32).decode()}",
         "twice"),
    ],
)  # fmt: skip
def test_bad_ring_text_is_refused(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        NodeKeys.parse(text)


def test_generated_key_file_is_private_and_stable(tmp_path: Path) -> None:
    path = tmp_path / "data" / "r.key"
    first = NodeKeys.load(None, None, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = NodeKeys.load(None, None, path)
    assert again.ids == first.ids
    assert again.open(first.seal(b"x", b"a"), b"a") == b"x"
    env = NodeKeys.load(f"e1:{base64.b64encode(b'e' * 32).decode()}", path, path)
    assert env.ids == ["e1"]  # the keys setting wins over any file


def test_processes_starting_at_once_get_the_ring_the_first_one_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes of a region start on one data directory without a key file: both
    find it missing, and the other one writes it first. This one then got
    FileExistsError and died (bench/cpu.py's scale-out, N = 2); it gets that ring now."""
    path = tmp_path / "data" / "r.key"
    racing, other = [True], []
    real_exists = Path.exists

    def exists(self: Path) -> bool:
        found = real_exists(self)
        if self == path and racing:
            racing.clear()
            other.append(NodeKeys.load(None, None, path))  # the other process, meanwhile
        return found

    monkeypatch.setattr(Path, "exists", exists)
    mine = NodeKeys.load(None, None, path)
    assert other and mine.ids == other[0].ids
    assert mine.open(other[0].seal(b"x", b"a"), b"a") == b"x"
    assert [p.name for p in path.parent.iterdir()] == ["r.key"]  # nothing left aside
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- SQLite store ----------------------------------------------------------------------


def _secret_batch(secret: str, seq: int) -> WriteBatch:
    stamp = Timestamp(1_000 + seq, 0)
    state = LWWRegister.empty().set(secret, actor="r:1", stamp=stamp)
    key = f"e/ep_{seq}/secret"
    body = encode_body(registry={key: state})
    return WriteBatch(
        registry={key: state.to_bytes(), "tenants": b"\x90"},
        records=[Record("r:1", seq, "registry", body, (1_000 + seq, 0))],
        version_vector={"r:1": seq},
        events=[Event(f"evt_{seq}", "acme", "a.b", b'{"n":1}', REGION, seq)],
    )


async def test_store_seals_secret_rows_and_reads_them_back(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "n.db", _ring("k1"))
    await s.open(REGION, 1)
    batch = _secret_batch(SECRET, 1)
    await s.commit(batch)
    assert await s.load_registry() == batch.registry
    assert await s.records_after({}, 10) == batch.records
    assert (await s.get_event("evt_1")).payload == b'{"n":1}'  # type: ignore[union-attr]
    assert _leaks(_files(tmp_path), [SECRET]) == []
    await s.close()
    db = sqlite3.connect(tmp_path / "n.db")
    rows = dict(db.execute("SELECT key, state FROM registry"))
    assert is_sealed(rows["e/ep_1/secret"]) and not is_sealed(rows["tenants"])
    (body,) = db.execute("SELECT body FROM log").fetchone()
    assert is_sealed(body)
    db.close()
    assert _leaks(_files(tmp_path), [SECRET]) == []
    # a store without the ring cannot read it; a ring without the key id neither
    with pytest.raises(ValueError, match="no key ring"):
        bare = SqliteStore(tmp_path / "n.db")
        await bare.open(REGION, 1)
        try:
            await bare.load_registry()
        finally:
            await bare.close()
    # (refused at open: the store's key check, sealed with k1, does not open)
    other = SqliteStore(tmp_path / "n.db", _ring("k9"))
    with pytest.raises(CannotStart, match=r"'k1'.*\[secrets\] keys"):
        await other.open(REGION, 1)


async def test_a_store_keeps_the_ring_it_was_opened_with(tmp_path: Path) -> None:
    # issue 38, kind 8: before any secret is written, another ring (a lost or regenerated
    # key file) is refused too; it would seal rows the first ring cannot read, and back
    s = SqliteStore(tmp_path / "n.db", _ring("k1"))
    await s.open(REGION, 1)
    await s.close()
    with pytest.raises(CannotStart, match=r"\(k9\).*'k1'"):
        await SqliteStore(tmp_path / "n.db", _ring("k9")).open(REGION, 1)
    rotated = SqliteStore(tmp_path / "n.db", _ring("k2", "k1"))  # a rotation is not refused
    await rotated.open(REGION, 1)
    await rotated.close()
    with pytest.raises(CannotStart, match="'k2'"):  # ... but from then on k2 is needed
        await SqliteStore(tmp_path / "n.db", _ring("k1")).open(REGION, 1)
    bare = SqliteStore(tmp_path / "n.db")  # no ring: it seals nothing (tests only)
    await bare.open(REGION, 1)
    await bare.close()


async def test_store_rotation_keeps_old_rows_and_seals_new_ones_with_the_new_key(
    tmp_path: Path,
) -> None:
    s = SqliteStore(tmp_path / "n.db", _ring("k1"))
    await s.open(REGION, 1)
    await s.commit(_secret_batch(SECRET, 1))
    await s.close()
    second = make_secret(os.urandom(32))
    s = SqliteStore(tmp_path / "n.db", _ring("k2", "k1"))
    await s.open(REGION, 1)
    await s.commit(_secret_batch(second, 2))
    reg = await s.load_registry()
    assert {k for k in reg if k.endswith("/secret")} == {"e/ep_1/secret", "e/ep_2/secret"}
    await s.close()
    db = sqlite3.connect(tmp_path / "n.db")
    kids = {k: v[5:7] for k, v in db.execute("SELECT key, state FROM registry") if is_sealed(v)}
    db.close()
    assert kids == {"e/ep_1/secret": b"k1", "e/ep_2/secret": b"k2"}
    assert _leaks(_files(tmp_path), [SECRET, second]) == []


async def test_rows_written_before_encryption_are_sealed_on_open(tmp_path: Path) -> None:
    plain = SqliteStore(tmp_path / "n.db")  # no ring: as a store from before encryption
    await plain.open(REGION, 1)
    batch = _secret_batch(SECRET, 1)
    await plain.commit(batch)
    await plain.close()
    assert _leaks(_files(tmp_path), [SECRET]) != []  # the scan does see plaintext
    s = SqliteStore(tmp_path / "n.db", _ring("k1"))
    await s.open(REGION, 1)
    assert await s.load_registry() == batch.registry
    assert await s.records_after({}, 10) == batch.records
    await s.close()
    assert _leaks(_files(tmp_path), [SECRET]) == []


# -- PostgreSQL store ------------------------------------------------------------------


async def _pg_dump(url: str) -> bytes:
    """Every row of every table of the database at ``url``, as COPY's binary format
    writes it (bytea columns byte for byte)."""
    out = bytearray()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        )
        tables = [t for (t,) in await cur.fetchall()]
        assert {"registry", "log", "events"} <= set(tables)
        async with conn.cursor() as c:
            for table in tables:
                async with c.copy(f'COPY "{table}" TO STDOUT (FORMAT binary)') as copy:
                    async for chunk in copy:
                        out += chunk
    return bytes(out)


async def _pg_files(server: PgServer, url: str) -> list[Path]:
    """The files of the database at ``url`` and the server's WAL, after a CHECKPOINT
    (every change written to the data files)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("CHECKPOINT")
        cur = await conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
        row = await cur.fetchone()
    assert row is not None
    data = server.dir / "data"
    files = _files(data / "base" / str(row[0])) + _files(data / "pg_wal")
    assert files
    return files


def _in(blob: bytes, secret: str) -> bool:
    return any(form in blob for form in _forms(secret))


async def test_postgres_store_seals_secret_rows_and_reads_them_back(pg_server: PgServer) -> None:
    secret = make_secret(b"P" * 8 + os.urandom(24))
    url = pg_server.create_database("sealed_pg")
    s = PostgresStore(url, keys=_ring("k1"))
    await s.open(REGION, 1)
    batch = _secret_batch(secret, 1)
    try:
        await s.commit(batch)
        assert await s.load_registry() == batch.registry
        assert await s.records_after({}, 10) == batch.records
        dump = await _pg_dump(url)
        assert b"evt_1" in dump and b'{"n":1}' in dump  # the dump does hold the rows
        assert not _in(dump, secret)
        assert _leaks(await _pg_files(pg_server, url), [secret]) == []
    finally:
        await s.close()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT key, state FROM registry")
        rows = dict(await cur.fetchall())
        cur = await conn.execute("SELECT body FROM log")
        (body,) = await cur.fetchone()  # type: ignore[misc]
    assert is_sealed(rows["e/ep_1/secret"]) and not is_sealed(rows["tenants"]) and is_sealed(body)
    bare = PostgresStore(url)  # no ring: cannot read them; a ring without the key id neither
    await bare.open(REGION, 1)
    try:
        with pytest.raises(ValueError, match="no key ring"):
            await bare.load_registry()
    finally:
        await bare.close()
    with pytest.raises(CannotStart, match=r"'k1'.*\[secrets\] keys"):
        await PostgresStore(url, keys=_ring("k9")).open(REGION, 1)


async def test_postgres_rows_written_before_encryption_are_sealed_on_open(
    pg_server: PgServer,
) -> None:
    secret = make_secret(b"Q" * 8 + os.urandom(24))
    url = pg_server.create_database("unsealed_pg")
    plain = PostgresStore(url)  # no ring: as a database from before encryption
    await plain.open(REGION, 1)
    batch = _secret_batch(secret, 1)
    await plain.commit(batch)
    await plain.close()
    assert _in(await _pg_dump(url), secret)  # the dump does see plaintext
    s = PostgresStore(url, keys=_ring("k2", "k1"))
    await s.open(REGION, 1)
    try:
        assert await s.load_registry() == batch.registry
        assert await s.records_after({}, 10) == batch.records
        assert not _in(await _pg_dump(url), secret)
    finally:
        await s.close()


# -- real node processes ---------------------------------------------------------------


async def test_three_real_nodes_keep_no_secret_in_files_or_logs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REGIONSYNC_LOG_LEVEL", "debug")  # the most the logs ever say
    chosen = make_secret(b"E" * 8 + os.urandom(24))
    src_secret = "src-" + base64.b32encode(os.urandom(20)).decode()
    async with start_cluster() as cluster, httpx.AsyncClient(timeout=10.0) as client:
        a, b, c = cluster.http.values()
        await expect(client, "POST", f"{a}/v1/tenants", 201, json={"id": "acme", "name": "A"})
        await eventually(lambda: converged(client, cluster.http))  # the tenant is everywhere
        ep = await expect(
            client, "POST", f"{a}/v1/tenants/acme/endpoints", 201,
            json={"url": "http://127.0.0.1:9/hook", "secret": chosen},
        )  # fmt: skip
        generated = await expect(
            client, "POST", f"{b}/v1/tenants/acme/endpoints", 201,
            json={"url": "http://127.0.0.1:9/other"},
        )  # fmt: skip
        await expect(
            client, "POST", f"{c}/v1/sources", 201,
            json={"tenant": "acme", "kind": "hmac", "secret": src_secret, "header": "x-sig"},
        )  # fmt: skip
        rotated = await expect(
            client, "POST", f"{c}/v1/tenants/acme/endpoints/{ep['id']}/rotate-secret", 200
        )
        secrets = [chosen, src_secret, generated["secret"], rotated["secret"]]
        assert len(set(secrets)) == 4

        async def everywhere() -> bool:
            for base in (a, b, c):
                got = await client.get(f"{base}/v1/tenants/acme/endpoints/{ep['id']}")
                if got.status_code != 200 or got.json()["secret"] != rotated["secret"]:
                    return False
            return bool(await converged(client, cluster.http))

        await eventually(everywhere)  # replicated in the clear, stored under 3 keys
        kids = set()
        for region in cluster.http:
            db = sqlite3.connect(cluster.root / region / f"{region}.db")
            row = db.execute("SELECT state FROM registry WHERE key = ?", (f"e/{ep['id']}/secret",))
            state = row.fetchone()[0]
            db.close()
            assert is_sealed(state)
            kids.add(state[5 : 5 + state[4]])
        assert len(kids) == 3, kids  # each region its own generated key
        files = _files(cluster.root)
        assert any(p.name.endswith(".db-wal") for p in files)
        assert sum(p.suffix == ".log" for p in files) == 3
        assert all(p.stat().st_size > 0 for p in files if p.suffix == ".log")
        assert _leaks(files, secrets) == []


def test_every_secret_key_holds_the_text_the_open_scan_selects() -> None:
    """``SqliteStore._seal_plaintext_rows`` reads only the rows whose key is LIKE
    '%/secret%' (issue 42: it read all of them at every start)."""
    from regionsync.core.registry_keys import ENDPOINT_FIELDS, SOURCE_FIELDS, is_secret_key

    keys = [f"e/ep1/{f}" for f in ENDPOINT_FIELDS] + [f"s/src1/{f}" for f in SOURCE_FIELDS]
    secret = [k for k in keys if is_secret_key(k)]
    assert len(secret) == 4 and all("/secret" in k for k in secret)  # + secret_destination
