"""The replication session's state table (core/peer_session.py): every (phase, input)
pair, then the behaviours of the push loop one by one."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from regionsync.core.invariants import InvariantViolation
from regionsync.core.model import Record
from regionsync.core.peer_session import (
    INPUTS,
    TABLE,
    AcceptHello,
    Ack,
    Acked,
    AwaitAck,
    Close,
    ComputeDigest,
    Count,
    Ended,
    Idle,
    Linger,
    LocalDigest,
    NoteDigest,
    NoteRefusal,
    Pause,
    PeerDigest,
    PeerHello,
    Phase,
    ReadRecords,
    Ready,
    Records,
    Refusal,
    Repaired,
    SendBatch,
    SendDigest,
    Session,
    SessionError,
    SessionPolicy,
    ShowError,
    StartRepair,
    StartStreaming,
    Wake,
    step,
)
from regionsync.core.peering import refusal_pause, repair_backoff

P = SessionPolicy(
    batch_records=4, max_message_bytes=256 * 1024, window_batches=2, ack_timeout_s=10.0,
    linger_ms=2.0, heartbeat_s=5.0, digest_interval_s=30.0, reconnect_min_s=0.1,
    reconnect_max_s=10.0,
)  # fmt: skip
BIG = 1 << 62  # the marker that keeps the peer's own records out of reads


def rec(origin: str, seq: int) -> Record:
    return Record(origin, seq, "registry", b"\x80", (1000 + seq, 0))


def session(phase: Phase = Phase.HANDSHAKE, **kw: object) -> Session:
    base = Session("b", "b:1", P, phase=phase, actor="b:7", acked={"a": 3}, sent={"a": 3})
    return replace(base, **kw)  # type: ignore[arg-type]


def pushing(phase: Phase = Phase.STREAMING, **kw: object) -> Session:
    """A session in the push loop at t=100, its digest and heartbeat not yet due."""
    return session(phase, **{"next_digest": 130.0, "next_beat": 105.0, **kw})


# -- every pair ----------------------------------------------------------------------

# sessions and inputs each pair is tried with: the flags the push loop steers by
VARIANTS: list[dict[str, Any]] = [
    {},
    {"inflight": 1, "sent_at": (99.0,)},
    {"inflight": 2, "sent_at": (95.0, 99.0)},  # the window is full
    {"inflight": 1, "sent_at": (80.0,)},  # its ack is overdue
    {"refused": True, "refusals": 2},
    {"peer_closed": True},
    {"asked": ({"a": 3}, b"r")},
    {"next_digest": 0.0},
    {"next_beat": 0.0},
    {"lingered": True, "sending": (("a", 4),)},
]
SAMPLES: dict[type, list[Any]] = {
    PeerHello: [PeerHello("b", 7, {"a": 3}), PeerHello("c", 7), PeerHello(None)],
    Ready: [Ready(), Ready(repair_wanted=True), Ready(behind=("a",)),
            Ready(repair_wanted=True, futile_repairs=2, last_repair_at=90.0),
            Ready(reannounce=True)],
    Repaired: [Repaired({"a": 9})],
    Records: [Records(()), Records((rec("a", 4),)), Records(tuple(map(rec, "aaaa", range(4, 8))))],
    LocalDigest: [LocalDigest({"a": 3}, b"root"), LocalDigest({"a": 3}, b"")],
    Ack: [Ack({"a": 4}), Ack({"a": 3}, (Refusal("a", 4, "clock_drift: ahead"),)),
          Ack({"a": 4}, (Refusal("a", 4, "registry: unknown key 'x'"),))],
    PeerDigest: [PeerDigest({"a": 3}, b"other")],
    Ended: [Ended()],
}  # fmt: skip


def test_table_covers_every_pair() -> None:
    assert set(TABLE) == set(itertools.product(Phase, INPUTS))
    assert set(SAMPLES) == set(INPUTS)


PAIRS = [pytest.param(p, i, id=f"{p.name}-{i.__name__}") for p, i in TABLE]


@pytest.mark.parametrize(("phase", "kind"), PAIRS)
def test_every_pair_leads_where_the_table_says(
    phase: Phase, kind: type, violations: Counter[str]
) -> None:
    rule = TABLE[(phase, kind)]
    for variant, inp in itertools.product(VARIANTS, SAMPLES[kind]):
        s = pushing(phase, **variant)
        if not rule.to:
            with pytest.raises(SessionError):
                step(s, inp, 100.0)
            continue
        if (phase, kind) == (Phase.SENDING, Ready) and s.inflight >= P.window_batches:
            with pytest.raises(InvariantViolation, match="past the window"):
                step(s, inp, 100.0)  # cannot happen: a full window reads nothing
            violations.clear()
            continue
        after, actions = step(s, inp, 100.0)
        assert after.phase in rule.to, (variant, inp)
        closes = [a for a in actions if isinstance(a, Close)]
        assert (after.phase is Phase.CLOSED) == bool(closes) or phase is Phase.CLOSED
        assert not closes or actions[-1] is closes[0]  # Close is always the last action


def test_an_ack_before_streaming_cannot_happen() -> None:
    with pytest.raises(SessionError, match="Ack cannot happen in HANDSHAKE"):
        step(session(), Ack({}), 0.0)


# -- handshake and repair ------------------------------------------------------------


def test_hello_from_the_configured_region_is_accepted() -> None:
    s, actions = step(session(acked={}, sent={}), PeerHello("b", 7, {"a": 3}, {"c": 5}), 0.0)
    assert (s.phase, s.actor, s.acked) == (Phase.ESTABLISHED, "b:7", {"a": 3})
    assert actions == [AcceptHello("b:7", {"a": 3}, {"c": 5})]


def test_hello_from_another_region_or_none_closes() -> None:
    s, actions = step(session(), PeerHello("c", 1), 0.0)
    assert s.phase is Phase.CLOSED
    assert actions == [Close("peer at b:1 is region 'c', configured as 'b'")]
    assert step(session(), PeerHello(None), 0.0)[1] == [Close("peer did not answer with hello")]


def test_a_peer_behind_the_floor_or_with_a_differing_digest_is_repaired_first() -> None:
    for ready in (Ready(behind=("a",)), Ready(repair_wanted=True)):
        s, actions = step(session(Phase.ESTABLISHED), ready, 0.0)
        assert (s.phase, actions) == (Phase.REPAIRING, [StartRepair()])
    s, actions = step(s, Repaired({"a": 9, "c": 2}), 1.0)
    assert (s.phase, s.acked) == (Phase.REPAIRED, {"a": 9, "c": 2})
    assert actions == [Acked({"a": 9, "c": 2})]
    closed, actions = step(s, Ready(behind=("a",)), 1.0)
    assert actions == [Close("anti-entropy left the peer behind for ['a']")]


def test_streaming_starts_the_reader_and_reads_past_what_the_peer_holds() -> None:
    s, actions = step(session(Phase.ESTABLISHED), Ready(), 50.0)
    assert actions == [StartStreaming(), ReadRecords({"a": 3, "b:7": BIG}, 4)]
    assert (s.phase, s.next_digest, s.next_beat, s.lingered) == (Phase.READING, 80.0, 55.0, False)


# -- the push loop -------------------------------------------------------------------


def test_a_short_batch_lingers_once_then_goes() -> None:
    s, actions = step(pushing(Phase.READING), Records((rec("a", 4),)), 100.0)
    assert (s.phase, actions) == (Phase.LINGERING, [Linger(0.002)])
    s, actions = step(s, Ready(), 100.002)
    assert actions == [ReadRecords({"a": 3, "b:7": BIG}, 4)]
    s, actions = step(s, Records((rec("a", 4), rec("a", 5))), 100.002)
    assert (s.phase, actions) == (Phase.SENDING, [SendBatch((rec("a", 4), rec("a", 5)))])
    s, actions = step(s, Ready(), 100.01)
    assert (s.phase, actions, s.inflight, s.sent_at) == (Phase.STREAMING, [], 1, (100.01,))
    assert (s.sent["a"], s.next_beat, s.lingered) == (5, 105.01, False)


def test_a_full_batch_goes_at_once() -> None:
    full = tuple(rec("a", i) for i in range(4, 8))
    s, actions = step(pushing(Phase.READING), Records(full), 100.0)
    assert (s.phase, actions) == (Phase.SENDING, [SendBatch(full)])


def test_a_full_window_waits_for_an_ack_and_an_overdue_one_closes() -> None:
    s, actions = step(pushing(inflight=2, sent_at=(95.0, 99.0)), Ready(), 100.0)
    assert (s.phase, actions) == (Phase.WINDOW_FULL, [AwaitAck(105.0)])
    s, actions = step(s, Ready(), 105.0)
    assert s.phase is Phase.CLOSED
    assert actions == [
        Count("ack_timeouts"),
        Close("no ack within ack_timeout_s=10.0s (2 batches unacked)", timed_out=True),
    ]


def test_an_ack_moves_the_peer_and_the_last_resets_what_was_sent() -> None:
    s = pushing(Phase.IDLE, inflight=2, sent_at=(95.0, 99.0), sent={"a": 9})
    s, actions = step(s, Ack({"a": 6, "c": 1}), 100.0)
    assert actions == [Acked({"a": 6, "c": 1}), Wake()]
    assert (s.inflight, s.sent_at, s.sent) == (1, (99.0,), {"a": 9, "c": 1})
    s, _ = step(s, Ack({"a": 7}), 100.0)
    assert (s.inflight, s.sent) == (0, {"a": 7, "c": 1})  # resend what it still lacks
    s, _ = step(s, Ack({"a": 7}), 100.0)  # a duplicated ack is not a batch
    assert (s.inflight, s.sent_at) == (0, ())


def test_a_refused_record_pauses_the_link_doubling_per_refusal() -> None:
    drift = Refusal("a", 4, "clock_drift: 70000 ms ahead")
    s = pushing(Phase.IDLE, inflight=1, sent_at=(99.0,))
    for n in (1, 2, 3):
        s = replace(s, inflight=1, sent_at=(99.0,))
        s, actions = step(s, Ack({"a": 3}, (drift,)), 100.0)
        assert actions[0] == ShowError("rejected a#4: clock_drift: 70000 ms ahead")
        s, actions = step(replace(s, phase=Phase.IDLE), Ready(), 100.0)
        assert (s.phase, actions) == (Phase.PAUSED, [Pause(refusal_pause(n, 0.1, 10.0))])
        s, actions = step(s, Ready(), 101.0)
        assert (s.phase, s.refused) == (Phase.READING, False)
    s, actions = step(replace(s, phase=Phase.IDLE), Ack({"a": 4}), 102.0)
    assert (actions[0], s.shown, s.refusals) == (ShowError(None), None, 0)  # taken since


def test_a_record_the_peer_moved_past_is_noted_and_the_digests_compared_at_once() -> None:
    # issue 41: the peer skipped a#4 (its Ack covers it) and takes a#5.. from us: the
    # session goes on pushing (no pause, no close); a digest comparison is due now
    bad = Refusal("a", 4, "registry: unknown key 'x'")
    s = pushing(Phase.IDLE, inflight=1, sent_at=(99.0,), sent={"a": 5})
    s, actions = step(s, Ack({"a": 5}, (bad,)), 100.0)
    assert actions == [NoteRefusal(bad), Acked({"a": 5}), Wake()]
    assert (s.refused, s.shown, s.next_digest) == (False, None, 100.0)
    s, actions = step(replace(s, phase=Phase.STREAMING), Ready(), 100.0)
    assert (s.phase, actions) == (Phase.READING, [ReadRecords({"a": 5, "b:7": BIG}, 4)])
    s, actions = step(s, Records(()), 100.0)
    assert (s.phase, actions) == (Phase.DIGESTING, [ComputeDigest()])


def test_a_futile_repair_backs_off_exponentially_and_boundedly() -> None:
    # issue 40/41: a pass after which the digests still differ is not repeated at once
    assert [repair_backoff(n, 30.0) for n in range(8)] == [
        0.0, 30.0, 60.0, 120.0, 240.0, 480.0, 960.0, 960.0,
    ]  # fmt: skip
    for futile, wait in ((0, 0.0), (1, 30.0), (3, 120.0)):
        ready = Ready(repair_wanted=True, futile_repairs=futile, last_repair_at=1000.0)
        if wait:  # pushes meanwhile
            s, actions = step(session(Phase.ESTABLISHED), ready, 1000.0 + wait - 0.1)
            assert actions[0] == StartStreaming() and s.phase is Phase.READING
            assert step(pushing(), ready, 1000.0 + wait - 0.1)[0].phase is Phase.READING
            assert step(pushing(), ready, 1000.0 + wait)[1] == [Close()]  # now due
        s, actions = step(session(Phase.ESTABLISHED), ready, 1000.0 + wait)
        assert (s.phase, actions) == (Phase.REPAIRING, [StartRepair()])
    # the floor is never deferred: records the peer lacks are gone from the log
    ready = Ready(behind=("a",), futile_repairs=5, last_repair_at=1000.0)
    assert step(session(Phase.ESTABLISHED), ready, 1000.0)[1] == [StartRepair()]


def test_a_differing_digest_or_the_floor_ends_an_idle_session() -> None:
    s, actions = step(pushing(), Ready(repair_wanted=True), 100.0)
    assert (s.phase, actions) == (Phase.CLOSED, [Close()])
    s, actions = step(pushing(), Ready(behind=("a",)), 100.0)
    assert actions == [Close("peer fell behind the log floor")]
    s, actions = step(pushing(inflight=1, sent_at=(99.0,)), Ready(repair_wanted=True), 100.0)
    assert s.phase is Phase.READING  # not while a batch is unacked


def test_a_change_of_what_the_region_reads_ends_the_session_at_its_top() -> None:
    """A peer keeps a Hello's features for the whole session: when the region's reads
    change (an older process joined or left it), the session ends and the next Hello says
    so, with batches in flight too (unacked, they are read again in the next session,
    from what the peer's Hello says it holds)."""
    note = ShowError("this region's features changed: a new Hello announces them")
    for s in (pushing(Phase.IDLE), pushing(Phase.LINGERING, inflight=1, sent_at=(99.0,)),
              pushing(Phase.WINDOW_FULL, inflight=2, sent_at=(95.0, 99.0))):  # fmt: skip
        after, actions = step(s, Ready(reannounce=True), 100.0)
        assert (after.phase, actions) == (Phase.CLOSED, [note, Close()]), s.phase
    # right after the Hello too (it may have said the old set), before a repair (which
    # may run for minutes), and after a pause (which may last reconnect_max_s)
    for s, ready in ((session(Phase.ESTABLISHED), Ready(behind=("a",), reannounce=True)),
                     (pushing(Phase.PAUSED, refused=True), Ready(reannounce=True))):  # fmt: skip
        after, actions = step(s, ready, 100.0)
        assert (after.phase, actions) == (Phase.CLOSED, [note, Close()]), s.phase
    # a batch on its way is sent first: the top of the loop ends the session then
    s, _ = step(pushing(Phase.SENDING, sending=(("a", 4),)), Ready(reannounce=True), 100.0)
    assert s.phase is Phase.STREAMING
    assert step(s, Ready(reannounce=True), 100.0)[1] == [note, Close()]


def test_an_idle_link_sends_a_digest_then_a_heartbeat_then_waits() -> None:
    s = pushing(Phase.READING, next_digest=100.0, next_beat=100.0)
    s, actions = step(s, Records(()), 100.0)
    assert (s.phase, actions, s.next_digest) == (Phase.DIGESTING, [ComputeDigest()], 130.0)
    s, actions = step(s, LocalDigest({"a": 3}, b"root"), 100.0)
    assert (s.asked, actions) == (({"a": 3}, b"root"), [SendDigest({"a": 3}, b"root")])
    s, actions = step(s, Ready(), 100.0)
    assert (s.phase, actions) == (Phase.STREAMING, [])
    s, _ = step(s, Ready(), 100.0)
    s, actions = step(s, Records(()), 100.0)
    assert (s.phase, actions) == (Phase.SENDING, [SendBatch(())])  # the heartbeat
    s, _ = step(s, Ready(), 100.0)
    s, _ = step(s, Ack({"a": 3}), 101.0)
    s, _ = step(s, Ready(), 101.0)
    s, actions = step(s, Records(()), 101.0)
    assert (s.phase, actions) == (Phase.IDLE, [Idle(min(130.0, 105.0))])


def test_a_busy_digest_is_skipped_and_an_unasked_answer_ignored() -> None:
    s, actions = step(pushing(Phase.DIGESTING), LocalDigest({"a": 3}, b""), 100.0)
    assert (s.phase, s.asked, actions) == (Phase.STREAMING, None, [])
    assert step(pushing(Phase.IDLE), PeerDigest({"a": 3}, b"x"), 100.0)[1] == []
    s = pushing(Phase.IDLE, asked=({"a": 3}, b"r"))
    assert step(s, PeerDigest({"a": 3}, b"x"), 100.0)[1] == [
        NoteDigest({"a": 3}, b"r", {"a": 3}, b"x"),
        Wake(),
    ]


def test_the_peer_closing_ends_the_loop_at_its_top_only() -> None:
    s, actions = step(pushing(Phase.PAUSED), Ended(), 100.0)
    assert (s.peer_closed, actions) == (True, [Wake()])
    assert step(s, Ready(), 100.0)[0].phase is Phase.READING  # after a pause: reads once more
    s, actions = step(replace(s, phase=Phase.IDLE), Ready(), 100.0)
    assert (s.phase, actions) == (Phase.CLOSED, [Close()])
    assert step(s, Ack({"a": 9}), 100.0) == (s, [])  # the reader's last words
