"""Invariant checks where a wrong value would be written or sent (issue 39).

``check(ok, message, *args)`` states what must hold at that point of the code; when it
does not (``ok`` false) the code has a bug, not its input. What then happens is the mode:

- ``"raise"``: raise ``InvariantViolation`` (an AssertionError) right there, before the
  value is used, and note the message in ``broken``. On in the tests (tests/conftest.py,
  which also fails a test that left a note: a violation a broad ``except Exception``
  swallowed still counts) and in the simulator (sim/_run.py reports each note).
- ``"log"`` (the default: production): note it, log it at ERROR (the 1st, 2nd, 4th, 8th...
  time per message) and go on; ``check`` returns ``ok`` so a caller can fall back to a
  safe value. A raise there would end the loop the check sits in (a replication link, the
  delivery worker) and retry into it forever, while the state usually survives a wrong
  count; the error log makes it visible.

Never ``off``: a check is a comparison or two (never a scan per event), cheaper than the
log line it could save. Never ``assert``: python -O would strip it. The environment
variable ``REGIONSYNC_INVARIANTS=raise`` turns raising on in a deployment (staging).

The CRDT kernel (crdt/) imports nothing from the node: its few checks always raise the
same ``InvariantViolation`` (crdt._invariants).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from typing import Literal

from crdt import InvariantViolation

__all__ = ["InvariantViolation", "Mode", "broken", "check", "mode", "set_mode"]

Mode = Literal["raise", "log"]
log = logging.getLogger("regionsync.invariants")

broken: Counter[str] = Counter()  # message (unformatted) -> violations seen
_mode: Mode = "raise" if os.environ.get("REGIONSYNC_INVARIANTS") == "raise" else "log"


def mode() -> Mode:
    return _mode


def set_mode(new: Mode) -> Mode:
    """Switch to ``new``; returns the mode it replaces (to restore it)."""
    global _mode
    if new not in ("raise", "log"):
        raise ValueError(f"invariant mode must be 'raise' or 'log', not {new!r}")
    old, _mode = _mode, new
    return old


def check(ok: bool, message: str, *args: object) -> bool:
    """``ok``, after reporting it when false (``message % args``, formatted only then)."""
    if ok:
        return True
    broken[message] += 1
    text = message % args if args else message
    if _mode == "raise":
        raise InvariantViolation(text)
    n = broken[message]
    if n & (n - 1) == 0:  # a power of two: a recurring bug does not flood the log
        log.error("invariant broken (%d times): %s", n, text)
    return False
