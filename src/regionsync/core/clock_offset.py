"""Decides how far this node's wall clock is from its cluster's, from its peers' clocks.

Pure: callers pass every time. A peer's Hello and Ack carry its wall clock when sent
(``sent_wall_ms``); each gives a sample of the peer's offset (its clock minus ours). A
Hello answered within one exchange gives ``remote - (sent + received) / 2`` with half the
round trip as uncertainty (NTP's rule, RFC 5905 section 8); a message without a round
trip gives ``remote - received`` (the one-way delay unknown). A round trip longer than
the caller's bound gives no sample (a loop busy on either side: issue 42). Per peer, the
best recent sample is kept: the one with the smallest uncertainty, replaced by any newer
sample once half of ``window_ms`` old, so a peer heard at least every ``window_ms / 2``
(its Acks come with every heartbeat) always has a current sample (a kept sample only
replaced once past the window would leave that peer unsampled until its next message:
issue 41).

The reference: the lower median of {0 (this node)} and the offsets of peers sampled within
``window_ms``, taken only when a majority of the configured regions (``regions``, this one
counted) have fresh clocks within ``suspect_ms`` of it. Without such a majority (too few
fresh samples, or clocks split) this node keeps its own clock (error 0, no reference): a
node never declares its own clock wrong on a minority's word, so with two regions neither
ever corrects the other. Every node ranks the same set of clocks (shifted by its own), so all nodes
pick the same region's clock as reference; with an even count the lower middle keeps it
that way (the median "nearest 0" would let two regions each follow itself), and a
reference that later moves forward is harmless to last-writer-wins (later writes get
larger stamps), one that moves back is not. ``error_ms`` = this clock minus the
reference; beyond ``suspect_ms`` this node's clock is ``suspect`` and its stamps use the
reference (``correction_ms`` = -error_ms), else its own clock (correction 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ClockView", "Sample", "assess", "keep_best", "round_trip_sample", "one_way_sample"]


@dataclass(frozen=True, slots=True)
class Sample:
    """One estimate of a peer's offset: ``offset_ms`` (its clock minus ours, ms),
    ``uncertainty_ms`` (half a round trip; None: one-way, delay unknown), ``at_ms``
    (our wall clock when it was taken)."""

    offset_ms: int
    uncertainty_ms: int | None
    at_ms: int


@dataclass(frozen=True, slots=True)
class ClockView:
    """The decision: ``error_ms`` (this clock minus the cluster's reference),
    ``status`` (``ok`` or ``suspect``), ``correction_ms`` (add to the local wall clock to
    stamp; 0 when ok), ``offsets`` (peer -> offset of its clock to ours, current
    samples only), ``reference`` (the region whose clock is the reference, or None)."""

    error_ms: int
    status: str
    correction_ms: int
    offsets: Mapping[str, int]
    reference: str | None


def round_trip_sample(
    remote_ms: int, sent_ms: int, received_ms: int, max_round_trip_ms: int | None = None
) -> Sample | None:
    """The sample of a reply sent by the peer at ``remote_ms`` (its clock) to a message we
    sent at ``sent_ms`` and received at ``received_ms`` (ours). None when the peer sent no
    clock (0: an older release), our clock went backwards meanwhile, or the round trip
    took longer than ``max_round_trip_ms`` (a loop busy on either side: an uncertainty
    that large could alone pass the suspect threshold, issue 42)."""
    if remote_ms <= 0 or received_ms < sent_ms:
        return None
    if max_round_trip_ms is not None and received_ms - sent_ms > max_round_trip_ms:
        return None
    half = (received_ms - sent_ms) // 2
    return Sample(remote_ms - (sent_ms + half), half, received_ms)


def one_way_sample(remote_ms: int, received_ms: int) -> Sample | None:
    """The sample of a message the peer sent at ``remote_ms`` and we received at
    ``received_ms``; None without a clock (0)."""
    if remote_ms <= 0:
        return None
    return Sample(remote_ms - received_ms, None, received_ms)


def _rank(s: Sample) -> float:
    return float("inf") if s.uncertainty_ms is None else s.uncertainty_ms


def keep_best(old: Sample | None, new: Sample | None, window_ms: int) -> Sample | None:
    """Of a peer's kept sample and a new one, the one to keep: the new one if the old is
    missing, older than half of ``window_ms`` (at the new one's time) or no more certain."""
    if new is None:
        return old
    if old is None or new.at_ms - old.at_ms > window_ms // 2 or _rank(new) <= _rank(old):
        return new
    return old


def assess(
    samples: Mapping[str, Sample],
    now_ms: int,
    window_ms: int,
    suspect_ms: int,
    me: str = "",
    was: str = "ok",
    regions: int = 0,
) -> ClockView:
    """The clock decision at ``now_ms`` from the peers' kept ``samples`` (those older
    than ``window_ms`` are ignored: that peer is not heard); see the module docstring.
    ``was``: the previous status; a suspect clock is ok again only within half of
    ``suspect_ms`` (no flapping at the threshold). ``regions``: the configured regions,
    this one counted (0: those sampled). With no peer heard the error is 0."""
    offsets = {p: s.offset_ms for p, s in sorted(samples.items()) if now_ms - s.at_ms <= window_ms}
    clocks = sorted([(0, me), *((o, p) for p, o in offsets.items())])
    reference, who = clocks[(len(clocks) - 1) // 2]  # the lower middle
    agreeing = sum(1 for o, _ in clocks if abs(o - reference) <= suspect_ms)
    if agreeing < max(regions, len(clocks)) // 2 + 1:
        return ClockView(0, "ok", 0, offsets, None)  # no majority: keep this clock
    error = -reference
    limit = suspect_ms // 2 if was == "suspect" else suspect_ms
    if abs(error) > limit:
        return ClockView(error, "suspect", reference, offsets, who or None)
    return ClockView(error, "ok", 0, offsets, who or None)
