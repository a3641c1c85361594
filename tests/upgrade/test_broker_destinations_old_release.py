"""Old nodes and broker destinations (issue 46): release 917426d (the last without them)
refuses a registry record that carries an endpoint's ``secret_destination``, as a whole,
so it never holds such an endpoint and never delivers it as HTTP to its ``url``; the
current code writes that key only once every region announces ``broker-destinations``
(tests/api/test_api_brokers.py checks the refusal while one does not)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from old_release import _env, build, missing_history

from crdt import Timestamp
from regionsync.core.records import encode_body
from regionsync.core.registry import Registry

BEFORE_BROKERS = "917426da5fb04adc1054aa5774992ef3ff63cb8d"
A = "us-east-1:1"
DECODE = """
import sys
from regionsync.core.records import decode_body
try:
    decoded = decode_body("registry", sys.stdin.buffer.read())
except ValueError as exc:
    print("refused:", exc)
else:
    print("decoded:", sorted(decoded.registry))
"""


def _record(destination: bool) -> bytes:
    reg = Registry()
    reg.apply(reg.create_tenant("acme", "Acme", 1000, A, Timestamp(1000, 0)))
    fields = {"url": "redis://127.0.0.1:6379/0", "secret": "whsec_" + "A" * 32}
    if destination:
        fields["secret_destination"] = {"type": "redis", "url": fields["url"], "stream": "s"}
    return encode_body(reg.create_endpoint("ep1", "acme", fields, [], 1001, A,
                                           Timestamp(1001, 0)))  # fmt: skip


def test_917426d_refuses_an_endpoint_record_with_a_destination(tmp_path: Path) -> None:
    why = missing_history(BEFORE_BROKERS)
    if why:
        pytest.skip(why)
    old = build(tmp_path, BEFORE_BROKERS)

    def old_decode(body: bytes) -> str:
        return subprocess.run(
            [str(old.python), "-P", "-c", DECODE], input=body, capture_output=True,
            check=True, env=_env(), cwd=old.tree,
        ).stdout.decode()  # fmt: skip

    assert old_decode(_record(False)).startswith("decoded:")  # plain endpoints as before
    out = old_decode(_record(True))
    assert out.startswith("refused:") and "secret_destination" in out, out
