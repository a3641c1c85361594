"""Request bodies with a content coding (issue 38, kind 7; RFC 9110 section 8.4.1), over
real HTTP against one node: gzip and deflate are decoded within the body limit (413 past
it, however small the compressed body), any other coding is 415 naming
``content-encoding`` with an Accept-Encoding answer, and a labelled body is never read as
identity. Publish and inbound (the fast lane) and registry routes (FastAPI) alike."""

from __future__ import annotations

import gzip
import hashlib
import hmac
import json
import tracemalloc
import zlib

import pytest
from api_support import Api, assert_problem

from regionsync.adapters.routes.common import read_body
from regionsync.errors import BadRequest, PayloadTooLarge

LIMIT = 256 * 1024  # ingest.max_payload_bytes by default
EVENT = json.dumps({"event_type": "order.created", "payload": {"id": 7, "note": "café"}}).encode()


def coded(body: bytes, coding: str, **headers: str) -> dict:
    return {
        "content": body,
        "headers": {"content-type": "application/json", "content-encoding": coding, **headers},
    }


def bomb(decoded: int) -> bytes:
    """gzip of ``decoded`` zero bytes (about 1/1000 of that)."""
    z, zero, out = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS), bytes(1 << 20), []
    for _ in range(decoded >> 20):
        out.append(z.compress(zero))
    return b"".join(out) + z.flush()


async def published(api: Api, tenant: str, resp) -> dict:  # noqa: ANN001
    assert resp.status_code == 202, resp.text
    event = await api.client.get(f"/v1/tenants/{tenant}/events/{resp.json()['id']}")
    return event.json()


@pytest.mark.parametrize(
    "body,coding",
    [
        (gzip.compress(EVENT), "gzip"),
        (gzip.compress(EVENT), "GZIP"),  # coding names ignore case
        (gzip.compress(EVENT), "x-gzip"),
        (zlib.compress(EVENT), "deflate"),
        (gzip.compress(EVENT[:20]) + gzip.compress(EVENT[20:]), "gzip"),  # two members
        (EVENT, "identity"),
    ],
)
async def test_a_coded_publish_is_decoded(api: Api, tenant: str, body: bytes, coding: str) -> None:
    resp = await api.client.post(f"/v1/tenants/{tenant}/events", **coded(body, coding))
    event = await published(api, tenant, resp)
    assert event["payload"] == {"id": 7, "note": "café"}


@pytest.mark.parametrize(
    "coding", ["br", "compress", "zstd", "gzip, br", "gzip, gzip", "gzip,deflate", "nope"]
)
async def test_a_coding_not_decoded_is_415_with_accept_encoding(
    api: Api, tenant: str, coding: str
) -> None:
    # the body as it was sent before: uncompressed, labelled (it used to be 202)
    for path in (f"/v1/tenants/{tenant}/events", "/v1/tenants"):
        body = EVENT if "events" in path else b'{"name": "x"}'
        resp = await api.client.post(path, **coded(body, coding))
        assert_problem(resp, 415, "content-encoding")
        assert resp.headers["accept-encoding"] == "gzip, deflate"
    counts = (await api.client.get("/v1/cluster")).json()["counts"]
    assert counts["events"] == 0


async def test_two_content_encoding_lines_are_two_codings(api: Api, tenant: str) -> None:
    headers = [("content-type", "application/json"), ("content-encoding", "gzip"),
               ("content-encoding", "gzip")]  # fmt: skip
    body = gzip.compress(gzip.compress(EVENT))
    resp = await api.client.post(f"/v1/tenants/{tenant}/events", content=body, headers=headers)
    assert_problem(resp, 415, "content-encoding")


@pytest.mark.parametrize(
    "body,coding",
    [
        (EVENT, "gzip"),  # labelled but not compressed: never read as identity
        (EVENT, "deflate"),
        (gzip.compress(EVENT)[:-9], "gzip"),  # cut short
        (gzip.compress(EVENT) + b"{}", "gzip"),  # trailing bytes that are no gzip member
        (zlib.compress(EVENT) + b"x", "deflate"),
        (gzip.compress(EVENT), "deflate"),  # the other coding
    ],
)
async def test_a_body_that_does_not_decode_is_400(
    api: Api, tenant: str, body: bytes, coding: str
) -> None:
    resp = await api.client.post(f"/v1/tenants/{tenant}/events", **coded(body, coding))
    assert_problem(resp, 400, "content-encoding")


