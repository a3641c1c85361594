"""core.envelope: the Standard Webhooks body shape keeps the payload bytes verbatim."""

from __future__ import annotations

import json

import pytest

from regionsync.core.envelope import (
    EVENT_TYPE_HEADER,
    MASK,
    REDACTED,
    REQUEST_HEADERS_MAX_BYTES,
    delivery_body,
    delivery_headers,
    masked_request_headers,
    masked_text,
    recorded_headers,
)
from regionsync.core.signing import make_secret


def test_raw_is_the_payload_itself() -> None:
    payload = b' {"a": 1.10} '
    assert delivery_body("raw", "t", 0, payload) is payload


def test_standard_webhooks_shape() -> None:
    payload = b'\n{"a": 1.10, "s": "\\ud83d", "u": "\xc3\xbc"}\n'
    body = delivery_body("standard-webhooks", "order.paid", 1_700_000_000_123, payload)
    assert body == (
        b'{"type":"order.paid","timestamp":"2023-11-14T22:13:20.123Z","data":'
        + payload.strip()
        + b"}"
    )
    assert json.loads(body)["data"]["u"] == "ü"


def test_scalar_payload_and_unknown_format() -> None:
    assert json.loads(delivery_body("standard-webhooks", "t", 0, b"42"))["data"] == 42
    with pytest.raises(ValueError):
        delivery_body("xml", "t", 0, b"{}")


def test_headers_name_the_event_type_and_endpoint_headers_do_not_override() -> None:
    secret = make_secret(b"k" * 32)
    h = delivery_headers({"x-a": "1"}, "ua", "evt_1", "a.b", [secret], 5, b"{}")
    assert h[EVENT_TYPE_HEADER] == "a.b" and h["x-a"] == "1" and h["webhook-id"] == "evt_1"
    assert h["webhook-signature"].startswith("v1,")


def _lines(text: str) -> list[tuple[str, str]]:
    return [tuple(line.split(": ", 1)) for line in text.split("\n")]  # type: ignore[misc]


def test_recorded_headers_ours_first_credentials_redacted() -> None:
    secret = make_secret(b"k" * 32)
    own = {"Authorization": "Bearer s3cr3t", "X-Api-Key": "k-123", "Cookie": "sid=1",
           "X-Auth-Token": "t", "X-Client-Secret": "s", "X-Team": "blue"}  # fmt: skip
    sent = delivery_headers(own, "regionsync/1", "evt_1", "order.paid", [secret], 1700, b"{}")
    got = _lines(recorded_headers(sent))
    assert [k for k, _ in got[:6]] == ["webhook-id", "webhook-timestamp", "webhook-signature",
                                       EVENT_TYPE_HEADER, "content-type", "user-agent"]  # fmt: skip
    assert dict(got[:6]) == {k: sent[k] for k, _ in got[:6]}
    assert dict(got[6:]) == {"Authorization": REDACTED, "X-Api-Key": REDACTED,
                             "Cookie": REDACTED, "X-Auth-Token": REDACTED,
                             "X-Client-Secret": REDACTED, "X-Team": "blue"}  # fmt: skip
    text = recorded_headers(sent)
    assert "s3cr3t" not in text and "k-123" not in text and secret not in text


def test_recorded_headers_are_bounded_and_say_what_was_left_out() -> None:
    own = {f"X-Pad-{i:02}": "v" * 1000 for i in range(10)}
    sent = delivery_headers(own, "ua", "evt_1", "t", [make_secret(b"k" * 32)], 1, b"{}")
    text = recorded_headers(sent)
    assert len(text.encode()) <= REQUEST_HEADERS_MAX_BYTES
    lines = text.split("\n")
    assert lines[0].startswith("webhook-id: ") and lines[2].startswith("webhook-signature: v1,")
    kept = [line for line in lines if line.startswith("X-Pad-")]
    assert len(kept) == 3  # 6 of ours (~150 bytes) + 3 x 1008 bytes fit in 4096
    assert lines[-1] == f"... {10 - len(kept)} more headers not recorded"
    # everything fits: no note; a tiny bound keeps whole lines only
    assert "more headers" not in recorded_headers({"a": "b"})
    assert recorded_headers({"webhook-id": "evt_1", "x": "y"}, 18) == "webhook-id: evt_1"
    assert recorded_headers({"webhook-id": "evt_1"}, 5) == ""


def test_rfc3339_shows_times_it_cannot_write_as_the_nearest_bound() -> None:
    """A time stored before its range was checked (a token's expiry in year 10000) made
    every answer showing it a 500 (QA 2026-12-02)."""
    from regionsync.core.envelope import RFC3339_MS_RANGE, rfc3339_ms

    assert rfc3339_ms(RFC3339_MS_RANGE[1]) == "9999-12-31T23:59:59.999Z"
    assert rfc3339_ms(RFC3339_MS_RANGE[1] + 1) == "9999-12-31T23:59:59.999Z"
    assert rfc3339_ms(2**63 - 1) == "9999-12-31T23:59:59.999Z"
    assert rfc3339_ms(RFC3339_MS_RANGE[0]) == "0001-01-01T00:00:00.000Z"
    assert rfc3339_ms(-(2**63)) == "0001-01-01T00:00:00.000Z"


def test_a_reader_without_secrets_sees_no_endpoint_header_value() -> None:
    """Issue 38 kind 5: every endpoint header's value is masked, not only names that look
    like credentials; ours and the note on headers left out stay."""
    headers = delivery_headers(
        {"x-vercel-protection-bypass": "bypass-value", "X-Api-Key": "k-123", "X-Team": "t"},
        "ua", "msg_1", "a", ["whsec_" + "A" * 32], 1_700_000_000, b"{}",
    )  # fmt: skip
    recorded = recorded_headers(headers) + "\n... 2 more headers not recorded"
    shown = masked_request_headers(recorded)
    lines = dict(line.split(": ", 1) for line in shown.split("\n")[:-1])
    assert lines["x-vercel-protection-bypass"] == lines["X-Api-Key"] == lines["X-Team"] == MASK
    assert lines["webhook-id"] == "msg_1" and lines["user-agent"] == "ua"
    assert lines["webhook-signature"] == headers["webhook-signature"]
    assert shown.endswith("\n... 2 more headers not recorded")
    assert masked_request_headers("") == ""
    # in free text (a receiver echoing its request): every occurrence, longest first;
    # values shorter than MASK_MIN_CHARS are not searched for
    text = "got bypass-value and bypass-value-2, team t"
    assert masked_text(text, ["bypass-value", "bypass-value-2", "t"]) == (
        f"got {MASK} and {MASK}, team t"
    )
