"""A ``tenant:<id>:read`` token sees endpoint signing secrets and custom header values
masked (trial report finding 19); admin and manage tokens see them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from api_support import eventually, running_node

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


class EchoReceiver:
    """A loopback receiver that answers 200 with the request head as its body and the
    first request header value it got back in ``x-echo`` (as test receivers do)."""

    def __init__(self, echo: str) -> None:
        self.echo, self.port, self.server = echo, 0, None

    async def __aenter__(self) -> EchoReceiver:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
             if line.lower().startswith(b"content-length:")), 0,
        )  # fmt: skip
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-echo: " + self.echo.encode()
            + b"\r\nconnection: close\r\ncontent-length: " + str(len(head)).encode()
            + b"\r\n\r\n" + head
        )  # fmt: skip
        await writer.drain()
        writer.close()


async def test_read_tokens_never_see_header_values_in_attempts(tmp_path: Path) -> None:
    """Issue 38 kind 5: the attempts of an endpoint with a custom header showed its value
    to a read token (only credential-looking names were redacted), also where the
    receiver echoed it back. Manage and admin tokens still see what was sent."""
    bypass = "bypass-0123456789abcdef"
    async with (
        EchoReceiver(bypass) as rcv,
        running_node(tmp_path, tokens=[{"token": ADMIN, "scope": "admin"}]) as api,
    ):
        c = api.client
        c.headers.update(bearer(ADMIN))
        assert (await c.post("/v1/tenants", json={"id": "acme", "name": "A"})).is_success
        headers = {"x-vercel-protection-bypass": bypass, "X-Team": "billing-team"}
        body = {"url": f"http://127.0.0.1:{rcv.port}/h", "headers": headers}
        made = await c.post("/v1/tenants/acme/endpoints", json=body)
        assert made.status_code == 201, made.text
        eid = made.json()["id"]
        tokens = {"admin": ADMIN}
        for right in ("manage", "read"):
            made = await c.post("/v1/tokens", json={"scope": f"tenant:acme:{right}", "name": right})
            tokens[right] = made.json()["token"]
        published = await c.post("/v1/tenants/acme/events", json={"event_type": "a", "payload": {}})
        assert published.status_code == 202, published.text

        async def delivered() -> str | None:
            rows = (await c.get("/v1/tenants/acme/deliveries")).json()["items"]
            return rows[0]["id"] if rows and rows[0]["status"] == "delivered" else None

        did = await eventually(delivered)
        paths = (
            f"/v1/tenants/acme/deliveries/{did}/attempts",
            f"/v1/tenants/acme/endpoints/{eid}/attempts",
        )
        for who, token in tokens.items():
            for path in paths:
                resp = await c.get(path, headers=bearer(token))
                assert resp.status_code == 200, resp.text
                (a,) = resp.json()["items"]
                sent = dict(line.split(": ", 1) for line in a["request_headers"].split("\n"))
                assert sent["webhook-id"] == published.json()["id"]
                if who == "read":
                    assert bypass not in resp.text and "billing-team" not in resp.text
                    assert sent["x-vercel-protection-bypass"] == sent["X-Team"] == "\u2026"
                    assert "x-echo: \u2026" in a["response_headers"]
                    assert "x-vercel-protection-bypass: \u2026" in a["response_excerpt"]
                else:
                    assert sent["x-vercel-protection-bypass"] == bypass
                    assert bypass in a["response_excerpt"] and bypass in a["response_headers"]
