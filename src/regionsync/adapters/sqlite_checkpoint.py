"""WAL checkpoints of the SQLite store on a connection and thread of their own.

SQLite's own checkpoint (wal_autocheckpoint, 1,000 pages) runs in the committing thread:
every publish queued behind it waits for its writes and fsync (p99 at half rate 16-18 ms
with it, 5-9 ms with this, bench/ingest.py; issue 17). A PASSIVE pass here starts once
``CHECKPOINT_BYTES`` have been committed since the last one started.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["CHECKPOINT_BYTES", "WalCheckpointer"]

log = logging.getLogger(__name__)

# bytes committed (blobs and JSON handed to SQLite) after which a pass starts. Passes must
# be small: one every 100 commits of a paced run gave a p99 of 18-21 ms.
CHECKPOINT_BYTES = 256 * 1024


class WalCheckpointer:
    """PASSIVE checkpoints of the database at ``path`` (SQLite docs, "PRAGMA
    wal_checkpoint"): each copies what it can of the WAL into the database without waiting
    for readers or the writer; the WAL starts over at the next commit once every frame is
    copied."""

    def __init__(self, path: Path):
        self.path = path
        self._thread: ThreadPoolExecutor | None = None
        self._db: sqlite3.Connection | None = None
        self.in_flight: asyncio.Future[None] | None = None  # the pass in flight
        self._unchecked = 0  # bytes committed since the last pass started
        self.checkpoints = 0  # passes completed

    async def open(self) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-checkpoint")
        self._db = await asyncio.get_running_loop().run_in_executor(self._thread, self._connect)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA synchronous=FULL")  # the pass fsyncs the database file
        return db

    def _pass(self) -> None:
        if self._db is not None:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def after_commit(self, written: int) -> None:
        """Count ``written`` bytes; start a pass if CHECKPOINT_BYTES have been committed
        since the last one started and none is in flight."""
        self._unchecked += written
        if self._unchecked < CHECKPOINT_BYTES or self.in_flight or not self._thread:
            return
        self._unchecked = 0
        self.in_flight = fut = asyncio.get_running_loop().run_in_executor(self._thread, self._pass)
        fut.add_done_callback(self._done)

    def _done(self, fut: asyncio.Future[None]) -> None:
        self.in_flight = None
        if fut.cancelled():
            return
        if (err := fut.exception()) is not None:  # the writer's backstop checkpoints
            log.warning("WAL checkpoint failed: %s", err)
        else:
            self.checkpoints += 1

    async def close(self) -> None:
        """Waits for the pass in flight; call before the writer closes (it checkpoints last)."""
        if self._thread is None:
            return
        if self.in_flight is not None:
            await asyncio.wait([self.in_flight])
        if self._db is not None:
            await asyncio.get_running_loop().run_in_executor(self._thread, self._db.close)
        self._thread.shutdown(wait=True)
        self._db = self._thread = None
