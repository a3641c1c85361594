"""Record bodies: the optional ``attempt`` section (issue 15) and old bodies without it."""

from __future__ import annotations

from dataclasses import replace

import msgpack
import pytest

from regionsync.core.envelope import REQUEST_HEADERS_MAX_BYTES
from regionsync.core.model import Attempt, Delivery, DeliveryStatus
from regionsync.core.records import decode_body, encode_body

D = Delivery("dlv_1", "evt_1", "ep_1", "acme", DeliveryStatus.PENDING, 1, 5, "a", 1, 2)
A = Attempt("dlv_1", 1, 3, "a", 500, 12.5, "http_500", "oops", "ep_1", 0, "x: y", "g1")


def test_attempt_round_trips_and_old_bodies_still_decode() -> None:
    got = decode_body("delivery", encode_body(delivery=D, attempt=A))
    assert got.delivery == D and got.attempt == A
    old = decode_body("delivery", encode_body(delivery=D))
    assert old.delivery == D and old.attempt is None
    ok = Attempt("dlv_1", 2, 4, "a", 204, 3, None, "", "ep_1", 0, "", "")  # int latency
    assert decode_body("delivery", encode_body(delivery=D, attempt=ok)).attempt == ok


@pytest.mark.parametrize(
    ("change", "reason"),
    [({"n": "1"}, "attempt.n"), ({"extra": 1}, "attempt:"), ({"error": 5}, "attempt.error"),
     # a bool is no number, in a field of one type or of several
     ({"n": True}, "attempt.n"), ({"latency_ms": True}, "attempt.latency_ms"),
     ({"status_code": False}, "attempt.status_code")],
)  # fmt: skip
def test_malformed_attempt_is_refused(change: dict, reason: str) -> None:
    body = msgpack.unpackb(encode_body(delivery=D, attempt=A))
    body["attempt"].update(change)
    with pytest.raises(ValueError, match=reason):
        decode_body("delivery", msgpack.packb(body, use_bin_type=True))


def test_request_headers_round_trip_and_bodies_without_them_decode() -> None:
    sent = replace(A, request_headers="webhook-id: evt_1\nwebhook-timestamp: 3")
    body = encode_body(delivery=D, attempt=sent)
    assert decode_body("delivery", body).attempt == sent
    assert msgpack.unpackb(body)["attempt"]["request_headers"] == sent.request_headers
    # an attempt recorded before request headers were (or without any): no such key, ""
    old = msgpack.unpackb(encode_body(delivery=D, attempt=A))
    assert "request_headers" not in old["attempt"]
    assert decode_body("delivery", msgpack.packb(old)).attempt.request_headers == ""


@pytest.mark.parametrize(
    ("value", "reason"),
    [(5, "attempt.request_headers: wrong type"),
     ("x" * (REQUEST_HEADERS_MAX_BYTES + 1), "attempt.request_headers: longer")],
)  # fmt: skip
def test_bad_request_headers_are_refused(value: object, reason: str) -> None:
    body = msgpack.unpackb(encode_body(delivery=D, attempt=A))
    body["attempt"]["request_headers"] = value
    with pytest.raises(ValueError, match=reason):
        decode_body("delivery", msgpack.packb(body, use_bin_type=True))


@pytest.mark.parametrize(
    ("section", "change", "reason"),
    [("delivery", {"next_attempt_at_ms": True}, "delivery.next_attempt_at_ms"),
     ("delivery", {"attempts": False}, "delivery.attempts"),
     ("delivery", {"owner_gen": 5}, "delivery.owner_gen"),
     ("delivery", {"owner_gen": "g", "extra": 1}, "delivery:")],
)  # fmt: skip
def test_malformed_delivery_is_refused(section: str, change: dict, reason: str) -> None:
    body = msgpack.unpackb(encode_body(delivery=D))
    body[section].update(change)
    with pytest.raises(ValueError, match=reason):
        decode_body("delivery", msgpack.packb(body, use_bin_type=True))


def test_delivery_with_and_without_owner_gen_decodes() -> None:
    body = msgpack.unpackb(encode_body(delivery=D))
    assert "owner_gen" not in body["delivery"]  # written only when set
    assert decode_body("delivery", msgpack.packb(body)).delivery == D
    body["delivery"]["owner_gen"] = "a:1#1"
    assert decode_body("delivery", msgpack.packb(body)).delivery == replace(D, owner_gen="a:1#1")
