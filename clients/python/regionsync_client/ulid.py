"""Event ids as the node writes them: ``evt_`` + a ULID (48-bit milliseconds, then 80
random bits, as 26 Crockford base32 digits; spec: github.com/ulid/spec)."""

from __future__ import annotations

import re
import secrets
import time

__all__ = ["EVENT_ID_RE", "new_event_id"]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# what the node takes as a publish body's id (a ULID); not every event id matches it (an
# inbound source's event ids are hashes in the same alphabet, any first digit)
EVENT_ID_RE = re.compile(r"evt_[0-7][0-9A-HJKMNP-TV-Z]{25}")


def new_event_id(now_ms: int | None = None, rand: int | None = None) -> str:
    """A new event id; ``now_ms`` and ``rand`` (80 bits) default to the clock and the
    operating system's random source."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    bits = secrets.randbits(80) if rand is None else rand
    n = ((ms & ((1 << 48) - 1)) << 80) | (bits & ((1 << 80) - 1))
    return "evt_" + "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))
