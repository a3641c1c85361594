"""Issue 42: a node restarts over its stored registry without decoding it (states are
decoded at their first read, a tenant's subscriptions indexed at its first publish),
matches exactly what it matched before, and a stored row that does not decode costs no
request a 500: it is logged, counted (``regionsync_registry_decode_errors``) and read as
absent until a merge writes it again."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from api_support import RecordingReceiver, eventually, running_node

ENDPOINTS = {
    "hit": {"event_types": ["order.*"], "filter": {"n": 1}, "description": "takes n=1"},
    "other": {"event_types": ["order.created"], "filter": {"n": 2}},
    "never": {"event_types": ["push"]},
}


async def test_a_restart_decodes_on_demand_and_a_broken_row_is_no_500(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    ids: dict[str, str] = {}
    async with running_node(tmp_path) as api:
        c = api.client
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).status_code == 201
        assert (await c.post("/v1/tenants", json={"id": "quiet", "name": "Q"})).status_code == 201
        for name, body in ENDPOINTS.items():
            resp = await c.post(
                "/v1/tenants/acme/endpoints", json={"url": receiver.url(name), **body}
            )
            assert resp.status_code == 201, resp.text
            receiver.secrets[name] = resp.json()["secret"]
            ids[name] = resp.json()["id"]
        quiet = {"url": receiver.url("quiet")}
        assert (await c.post("/v1/tenants/quiet/endpoints", json=quiet)).status_code == 201
    broken = f"e/{ids['hit']}/description"
    with sqlite3.connect(tmp_path / "us-east-1.db") as db:
        (state,) = db.execute("SELECT state FROM registry WHERE key = ?", (broken,)).fetchone()
        # framed as a register, its body not one: passes the load, fails its first read
        db.execute("UPDATE registry SET state = ? WHERE key = ?", (state[:6] + b"\x91\xc0", broken))

    async with running_node(tmp_path) as api:
        c, catalog = api.client, api.node.catalog
        reg = catalog.registry
        assert not [k for k in reg._cold if k.startswith("e/")]  # no endpoint decoded
        assert catalog.index.stats()["deferred_tenants"] == 2
        resp = await c.get(f"/v1/tenants/acme/endpoints/{ids['hit']}")
        assert resp.status_code == 200, resp.text
        assert resp.json()["description"] == ""  # the broken field reads as never written
        for n in (1, 2, 3):
            event = {"event_type": "order.created", "payload": {"n": n}}
            resp = await c.post("/v1/tenants/acme/events", json=event)
            assert resp.status_code == 202, resp.text

        async def delivered() -> bool:
            return len(receiver.of("hit")) == 1 and len(receiver.of("other")) == 1

        await eventually(delivered)
        assert receiver.of("never") == [] and receiver.of("quiet") == []
        assert catalog.index.deferred("quiet")  # never published to: never indexed
        before = reg.decoded_count()  # a delivery's outcome may decode more meanwhile
        metrics = (await c.get("/metrics")).text
        after = reg.decoded_count()
        assert "regionsync_registry_decode_errors_total 1.0" in metrics
        (line,) = [
            x for x in metrics.splitlines() if x.startswith("regionsync_registry_decoded_keys ")
        ]
        assert before <= float(line.split()[1]) <= after < len(reg)
        assert reg.corrupt.keys() == {broken}
        # written again (a PATCH here; a repair from a peer likewise), the key is healed
        patch = {"description": "again"}
        resp = await c.patch(f"/v1/tenants/acme/endpoints/{ids['hit']}", json=patch)
        assert resp.status_code == 200, resp.text
        assert resp.json()["description"] == "again" and not reg.corrupt
