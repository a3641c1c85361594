"""Inbound source verification per kind: GitHub, Stripe, Standard Webhooks, generic HMAC."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook

from regionsync.core.signing import make_secret
from regionsync.core.sources import SourceConfig, check_source_fields, event_id_for, verify
from regionsync.errors import BadRequest, Unauthorized, Unprocessable

NOW = 1_800_000_000
DATASET = Path(__file__).resolve().parents[1] / "data/github-webhooks"
EMOJI = json.dumps({"type": "chat.message", "id": "m1", "text": "déjà vu 🎉🚀 שלום"},
                   ensure_ascii=False).encode()  # fmt: skip


def github(secret: str = "gh-secret") -> SourceConfig:
    return SourceConfig("src_gh", "acme", "github", secret, priority="critical")


def gh_headers(body: bytes, secret: str = "gh-secret", event: str = "issues") -> dict:
    sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"x-hub-signature-256": sig, "x-github-event": event, "x-github-delivery": "d-1"}


def test_github_real_payloads_verify() -> None:
    manifest = json.loads((DATASET / "MANIFEST.json").read_text())
    for f in manifest["files"]:
        body = (DATASET / f["file"]).read_bytes()
        got = verify(github(), gh_headers(body, event=f["event"]), body, NOW)
        want = f["event"] if not f.get("action") else f"{f['event']}.{f['action']}"
        assert got.event_type == want and got.delivery_id == "d-1"


def test_github_emoji_body() -> None:
    got = verify(github(), gh_headers(EMOJI), EMOJI, NOW)
    assert got.payload["text"].endswith("שלום")


@pytest.mark.parametrize(
    ("mutate", "error", "field"),
    [
        (lambda b, h: (b + b" ", h), Unauthorized, "X-Hub-Signature-256"),
        (lambda b, h: (b, {**h, "x-hub-signature-256": "sha256=00"}), Unauthorized, None),
        (lambda b, h: (b, {**h, "x-hub-signature-256": "sha1=abc"}), Unauthorized, None),
        (lambda b, h: (b, {k: v for k, v in h.items() if k != "x-hub-signature-256"}),
         Unauthorized, "X-Hub-Signature-256"),
        (lambda b, h: (b, {k: v for k, v in h.items() if k != "x-github-delivery"}),
         BadRequest, "X-GitHub-Delivery"),
        (lambda b, h: (b, {k: v for k, v in h.items() if k != "x-github-event"}),
         BadRequest, "X-GitHub-Event"),
        (lambda b, h: (b, {**h, "x-github-event": "bad event"}), Unprocessable, None),
    ],
)  # fmt: skip
def test_github_refusals(mutate, error, field) -> None:
    body = b'{"action":"opened","issue":{"number":1}}'
    body2, headers = mutate(body, gh_headers(body))
    with pytest.raises(error) as exc:
        verify(github(), headers, body2, NOW)
    if field:
        assert exc.value.field == field


@pytest.mark.parametrize("body", [b"\xff\xfe not utf-8", b"{not json", b""])
def test_github_signed_but_not_json_is_400(body: bytes) -> None:
    with pytest.raises(BadRequest):
        verify(github(), gh_headers(body), body, NOW)


def stripe_header(body: bytes, t: int, secret: str = "whsec_stripe", extra: str = "") -> dict:
    sig = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return {"stripe-signature": f"t={t},v1={sig}{extra}"}


STRIPE = SourceConfig("src_st", "acme", "stripe", "whsec_stripe")
STRIPE_BODY = b'{"id":"evt_1Nabc","type":"invoice.paid","data":{"object":{}}}'


def test_stripe_valid_with_several_v1() -> None:
    headers = stripe_header(STRIPE_BODY, NOW, extra=",v1=deadbeef")
    headers["stripe-signature"] = headers["stripe-signature"].replace("t=", "v0=x,t=")
    got = verify(STRIPE, headers, STRIPE_BODY, NOW + 10)
    assert (got.event_type, got.delivery_id) == ("invoice.paid", "evt_1Nabc")
    rotated = {"stripe-signature": f"t={NOW},v1=00ff,"
               + stripe_header(STRIPE_BODY, NOW)["stripe-signature"].split(",")[1]}  # fmt: skip
    assert verify(STRIPE, rotated, STRIPE_BODY, NOW).delivery_id == "evt_1Nabc"


@pytest.mark.parametrize(
    ("headers", "body", "now", "code"),
    [
        (stripe_header(STRIPE_BODY, NOW - 301), STRIPE_BODY, NOW, "stale"),
        (stripe_header(STRIPE_BODY, NOW + 301), STRIPE_BODY, NOW, "stale"),
        (stripe_header(STRIPE_BODY, NOW), STRIPE_BODY + b" ", NOW, "bad_signature"),
        ({"stripe-signature": "garbage"}, STRIPE_BODY, NOW, "bad_signature"),
        ({"stripe-signature": f"t={NOW}"}, STRIPE_BODY, NOW, "bad_signature"),
        ({}, STRIPE_BODY, NOW, "bad_signature"),
    ],
)
def test_stripe_refusals(headers: dict, body: bytes, now: int, code: str) -> None:
    with pytest.raises(Unauthorized) as exc:
        verify(STRIPE, headers, body, now)
    assert exc.value.code == code


def test_stripe_within_tolerance_both_ways() -> None:
    for t in (NOW - 300, NOW + 300):
        assert verify(STRIPE, stripe_header(STRIPE_BODY, t), STRIPE_BODY, NOW)


def test_stripe_event_without_type_is_422() -> None:
    body = b'{"id":"evt_x"}'
    with pytest.raises(Unprocessable):
        verify(STRIPE, stripe_header(body, NOW), body, NOW)


SW_SECRET = make_secret(b"s" * 32)
SW = SourceConfig("src_sw", "acme", "standard-webhooks", SW_SECRET)


def sw_headers(body: bytes, ts: int, msg_id: str = "msg_1") -> dict:
    sig = Webhook(SW_SECRET).sign(msg_id, datetime.fromtimestamp(ts, UTC), body.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": sig}


def test_standard_webhooks_signed_by_official_library() -> None:
    body = b'{"type":"user.created","data":{}}'
    got = verify(SW, sw_headers(body, NOW), body, NOW)
    assert (got.event_type, got.delivery_id) == ("user.created", "msg_1")
    got = verify(SW, sw_headers(EMOJI, NOW), EMOJI, NOW)
    assert got.event_type == "chat.message"


def test_standard_webhooks_several_signatures_and_unknown_versions() -> None:
    body = b'{"type":"a.b"}'
    h = sw_headers(body, NOW)
    h["webhook-signature"] = "v2,zzz v1,AAAA " + h["webhook-signature"]
    assert verify(SW, h, body, NOW).event_type == "a.b"


@pytest.mark.parametrize("skew", [-301, 301])
def test_standard_webhooks_tolerance(skew: int) -> None:
    body = b'{"type":"a.b"}'
    with pytest.raises(Unauthorized) as exc:
        verify(SW, sw_headers(body, NOW + skew), body, NOW)
    assert exc.value.code == "stale"


def test_standard_webhooks_tampered_and_missing() -> None:
    body = b'{"type":"a.b"}'
    h = sw_headers(body, NOW)
    with pytest.raises(Unauthorized):
        verify(SW, h, b'{"type":"a.c"}', NOW)
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        with pytest.raises(Unauthorized) as exc:
            verify(SW, {k: v for k, v in h.items() if k != name}, body, NOW)
        assert exc.value.field == name


def test_hmac_sources() -> None:
    body = b'{"kind":"ping","meta":{"id":42}}'
    cfg = SourceConfig("src_h", "acme", "hmac", "k", header="x-sig", prefix="sha256=",
                       event_type_from="payload:kind", id_from="payload:meta.id")  # fmt: skip
    sig = "sha256=" + hmac.new(b"k", body, hashlib.sha256).hexdigest()
    got = verify(cfg, {"x-sig": sig.upper().replace("SHA256=", "sha256=")}, body, NOW)
    assert (got.event_type, got.delivery_id) == ("ping", "42")
    b64 = SourceConfig("src_b", "acme", "hmac", "k", header="x-sig", algorithm="sha512",
                       encoding="base64", event_type_from="header:x-type")  # fmt: skip
    sig = base64.b64encode(hmac.new(b"k", body, hashlib.sha512).digest()).decode()
    got = verify(b64, {"x-sig": sig, "x-type": "t.one"}, body, NOW)
    assert got.event_type == "t.one" and got.delivery_id == hashlib.sha256(body).hexdigest()
    with pytest.raises(Unauthorized):
        verify(b64, {"x-sig": sig, "x-type": "t.one"}, body + b"x", NOW)


@pytest.mark.parametrize("action", ["re opened", "x" * 130, "é", 7, None])
def test_github_action_that_is_no_type_fragment_keeps_the_event(action) -> None:  # type: ignore[no-untyped-def]
    """A verified GitHub delivery is never refused for its body (GitHub does not retry):
    an ``action`` that cannot be part of an event type gives the bare event (it was 422
    naming X-GitHub-Event, QA of 2026-12-02)."""
    secret, body = "s3cr3t", json.dumps({"action": action}).encode()
    sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {"x-hub-signature-256": sig, "x-github-event": "issues", "x-github-delivery": "d1"}
    got = verify(SourceConfig("s", "acme", "github", secret), headers, body, NOW)
    assert got.event_type == "issues" and got.delivery_id == "d1"


@pytest.mark.parametrize("prefix", ["SHA256=", "V1=", "sha256=", "Sig "])
@pytest.mark.parametrize("sent_case", [str.upper, str.lower, lambda s: s])
def test_hmac_prefix_in_any_case_with_hex(prefix: str, sent_case) -> None:  # type: ignore[no-untyped-def]
    """A prefix with capitals never verified (QA of 2026-12-02): the received signature
    was lowercased whole and compared with the prefix as configured."""
    body = b'{"kind":"ping"}'
    cfg = SourceConfig("src_h", "acme", "hmac", "k", header="x-sig", prefix=prefix)
    digest = hmac.new(b"k", body, hashlib.sha256).hexdigest()
    verify(cfg, {"x-sig": sent_case(prefix) + sent_case(digest)}, body, NOW)
    with pytest.raises(Unauthorized):
        verify(cfg, {"x-sig": "x" + prefix[1:] + digest}, body, NOW)  # another label
    with pytest.raises(Unauthorized):
        verify(cfg, {"x-sig": prefix + digest[:-1] + "0" * (digest[-1] != "0")}, body, NOW)


def test_event_id_is_the_same_everywhere_and_distinct() -> None:
    a = event_id_for("src_gh", "d-1")
    assert a == event_id_for("src_gh", "d-1") and a.startswith("evt_") and len(a) == 30
    assert a != event_id_for("src_gh", "d-2") and a != event_id_for("src_other", "d-1")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "github", "secret": "s"}, "tenant"),
        ({"tenant": "acme", "kind": "gitlab", "secret": "s"}, "kind"),
        ({"tenant": "acme", "kind": "github", "secret": ""}, "secret"),
        ({"tenant": "acme", "kind": "standard-webhooks", "secret": "nope"}, "secret"),
        ({"tenant": "acme", "kind": "hmac", "secret": "s", "algorithm": "md5"}, "algorithm"),
        ({"tenant": "acme", "kind": "github", "secret": "s", "priority": "urgent"}, "priority"),
        ({"tenant": "acme", "kind": "hmac", "secret": "s", "event_type_from": "x"},
         "event_type_from"),
        ({"tenant": "acme", "kind": "github", "secret": "s", "colour": 1}, "colour"),
    ],
)  # fmt: skip
def test_source_fields_validation(body: dict, field: str) -> None:
    with pytest.raises(Unprocessable) as exc:
        check_source_fields(body)
    assert exc.value.field == field


def test_github_defaults_to_critical_priority() -> None:
    fields = check_source_fields({"tenant": "acme", "kind": "github", "secret": "s"})
    assert fields["priority"] == "critical" and fields["ack_policy"] == "local"
    fields = check_source_fields({"tenant": "acme", "kind": "stripe", "secret": "s"})
    assert fields["priority"] == "normal"
