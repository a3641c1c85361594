"""core.brokers (issue 46): destination bodies judged naming the member, the URL shown
without its password, the address a connection is pinned to, and the registry value: an
endpoint's view carries its destination, the key is sealed at rest and gated by the
broker-destinations capability (a node that does not read it refuses the record)."""

from __future__ import annotations

import pytest

from crdt import Timestamp
from regionsync.core.brokers import (
    UNREADABLE,
    BrokerDestination,
    broker_headers,
    check_destination_body,
    destination_json,
    destination_of,
)
from regionsync.core.capabilities import ALL
from regionsync.core.records import decode_body, encode_body
from regionsync.core.registry import Registry, is_secret_key, may_hold_secret
from regionsync.core.registry_keys import key_feature
from regionsync.errors import Unprocessable

A = "us-east-1:1"
RABBIT = {"type": "rabbitmq", "url": "amqp://app:p%40ss@mq.example:5671/prod",
          "exchange": "events", "routing_key": "orders"}  # fmt: skip


def test_bodies() -> None:
    assert check_destination_body(None) is None
    assert check_destination_body({"type": "http"}) is None
    d = check_destination_body(RABBIT)
    assert d == BrokerDestination("rabbitmq", RABBIT["url"], "events", "orders")
    assert d.value() == RABBIT and destination_of(d.value()) == d
    nats = check_destination_body({"type": "nats", "url": "tls://n.example", "subject": "a.b"})
    assert nats is not None and nats.host_port == ("n.example", 4222) and nats.tls
    red = check_destination_body({"type": "redis", "url": "redis://r.example/3", "stream": "s"})
    assert red is not None and red.host_port == ("r.example", 6379) and not red.tls
    for body, field in [
        ([], "destination"),
        ({"type": "sqs"}, "destination.type"),
        ({**RABBIT, "url": "http://mq.example/"}, "destination.url"),
        ({**RABBIT, "url": "amqp://mq.example:0/"}, "destination.url"),
        ({**RABBIT, "url": "amqp://mq.example/?heartbeat=5"}, "destination.url"),
        ({**RABBIT, "routing_key": ""}, "destination.routing_key"),
        ({**RABBIT, "exchange": "a b"}, "destination.exchange"),
        ({**RABBIT, "stream": "s"}, "destination.stream"),
        ({"type": "nats", "url": "nats://n/x", "subject": "a"}, "destination.url"),
        ({"type": "nats", "url": "nats://n", "subject": "a.>"}, "destination.subject"),
        ({"type": "nats", "url": "nats://n", "subject": "a", "stream": "a.b"},
         "destination.stream"),
        ({"type": "redis", "url": "redis://r", "stream": 5}, "destination.stream"),
    ]:  # fmt: skip
        with pytest.raises(Unprocessable) as err:
            check_destination_body(body)
        assert err.value.field == field, body


def test_password_masked_and_address_pinned() -> None:
    d = check_destination_body(RABBIT)
    assert d is not None
    assert d.public_url() == "amqp://app:\u2026@mq.example:5671/prod"
    assert destination_json(d, secrets=False)["url"] == d.public_url()
    assert destination_json(d) == RABBIT and destination_json(None) == {"type": "http"}
    assert d.with_host("192.0.2.7") == "amqp://app:p%40ss@192.0.2.7:5671/prod"
    assert d.with_host("2001:db8::1") == "amqp://app:p%40ss@[2001:db8::1]:5671/prod"
    bare = BrokerDestination("nats", "nats://n.example", subject="a")
    assert bare.public_url() == "nats://n.example" and bare.with_host("192.0.2.1").endswith(
        "192.0.2.1:4222"
    )
    headers = {"user-agent": "regionsync", "webhook-id": "evt_1", "x-a": "1"}
    assert broker_headers(headers) == {"webhook-id": "evt_1", "x-a": "1"}


def _endpoint_record(with_destination: bool) -> bytes:
    reg = Registry()
    reg.apply(reg.create_tenant("acme", "Acme", 1000, A, Timestamp(1000, 0)))
    fields = {"url": "amqp://app:\u2026@mq.example:5671/prod", "secret": "whsec_" + "A" * 32}
    if with_destination:
        fields["secret_destination"] = RABBIT
    deltas = reg.create_endpoint("ep1", "acme", fields, [], 1001, A, Timestamp(1001, 0))
    reg.apply(deltas)
    view = reg.endpoint("ep1", "acme")
    assert view is not None
    assert (view.destination is not None) == with_destination
    return encode_body(deltas)


def test_registry_key_sealed_and_gated() -> None:
    key = "e/ep1/secret_destination"
    assert is_secret_key(key) and key_feature(key) == "broker-destinations"
    body = _endpoint_record(True)
    assert may_hold_secret(body)  # log records carrying it are sealed too
    assert key in decode_body("registry", body, ALL).registry
    with pytest.raises(ValueError, match="unknown key 'e/ep1/secret_destination'"):
        decode_body("registry", body, ALL - {"broker-destinations"})
    decode_body("registry", _endpoint_record(False), ALL - {"broker-destinations"})


def test_an_unreadable_destination_is_never_http() -> None:
    """A value this release cannot read (a peer's bug, a later release's type) reads as
    ``UNREADABLE``, not as no destination: the endpoint is not POSTed to its url."""
    assert destination_of(None) is None
    for bad in ({"type": "kafka", "url": "kafka://k"}, "redis", {"type": "redis", "url": 5}):
        assert destination_of(bad) is UNREADABLE
    reg = Registry()
    reg.apply(reg.create_tenant("acme", "Acme", 1000, A, Timestamp(1000, 0)))
    fields = {"url": "kafka://k:9092", "secret_destination": {"type": "kafka"}}
    reg.apply(reg.create_endpoint("ep1", "acme", fields, [], 1001, A, Timestamp(1001, 0)))
    view = reg.endpoint("ep1", "acme")
    assert view is not None and view.destination is UNREADABLE