async def test_a_decompression_bomb_is_413(api: Api, tenant: str) -> None:
    small = bomb(64 << 20)
    assert len(small) < LIMIT // 2
    for path in (f"/v1/tenants/{tenant}/events", "/v1/tenants"):
        resp = await api.client.post(path, **coded(small, "gzip"))
        body = assert_problem(resp, 413, "body")
        assert "decoded" in body["detail"]


async def test_the_limit_counts_decoded_bytes(api: Api, tenant: str) -> None:
    def event(size: int) -> bytes:
        head = b'{"event_type":"a","payload":"'
        return head + b"x" * (size - len(head) - 2) + b'"}'

    path = f"/v1/tenants/{tenant}/events"
    at = await api.client.post(path, **coded(gzip.compress(event(LIMIT)), "gzip"))
    assert at.status_code == 202, at.text
    over = await api.client.post(path, **coded(gzip.compress(event(LIMIT + 1)), "gzip"))
    assert_problem(over, 413, "body")


class _Req:
    def __init__(self, body: bytes, coding: str):
        self.scope = {"headers": [(b"content-encoding", coding.encode())]}
        self.headers = {"content-type": "application/json", "content-encoding": coding}
        self._body = body

    async def stream(self):  # noqa: ANN201
        for i in range(0, len(self._body), 16384):  # as a server hands it over
            yield self._body[i : i + 16384]


async def test_a_bomb_is_never_decoded_past_the_limit() -> None:
    small = bomb(256 << 20)  # 256 MiB of zeros in about 250 KB
    tracemalloc.start()
    try:
        with pytest.raises(PayloadTooLarge):
            await read_body(_Req(small, "gzip"), LIMIT)  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * LIMIT  # decoding all of it would take 256 MiB


async def test_an_empty_coded_body_is_empty() -> None:
    assert await read_body(_Req(b"", "gzip"), LIMIT) == b""  # type: ignore[arg-type]
    with pytest.raises(BadRequest):
        await read_body(_Req(b"\x1f", "gzip"), LIMIT)  # type: ignore[arg-type]


async def test_gzip_members_are_bounded() -> None:
    # each member costs a decoder: 13,000 empty ones took 94 ms of the event loop
    member = gzip.compress(b"[]")
    assert await read_body(_Req(member * 16, "gzip"), LIMIT) == b"[]" * 16  # type: ignore[arg-type]
    with pytest.raises(BadRequest):
        await read_body(_Req(member * 17, "gzip"), LIMIT)  # type: ignore[arg-type]


SECRET = "It's a Secret to Everybody"


async def test_inbound_signatures_are_checked_over_the_decoded_body(api: Api, tenant: str) -> None:
    resp = await api.client.post(
        "/v1/sources", json={"tenant": tenant, "kind": "github", "secret": SECRET}
    )
    src = resp.json()["id"]
    body = b'{"action":"opened","issue":{"number":1}}'
    packed = gzip.compress(body)

    def github(signed: bytes, delivery: str, coding: str = "gzip") -> dict:
        sig = "sha256=" + hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
        return coded(packed, coding, **{"x-hub-signature-256": sig, "x-github-event": "issues",
                                        "x-github-delivery": delivery})  # fmt: skip

    ok = await api.client.post(f"/in/{src}", **github(body, "d-1"))
    assert ok.status_code == 202, ok.text
    event = await published(api, tenant, ok)
    assert event["payload"] == json.loads(body)
    # a signature over the compressed bytes is not the sender's signature
    assert_problem(await api.client.post(f"/in/{src}", **github(packed, "d-2")), 401)
    refused = await api.client.post(f"/in/{src}", **github(body, "d-3", "br"))
    assert_problem(refused, 415, "content-encoding")
    assert refused.headers["accept-encoding"] == "gzip, deflate"
