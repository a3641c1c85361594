"""A replication link's down and up transitions are logged once each, with the reason,
and a link that was up reconnects after one short backoff step (issue 43: after a peer
restarted, a link stayed down ~50 s with nothing logged: an ack timeout ended the
session, and the backoff grown during earlier failures, which an established session
never reset, came on top)."""

from __future__ import annotations

import logging
import time

import pytest
from memnodes import eventually, make_node

from regionsync.adapters.memory_transport import MemoryNetwork
from regionsync.runtime.node import Node

LINKS = {"reconnect_min_s": 0.05, "reconnect_max_s": 4.0, "heartbeat_s": 0.2,
         "ack_timeout_s": 1.0, "failover_after_s": 60.0}  # fmt: skip


def _lines(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "regionsync.replication" and r.getMessage().startswith(start)]  # fmt: skip


def _silence(net: MemoryNetwork, a: str, b: str) -> None:
    """The open streams between ``a`` and ``b`` go silent without closing, as a
    connection to a host that vanished (a peer's machine or container restarted):
    whatever is sent is lost, nothing arrives, no end is seen."""

    async def lost(msg: object) -> None:
        return None

    async def no_end() -> None:
        return None

    for s in net.streams:
        if s.link == frozenset((a, b)):
            s.send = lost  # type: ignore[method-assign]
            s.close = no_end  # type: ignore[method-assign]


async def test_a_link_that_was_up_redials_at_the_first_step_and_says_so(
    net: MemoryNetwork, started: list[Node], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="regionsync.replication")
    a = make_node(net, "a", ["b"], **LINKS)
    b = make_node(net, "b", ["a"], **LINKS)
    b.peers["a"].address = "nowhere"  # b never dials a: a's link alone decides
    net.partition("a", "b")
    for n in (a, b):
        await n.start()
        started.append(n)
    # a's link fails until its backoff reaches reconnect_max_s (attempts 50 ms .. 4 s:
    # at least 3.2 s of waits, at most 6.4 s)
    await eventually(lambda: len(_lines(caplog, "link to b not up yet")) == 1)
    grown = time.monotonic()
    await eventually(lambda: time.monotonic() - grown > 6.5, timeout_s=10)
    net.heal()
    await eventually(lambda: a.peers["b"].connected, timeout_s=10)
    assert _lines(caplog, "link to b up") == ["link to b up"]
    # the connection dies silently: the ack timeout ends the session, logged once with
    # the reason, and the link is back at the first backoff step
    _silence(net, "a", "b")
    await eventually(lambda: len(_lines(caplog, "link to b down: ")) == 1, timeout_s=10)
    down_at = time.monotonic()
    await eventually(lambda: a.peers["b"].connected, timeout_s=10)
    # before issue 43 the grown backoff (4 s, jittered to 2..4 s) came on top
    assert time.monotonic() - down_at < 1.5
    (down,) = _lines(caplog, "link to b down: ")
    assert "no ack within ack_timeout_s=1.0s" in down and "redialing in 0.0" in down, down
    (up,) = _lines(caplog, "link to b up again after ")
    assert "0 failed attempt(s)" in up
    assert len(_lines(caplog, "link to b")) == 4  # not up yet, up, down, up again
