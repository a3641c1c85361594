"""Rates from samples of a counter that only grows: a tenant's cluster-wide publish rate
from its replicated ``events_published`` PN-Counter (issue 14). Pure: the caller passes
the time and the value it read.

The counter is the sum over every region's increments as replicated here, so its rate is
the cluster's rate as this region has heard of it: other regions' events count once their
records arrived (usually within a second), and an unreachable region's stop counting until
its records do, when they count at once.
"""

from __future__ import annotations

from collections import deque

__all__ = ["CounterRate"]


class CounterRate:
    """Samples ``(t_s, value)`` of one counter over the last ``window_s`` seconds.

    ``rate()`` is the increase per second from the oldest sample in the window to the
    newest (events/s), or None until two samples ``min_span_s`` apart exist. A value
    lower than an earlier one (a counter decremented, or a re-created tenant) restarts
    the window. Memory: at most ``max_samples`` samples (older ones are dropped first).
    """

    def __init__(self, window_s: float = 60.0, min_span_s: float = 1.0, max_samples: int = 64):
        if window_s <= 0 or min_span_s < 0 or max_samples < 2:
            raise ValueError("window_s > 0, min_span_s >= 0 and max_samples >= 2 required")
        self.window_s, self.min_span_s = window_s, min_span_s
        self._samples: deque[tuple[float, int]] = deque(maxlen=max_samples)

    def observe(self, t_s: float, value: int) -> None:
        """Add the value read at monotonic time ``t_s`` (seconds, not decreasing)."""
        s = self._samples
        if s and (value < s[-1][1] or t_s < s[-1][0]):
            s.clear()
        if s and t_s == s[-1][0]:
            s.pop()
        s.append((t_s, value))
        # keep one sample at or before the window's start, so the window is covered whole
        while len(s) > 2 and s[1][0] <= t_s - self.window_s:
            s.popleft()

    def rate(self) -> float | None:
        """Increase per second over the window (events/s), or None if too few samples."""
        if len(self._samples) < 2:
            return None
        (t0, v0), (t1, v1) = self._samples[0], self._samples[-1]
        span = t1 - t0
        if span < self.min_span_s:
            return None
        return (v1 - v0) / span
