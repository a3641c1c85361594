"""``demo.free_port`` hands out listening ports outside the kernel's ephemeral range.

A port picked by binding port 0 is an ephemeral one: every outgoing connection's local
end is drawn from the same range, so a client connecting between the pick and the
server's bind could take it, and the server (a node of ``make demo`` or of a cluster
test) failed to start. That is how tests/integration/test_postgres_mixed_cluster.py
failed in a full CI run: a node was never ready."""

from __future__ import annotations

import socket

from regionsync import demo


def test_ports_are_below_the_ephemeral_range_and_never_repeat() -> None:
    ephemeral_low = int(demo._PORT_RANGE.read_text().split()[0])
    ports = [demo.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < ephemeral_low for p in ports)
    with socket.socket() as s:  # and it is free
        s.bind(("127.0.0.1", ports[-1]))


def test_a_port_in_use_is_not_handed_out(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        monkeypatch.setattr(demo, "_listen_ports", lambda: range(port, port + 1))
        try:
            demo.free_port()
        except OSError:
            pass  # the only candidate is in use: none found
        else:
            raise AssertionError("a port in use was handed out")
