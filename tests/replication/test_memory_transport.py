"""The in-memory transport (adapters/memory_transport.py) as the harnesses restart nodes:
a stopped transport ends what it serves and leaves a successor's handler in place."""

from __future__ import annotations

import asyncio

from memnodes import eventually, make_node

from regionsync.adapters.memory_transport import MemoryNetwork


async def test_stopping_cancels_served_streams_and_keeps_the_successor() -> None:
    net = MemoryNetwork()
    stuck = asyncio.Event()

    async def waits_for_ever(stream) -> None:  # noqa: ANN001
        await stuck.wait()  # a served stream waiting on its stopped node

    old, new = net.transport("pg"), net.transport("pg")
    await old.serve(waits_for_ever)
    client = await net.transport("b").connect("pg", 1.0)
    served = list(old.served)
    await new.serve(waits_for_ever)  # another process of the region takes over
    await old.stop()
    await asyncio.sleep(0)
    assert all(t.cancelled() or t.done() for t in served)
    assert "pg" in net.handlers  # the successor still serves
    assert client.closed  # closed by the stop, and dropped from the network's list
    await net.transport("b").connect("pg", 1.0)
    assert len(net.streams) == 2
    await new.stop()
    assert "pg" not in net.handlers


async def test_the_accepting_side_ends_a_stream_its_peer_ended() -> None:
    """A stream the dialing node ended (end-of-stream, not a cancel) sends its last acks
    and ends on the accepting side; before, its handler waited on its reply queue until
    the accepting node's transport stopped."""
    net = MemoryNetwork()
    a, b = make_node(net, "a", ["b"]), make_node(net, "b", ["a"])
    await a.start()
    await b.start()
    try:
        await eventually(lambda: a.peers["b"].connected and bool(net.servers["b"].served))
        await a.stop()  # a's streams end; b keeps running
        await eventually(lambda: not net.servers["b"].served)
    finally:
        await b.stop()
