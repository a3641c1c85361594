"""Structured logs (``log_format = "json"``): one JSON object per line.

Fields: ``ts`` (RFC 3339 UTC, ms), ``level``, ``logger``, ``region``, ``message`` (the
formatted text), ``exc`` (a traceback, if any), and the ids a call site passes with
``extra=`` (``event_id``, ``delivery_id``, ``endpoint_id``, ``tenant``, ``peer``).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

__all__ = ["ID_FIELDS", "JsonFormatter", "configure"]

ID_FIELDS = ("event_id", "delivery_id", "endpoint_id", "tenant", "peer")


class JsonFormatter(logging.Formatter):
    """Formats a LogRecord as one line of JSON (never raises for odd arguments)."""

    def __init__(self, region: str):
        super().__init__()
        self.region = region

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        out: dict[str, object] = {
            "ts": ts.replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "region": self.region,
            "message": record.getMessage(),
        }
        for name in ID_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = str(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure(log_format: str, level: str, region: str, tag: str = "") -> None:
    """The root logger of a node's process (and of its sender process): ``log_format``
    ``json`` (``JsonFormatter``, one object per line) or ``text`` (``<time> <LEVEL>
    <logger> [<region><tag>] <message>``), at ``level`` (a ``logging`` level name, any
    case) on stderr. Raises ValueError for an unknown level."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter(region))
    else:
        fmt = "%(asctime)s %(levelname)s %(name)s [" + region + tag + "] %(message)s"
        handler.setFormatter(logging.Formatter(fmt))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
