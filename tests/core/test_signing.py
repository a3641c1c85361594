"""Standard Webhooks signing: the spec's test vector and the official verifier."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from regionsync.core.signing import make_secret, parse_secret, sign, signature_headers

# the vector used by the official libraries (docs/design.md#field-facts)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
TIMESTAMP = 1614265330
BODY = b'{"test": 2432232314}'
EXPECTED = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_spec_vector() -> None:
    assert sign(parse_secret(SECRET), MSG_ID, TIMESTAMP, BODY) == EXPECTED


def test_official_library_agrees() -> None:
    wh = Webhook(SECRET)
    ts = datetime.fromtimestamp(TIMESTAMP, UTC)
    assert wh.sign(MSG_ID, ts, BODY.decode()) == EXPECTED


def test_official_verifier_accepts_rotation_headers() -> None:
    old, new = make_secret(b"o" * 32), make_secret(b"n" * 32)
    now = int(datetime.now(UTC).timestamp())
    headers = signature_headers([old, new], MSG_ID, now, BODY)
    assert len(headers["webhook-signature"].split()) == 2
    for secret in (old, new):
        Webhook(secret).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(make_secret(b"x" * 32)).verify(BODY, headers)


@pytest.mark.parametrize("bad", ["", "whsec_", "abc", "whsec_!!!", "whsec_" + "QUFB", 42, None])
def test_bad_secrets_rejected(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_secret(bad)  # type: ignore[arg-type]


def test_make_secret_bounds() -> None:
    with pytest.raises(ValueError):
        make_secret(b"short")
    assert parse_secret(make_secret(b"k" * 24)) == b"k" * 24
