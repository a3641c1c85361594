"""A ``tenant:<id>:read`` token sees endpoint signing secrets and custom header values
masked (trial report finding 19); admin and manage tokens see them."""

from __future__ import annotations

from pathlib import Path

from api_support import running_node

ADMIN = "admin-token-0123456789"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_read_tokens_see_secrets_and_header_values_masked(tmp_path: Path) -> None:
    async with running_node(tmp_path, tokens=[{"token": ADMIN, "scope": "admin"}]) as api:
        c = api.client
        c.headers.update(bearer(ADMIN))
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).is_success
        body = {"url": "http://127.0.0.1:9/h",
                "headers": {"X-Api-Key": "consumer-credential", "X-Team": "billing"}}  # fmt: skip
        ep = (await c.post("/v1/tenants/acme/endpoints", json=body)).json()
        assert ep["secret"].startswith("whsec_") and len(ep["secret"]) > 20
        tokens = {}
        for right in ("manage", "read"):
            made = await c.post("/v1/tokens", json={"scope": f"tenant:acme:{right}", "name": right})
            tokens[right] = made.json()["token"]
        paths = (f"/v1/tenants/acme/endpoints/{ep['id']}", "/v1/tenants/acme/endpoints")
        for who, token in (
            ("admin", ADMIN),
            ("manage", tokens["manage"]),
            ("read", tokens["read"]),
        ):
            for path in paths:
                resp = await c.get(path, headers=bearer(token))
                assert resp.status_code == 200, resp.text
                got = resp.json() if path.endswith(ep["id"]) else resp.json()["items"][0]
                if who == "read":
                    assert got["secret"] == "whsec_\u2026", got
                    assert got["headers"] == {"X-Api-Key": "\u2026", "X-Team": "\u2026"}
                    assert ep["secret"] not in resp.text and "consumer-credential" not in resp.text
                else:
                    assert got["secret"] == ep["secret"] and got["headers"] == body["headers"]
                assert {k: v for k, v in got.items() if k not in ("secret", "headers")} == {
                    k: v for k, v in ep.items() if k not in ("secret", "headers")
                }
