"""Decides hybrid logical clock timestamps for local, send and receive events.
Never reads the system clock: the caller passes physical time in ms; never jumps far ahead
(a remote stamp past `max_drift_ms` is refused, or with `clamp` taken without moving the
clock past physical time + `max_drift_ms`).
Rules: Kulkarni, Demirbas et al. 2014, "Logical Physical Clocks" (HLC, Algorithm 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crdt._codec import LOGICAL_MAX, WALL_MS_MAX, check_count
from crdt._invariants import InvariantViolation

__all__ = ["HLC", "ClockDriftError", "Timestamp"]


@dataclass(frozen=True, order=True, slots=True)
class Timestamp:
    """An HLC timestamp, ordered by `wall_ms` (ms since the epoch) then `logical`.

    `wall_ms` is an int in [0, WALL_MS_MAX] (2**63-1, SQLite INTEGER) and `logical` an int
    in [0, LOGICAL_MAX] (2**32-1, the proto's uint32 `hlc_logical`); raises ValueError
    otherwise, so every stamp fits the wire and the store.
    """

    wall_ms: int
    logical: int

    def __post_init__(self) -> None:
        check_count(self.wall_ms, maximum=WALL_MS_MAX, what="wall_ms")
        check_count(self.logical, maximum=LOGICAL_MAX, what="logical")

    def to_list(self) -> list[int]:
        """Return `[wall_ms, logical]` (the wire form)."""
        return [self.wall_ms, self.logical]

    @classmethod
    def from_list(cls, data: Sequence[int]) -> Timestamp:
        """Build from `[wall_ms, logical]`. Raises ValueError on a wrong shape or range."""
        if not isinstance(data, list | tuple) or len(data) != 2:
            raise ValueError(f"timestamp must be [wall_ms, logical], got {data!r}")
        return cls(data[0], data[1])


_ZERO = Timestamp(0, 0)


class ClockDriftError(ValueError):
    """A remote timestamp cannot be observed: it is more than `max_drift_ms` ahead of local
    physical time, or (`remote_logical` set) observing it would push the clock's logical
    counter past LOGICAL_MAX (2**32-1), which the wire cannot carry.

    Attributes: `remote_ms` (remote wall ms), `physical_ms` (local physical ms),
    `max_drift_ms` (the configured bound), `remote_logical` (the remote logical counter
    when it is the cause, else None). The remote is at fault, not the caller.
    """

    def __init__(
        self,
        remote_ms: int,
        physical_ms: int,
        max_drift_ms: int,
        *,
        remote_logical: int | None = None,
    ) -> None:
        if remote_logical is None:
            msg = (
                f"clock_drift: remote {remote_ms} ms is {remote_ms - physical_ms} ms ahead of "
                f"physical {physical_ms} ms (max {max_drift_ms} ms)"
            )
        else:
            msg = (
                f"clock_drift: remote stamp ({remote_ms}, {remote_logical}) would push the "
                f"logical counter past {LOGICAL_MAX} (physical {physical_ms} ms)"
            )
        super().__init__(msg)
        self.remote_ms = remote_ms
        self.physical_ms = physical_ms
        self.max_drift_ms = max_drift_ms
        self.remote_logical = remote_logical


_new = object.__new__
_set = object.__setattr__


def _carry(wall_ms: int, logical: int) -> Timestamp:
    """`Timestamp(wall_ms, logical)`, or `(wall_ms + 1, 0)` if logical passed LOGICAL_MAX.
    `wall_ms` is in range and `logical` at most LOGICAL_MAX + 1 (the callers' stamps were
    checked), so only the carried wall is checked again."""
    if logical > LOGICAL_MAX:
        return Timestamp(wall_ms + 1, 0)
    stamp = _new(Timestamp)
    _set(stamp, "wall_ms", wall_ms)
    _set(stamp, "logical", logical)
    return stamp


def _not_after(stamp: Timestamp, wall_ms: int, logical: int, what: str) -> InvariantViolation:
    return InvariantViolation(f"HLC stamp {stamp!r} is not after {what} ({wall_ms}, {logical})")


class HLC:
    """A hybrid logical clock (stateful, not a CRDT; one per node).

    `max_drift_ms` (int >= 0) bounds how far ahead of local physical time a remote stamp
    may be (`observe` refuses one beyond it; `observe_parts(..., clamp=True)` takes it
    without moving the clock past the bound); `last` is the most recent timestamp issued.
    Raises ValueError on bad arguments.
    """

    __slots__ = ("_max_drift_ms", "_last")

    def __init__(self, max_drift_ms: int = 60_000, last: Timestamp = _ZERO) -> None:
        if not isinstance(last, Timestamp):
            raise TypeError(f"last must be a Timestamp, got {type(last).__name__}")
        self._max_drift_ms = check_count(max_drift_ms, what="max_drift_ms")
        self._last = last

    @property
    def last(self) -> Timestamp:
        """The most recent timestamp this clock issued (or was built with)."""
        return self._last

    @property
    def max_drift_ms(self) -> int:
        """The bound on how far ahead of physical time a remote stamp may be, in ms."""
        return self._max_drift_ms

    def now(self, physical_ms: int) -> Timestamp:
        """Stamp a local or send event at physical time `physical_ms` (ms since the epoch).

        l' = max(l, pt); c' = c + 1 if l' == l else 0. Strictly greater than `last` even
        when physical time goes backwards. When c + 1 would exceed LOGICAL_MAX the stamp is
        (l + 1, 0) instead (still greater, 1 ms ahead: the wire's logical field is 32 bits).
        Raises ValueError for a negative, non-int or above-WALL_MS_MAX time, or when the
        wall would pass WALL_MS_MAX.
        """
        pt = check_count(physical_ms, maximum=WALL_MS_MAX, what="physical_ms")
        wall, logical = self._last.wall_ms, self._last.logical
        new_wall = max(wall, pt)
        stamp = _carry(new_wall, logical + 1 if new_wall == wall else 0)
        if stamp.wall_ms < wall or (stamp.wall_ms == wall and stamp.logical <= logical):
            raise _not_after(stamp, wall, logical, "the last stamp")  # an LWW write would lose
        self._last = stamp
        return stamp

    def observe(self, remote: Timestamp, physical_ms: int) -> Timestamp:
        """Stamp a receive event of `remote` at physical time `physical_ms`.

        l' = max(l, l_m, pt); c' = max(c, c_m) + 1 if l' == l == l_m, c + 1 if l' == l,
        c_m + 1 if l' == l_m, else 0. The result is greater than both `last` and `remote`.
        Raises ClockDriftError, leaving the clock unchanged, if
        `remote.wall_ms - physical_ms > max_drift_ms`, or if l' == l_m and c_m ==
        LOGICAL_MAX (c' would not fit the wire; refused until physical time passes l_m).
        When only the local c + 1 overflows, carries like `now`. ValueError for a bad
        `physical_ms`.
        """
        if not isinstance(remote, Timestamp):
            raise TypeError(f"remote must be a Timestamp, got {type(remote).__name__}")
        return self.observe_parts(remote.wall_ms, remote.logical, physical_ms)

    def observe_parts(
        self, wall_ms: int, logical: int, physical_ms: int, *, clamp: bool = False
    ) -> Timestamp:
        """`observe(Timestamp(wall_ms, logical), physical_ms)` without building the remote
        stamp (a replica observes one per applied record): the same result, state and
        errors, including ValueError for parts `Timestamp` refuses.

        `clamp=True` never raises ClockDriftError: a remote stamp more than `max_drift_ms`
        ahead moves the clock only as a local event at `physical_ms + max_drift_ms` would
        (`now`), so the result is then NOT after the remote stamp (the caller orders
        causally by other means, e.g. version vectors); a remote logical at LOGICAL_MAX
        gives `(wall_ms + 1, 0)`. Through a remote stamp the clock never passes physical
        + max_drift_ms + 1 ms."""
        if not (type(wall_ms) is int and 0 <= wall_ms <= WALL_MS_MAX):
            check_count(wall_ms, maximum=WALL_MS_MAX, what="wall_ms")
        if not (type(logical) is int and 0 <= logical <= LOGICAL_MAX):
            check_count(logical, maximum=LOGICAL_MAX, what="logical")
        pt = physical_ms
        if not (type(pt) is int and 0 <= pt <= WALL_MS_MAX):
            check_count(pt, maximum=WALL_MS_MAX, what="physical_ms")
        if wall_ms - pt > self._max_drift_ms:
            if clamp:
                return self.now(min(pt + self._max_drift_ms, WALL_MS_MAX))
            raise ClockDriftError(wall_ms, pt, self._max_drift_ms)
        last = self._last
        wall, mine = last.wall_ms, last.logical
        new_wall = max(wall, wall_ms, pt)
        if new_wall == wall_ms and logical >= LOGICAL_MAX:
            if not clamp:
                raise ClockDriftError(wall_ms, pt, self._max_drift_ms, remote_logical=logical)
            stamp = Timestamp(wall_ms + 1, 0)  # ValueError past WALL_MS_MAX
            self._last = stamp
            return stamp
        if new_wall == wall and new_wall == wall_ms:
            new_logical = max(mine, logical) + 1
        elif new_wall == wall:
            new_logical = mine + 1
        elif new_wall == wall_ms:
            new_logical = logical + 1
        else:
            new_logical = 0
        stamp = _carry(new_wall, new_logical)
        # after both: the last stamp (local writes) and the remote one (causality)
        if stamp.wall_ms < wall or (stamp.wall_ms == wall and stamp.logical <= mine):
            raise _not_after(stamp, wall, mine, "the last stamp")
        if stamp.wall_ms < wall_ms or (stamp.wall_ms == wall_ms and stamp.logical <= logical):
            raise _not_after(stamp, wall_ms, logical, "the remote stamp")
        self._last = stamp
        return stamp

    def __repr__(self) -> str:
        return f"HLC(max_drift_ms={self._max_drift_ms}, last={self._last!r})"
