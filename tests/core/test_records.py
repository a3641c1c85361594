"""Record bodies: the optional ``attempt`` section (issue 15) and old bodies without it;
what a body may hold (types, value ranges, NUL characters, set elements)."""

from __future__ import annotations

from dataclasses import replace

import msgpack
import pytest

from crdt import ORSet
from regionsync.core.envelope import REQUEST_HEADERS_MAX_BYTES
from regionsync.core.model import Attempt, Delivery, DeliveryStatus, Event
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


# -- values every store keeps (a helper's attack, 2026-12-01): each of these was accepted,
# and SQLite then failed the whole group commit ("malformed JSON"), cut a text at its NUL
# or read a huge int back as a float; PostgreSQL refused the commit

EV = Event("evt_1", "acme", "a.b", b"{}", "a", 1000)


def _with(section: str, change: dict, **parts: object) -> bytes:
    body = msgpack.unpackb(encode_body(**parts))
    body[section].update(change)
    return msgpack.packb(body, use_bin_type=True)


@pytest.mark.parametrize(
    ("section", "change", "reason"),
    [("event", {"received_at_ms": 2**63}, "event.received_at_ms: outside"),
     ("event", {"received_at_ms": 2**64 - 1}, "event.received_at_ms: outside"),
     ("event", {"received_at_ms": -1}, "event.received_at_ms: outside"),
     ("event", {"tenant": "ac\x00me"}, "event.tenant: holds a NUL"),
     ("event", {"owner_gen": "g\x00"}, "event.owner_gen: holds a NUL"),
     ("delivery", {"attempts": 2**31}, "delivery.attempts: outside"),
     ("delivery", {"generation": 2**31}, "delivery.generation: outside"),
     ("delivery", {"next_attempt_at_ms": 2**63}, "delivery.next_attempt_at_ms: outside"),
     ("attempt", {"n": 2**31}, "attempt.n: outside"),
     ("attempt", {"status_code": -1}, "attempt.status_code: outside"),
     ("attempt", {"latency_ms": float("nan")}, "attempt.latency_ms: not a finite"),
     ("attempt", {"latency_ms": float("inf")}, "attempt.latency_ms: not a finite"),
     ("attempt", {"delivery_id": "dlv\x00"}, "attempt.delivery_id: holds a NUL")],
)  # fmt: skip
def test_values_no_store_keeps_are_refused(section: str, change: dict, reason: str) -> None:
    parts = {"event": EV} if section == "event" else {"delivery": D, "attempt": A}
    kind = "event" if section == "event" else "delivery"
    with pytest.raises(ValueError, match=reason):
        decode_body(kind, _with(section, change, **parts))


def test_edges_of_the_ranges_decode() -> None:
    body = _with("delivery", {"attempts": 2**31 - 1, "next_attempt_at_ms": 2**63 - 1},
                 delivery=D, attempt=A)  # fmt: skip
    got = decode_body("delivery", body).delivery
    assert (got.attempts, got.next_attempt_at_ms) == (2**31 - 1, 2**63 - 1)
    body = _with("event", {"received_at_ms": 0}, event=EV)
    assert decode_body("event", body).event.received_at_ms == 0


def test_a_nul_in_free_text_becomes_a_replacement_character() -> None:
    """A receiver's answer may hold NUL bytes: kept as U+FFFD, as the sender writes it."""
    change = {"response_excerpt": "a\x00b", "error": "\x00", "response_headers": "x: \x00",
              "request_headers": "y: \x00"}  # fmt: skip
    got = decode_body("delivery", _with("attempt", change, delivery=D, attempt=A)).attempt
    assert got.response_excerpt == "a\ufffdb" and got.error == "\ufffd"
    assert got.response_headers == "x: \ufffd" and got.request_headers == "y: \ufffd"


@pytest.mark.parametrize("section", ["idempotency", "audit"])
def test_owner_gen_belongs_to_events_and_deliveries_only(section: str) -> None:
    parts = (
        {"idempotency": ("acme", "k", "evt_1", "0" * 64, 5, "a")}
        if section == "idempotency"
        else {"audit": dict.fromkeys(("who", "op", "object", "tenant", "detail"), "x")}
    )
    with pytest.raises(ValueError, match=f"{section}: expected fields"):
        decode_body("event", _with(section, {"owner_gen": "g"}, event=EV, **parts))


@pytest.mark.parametrize("section", ["registry", "event", "delivery", "deliveries", "attempt",
                                     "idempotency", "audit"])  # fmt: skip
def test_a_nil_section_is_refused(section: str) -> None:
    body = msgpack.unpackb(encode_body(event=EV))
    body[section] = None
    with pytest.raises(ValueError, match=section):
        decode_body("event", msgpack.packb(body))


@pytest.mark.parametrize("element", [5, b"ep_1", "ep\x00"])
@pytest.mark.parametrize("key", ["tenants", "t/acme/endpoints", "e/ep_1/event_types", "tokens"])
def test_a_set_holds_only_ids(key: str, element: object) -> None:
    """An int or bytes element merged into the registry made its views raise TypeError."""
    state = ORSet.empty().add(element, actor="x")
    with pytest.raises(ValueError, match=f"registry.{key}: holds an element"):
        decode_body("registry", encode_body(registry={key: state}))
    ok = ORSet.empty().add("ep_1", actor="x")
    assert decode_body("registry", encode_body(registry={key: ok})).registry[key] == ok


def test_a_registry_record_without_its_section_is_an_empty_change() -> None:
    """An empty tenant PATCH logged a record with only its audit section, which every
    peer refused, stopping that region's replication (QA 2026-12-02): it decodes now as
    a change of nothing. The other kinds still need their section; an empty map is
    still refused."""
    audit = {"who": "token:ops", "op": "tenant.update", "object": "tenant/t1", "tenant": "t1",
             "detail": ""}  # fmt: skip
    dec = decode_body("registry", encode_body(audit=audit))
    assert dec.registry == {} and dec.audit == audit
    for kind in ("event", "delivery"):
        with pytest.raises(ValueError, match=f"no '{kind}' section"):
            decode_body(kind, encode_body(audit=audit))
    for kind in ("registry", "event", "delivery"):
        with pytest.raises(ValueError, match="must be a map"):
            decode_body(kind, encode_body())
