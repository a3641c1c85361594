"""Integers parsed from request text (headers, query parameters, cursors).

Decides whether a piece of request text is a decimal integer this node accepts: ASCII
digits only (``str.isdigit`` and ``int`` also take '²' or Arabic-Indic digits) and within
a range, by default the signed 64-bit range SQLite binds (``[0, 2**63 - 1]``).
"""

from __future__ import annotations

import re

from ..errors import BadRequest, ClientError

__all__ = ["INT64_MAX", "parse_uint"]

INT64_MAX = 2**63 - 1
_DIGITS = re.compile(r"[0-9]{1,19}")  # [0-9] is ASCII only, unlike \d


def parse_uint(
    text: str,
    field: str,
    *,
    hi: int = INT64_MAX,
    lo: int = 0,
    error: type[ClientError] = BadRequest,
    what: str = "an integer",
) -> int:
    """``text`` (1..19 ASCII digits, no sign, no spaces) as an int in ``[lo, hi]``.

    Raises ``error`` (BadRequest by default) naming ``field`` otherwise.
    """
    if not _DIGITS.fullmatch(text):
        if text.isascii() and text.isdigit():  # digits, but more than an int64 holds
            raise error(f"must be {what} in [{lo}, {hi}]", field=field)
        raise error(f"must be {what} of ASCII digits 0-9", field=field)
    value = int(text)
    if not lo <= value <= hi:
        raise error(f"must be {what} in [{lo}, {hi}]", field=field)
    return value
