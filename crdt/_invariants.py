"""Decides what the kernel does when its own arithmetic breaks a law: it raises.
Never logs, never reads a switch: the checks are O(1) and always on (not `assert`, which
python -O strips), because a broken state would be merged, stored and replicated.
Rules: a violation is the kernel's bug, never the caller's input (that is ValueError).
"""

from __future__ import annotations

__all__ = ["InvariantViolation"]


class InvariantViolation(AssertionError):
    """An invariant of the code (not of its input) does not hold: a bug. The node raises
    the same type (regionsync.core.invariants) so one except clause sees both."""
