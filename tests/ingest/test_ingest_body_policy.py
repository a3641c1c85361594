"""core.sources under issue 11: numbers in sender headers (item 2), the JSON policy and
exact payload text (item 1), body shapes of verified requests (item 5)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse

import pytest

from regionsync.adapters.routes.common import read_body
from regionsync.core.signing import make_secret, parse_secret
from regionsync.core.sources import SourceConfig, verify
from regionsync.errors import BadRequest, Unprocessable, UnsupportedMediaType

NOW = 1_800_000_000
STRIPE = SourceConfig("src_st", "acme", "stripe", "whsec_s")
SW_SECRET = make_secret(bytes(range(32)))
SW = SourceConfig("src_sw", "acme", "standard-webhooks", SW_SECRET)
GH = SourceConfig("src_gh", "acme", "github", "gh")
HM = SourceConfig("src_h", "acme", "hmac", "k", id_from="payload:id")


def stripe_headers(body: bytes, t: str) -> dict:
    sig = hmac.new(b"whsec_s", t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"stripe-signature": f"t={t},v1={sig}"}


def sw_headers(body: bytes, ts: str, msg_id: str = "msg_1") -> dict:
    key = parse_secret(SW_SECRET)
    mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    sig = "v1," + base64.b64encode(mac).decode()
    return {"webhook-id": msg_id, "webhook-timestamp": ts, "webhook-signature": sig}


def gh_headers(body: bytes, ctype: str = "application/json") -> dict:
    sig = "sha256=" + hmac.new(b"gh", body, hashlib.sha256).hexdigest()
    return {"content-type": ctype, "x-hub-signature-256": sig, "x-github-event": "issues",
            "x-github-delivery": "d-1"}  # fmt: skip


def hm_headers(body: bytes) -> dict:
    return {"x-signature": hmac.new(b"k", body, hashlib.sha256).hexdigest()}


BAD_TIMES = ["\u00b2", "1\u00b2", "\u0661\u0662", "\uff11", "9223372036854775808", "9" * 5000,
             "-1", " 1", "1.5", ""]  # fmt: skip


@pytest.mark.parametrize("t", BAD_TIMES)
def test_stripe_timestamp_must_be_ascii_digits(t: str) -> None:
    body = b'{"id":"evt_1","type":"a"}'
    with pytest.raises(BadRequest) as exc:
        verify(STRIPE, stripe_headers(body, t), body, NOW)
    assert exc.value.field == "Stripe-Signature"


@pytest.mark.parametrize("ts", [t for t in BAD_TIMES if t])
def test_standard_webhooks_timestamp_must_be_ascii_digits(ts: str) -> None:
    body = b'{"type":"a"}'
    with pytest.raises(BadRequest) as exc:
        verify(SW, sw_headers(body, ts), body, NOW)
    assert exc.value.field == "webhook-timestamp"


@pytest.mark.parametrize(
    "body",
    [b'{"id":"1","type":"t","n":12345678901234567.89}',
     b' {"id":"1","type":"t","n":1.10,"e":1E2,"z":-0}\n', b'{"id":"1","type":"t","s":"\\ud83d"}'],
)  # fmt: skip
def test_payload_text_is_the_body_as_written(body: bytes) -> None:
    got = verify(HM, hm_headers(body), body, NOW)
    assert got.text == body.decode() and got.payload["id"] == "1"


@pytest.mark.parametrize("bad", ["\\ud83d", "a\\u0000b", "\\u0007", "x\\u202ey"])
def test_delivery_id_with_a_lone_surrogate_or_a_control_is_422_not_500(bad: str) -> None:
    """A NUL in an id was accepted: SQLite cut the stored key at it, PostgreSQL refused
    the commit, and a peer refuses a record holding one."""
    body = b'{"id":"%s","type":"a"}' % bad.encode()
    with pytest.raises(Unprocessable) as exc:
        verify(HM, hm_headers(body), body, NOW)
    assert exc.value.field == "payload:id"
    with pytest.raises(Unprocessable) as exc:
        verify(STRIPE, stripe_headers(body, str(NOW)), body, NOW)
    assert exc.value.field == "id"


@pytest.mark.parametrize("bad", ["d\x85", "\x9b31m", "a\x00b", "\x07", "x\tz"])
def test_a_header_delivery_id_with_a_control_is_400(bad: str) -> None:
    """A header decodes as Latin-1, so bytes 0x80-0x9F arrive as C1 controls: GitHub's and
    Standard Webhooks' delivery ids are refused as the body's ids are (``check_text``),
    as a malformed sender header (400), signature verified or not."""
    body = b'{"action":"opened"}'
    with pytest.raises(BadRequest) as exc:
        verify(GH, {**gh_headers(body), "x-github-delivery": bad}, body, NOW)
    assert exc.value.field == "X-GitHub-Delivery" and "U+00" in exc.value.detail
    body = b'{"type":"a"}'
    with pytest.raises(BadRequest) as exc:
        verify(SW, sw_headers(body, str(NOW), msg_id=bad), body, NOW)
    assert exc.value.field == "webhook-id" and "U+00" in exc.value.detail


def test_a_header_delivery_id_of_visible_text_is_kept() -> None:
    body = b'{"action":"opened"}'
    for ok in ("72d3162e-cc78-11e3-81ab-4c9367dc0958", "caf\u00e9 d\u00e9j\u00e0"):
        got = verify(GH, {**gh_headers(body), "x-github-delivery": ok}, body, NOW)
        assert got.delivery_id == ok
        got = verify(SW, sw_headers(b'{"type":"a"}', str(NOW), msg_id=ok), b'{"type":"a"}', NOW)
        assert got.delivery_id == ok


def test_github_form_body() -> None:
    payload = '{"action":"opened","n":1.10,"s":"caf\u00e9 +&="}'
    body = ("payload=" + urllib.parse.quote_plus(payload)).encode()
    got = verify(GH, gh_headers(body, "application/x-www-form-urlencoded"), body, NOW)
    assert got.event_type == "issues.opened" and got.text == payload
    for bad in (b"nothing=1", b"payload=1&payload=2", b"payload=%FF"):
        with pytest.raises(BadRequest):
            verify(GH, gh_headers(bad, "application/x-www-form-urlencoded"), bad, NOW)


def test_form_body_only_for_github() -> None:
    body = b"payload=%7B%7D"
    headers = {**hm_headers(body), "content-type": "application/x-www-form-urlencoded"}
    with pytest.raises(UnsupportedMediaType):
        verify(HM, headers, body, NOW)


@pytest.mark.parametrize("body", [b'{"data":1}', b"[]", b'{"type":""}', b'{"type":null}'])
def test_standard_webhooks_default_event_type(body: bytes) -> None:
    assert verify(SW, sw_headers(body, str(NOW)), body, NOW).event_type == "webhook"
    custom = SourceConfig("s", "acme", "standard-webhooks", SW_SECRET, default_event_type="x.y")
    assert verify(custom, sw_headers(body, str(NOW)), body, NOW).event_type == "x.y"


def test_legacy_source_without_default_gets_webhook() -> None:
    legacy = SourceConfig("s", "acme", "hmac", "k", default_event_type=None)  # type: ignore[arg-type]
    body = b'{"no":"type"}'
    assert verify(legacy, hm_headers(body), body, NOW).event_type == "webhook"


class _Req:
    def __init__(self, headers: dict[str, str], body: bytes = b"{}"):
        self.headers, self._body = headers, body
        self.scope = {"headers": [(k.encode(), v.encode()) for k, v in headers.items()]}

    async def stream(self):  # noqa: ANN201
        yield self._body


async def test_content_length_must_be_ascii_digits() -> None:
    for declared in ["\u00b2", "1\u00b2", "\u0661", "-1", "9" * 30, "0x10", "1e3", ""]:
        req = _Req({"content-type": "application/json", "content-length": declared})
        with pytest.raises(BadRequest) as exc:
            await read_body(req, 1024)  # type: ignore[arg-type]
        assert exc.value.field == "content-length"
    req = _Req({"content-type": "application/json", "content-length": "2"})
    assert await read_body(req, 1024) == b"{}"  # type: ignore[arg-type]
