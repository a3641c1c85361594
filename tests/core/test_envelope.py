"""core.envelope: the Standard Webhooks body shape keeps the payload bytes verbatim."""

from __future__ import annotations

import json

import pytest

from regionsync.core.envelope import EVENT_TYPE_HEADER, delivery_body, delivery_headers
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
