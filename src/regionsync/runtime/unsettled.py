"""Delivery states submitted for commit that a store read may not show yet (issue 17):
what lets a store read of deliveries be made outside the write lock. Owned by the write
path (runtime/writepath.py); used by the outcome recorder, the replica and anti-entropy.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from ..core.model import Delivery, delivery_join

if TYPE_CHECKING:
    from .store_port import Store

__all__ = ["DeliveryRead", "UnsettledDeliveries"]


class UnsettledDeliveries:
    """Delivery states submitted for commit that a store read may not show, so that a
    store read of deliveries can be made *outside* the write lock and brought up to date
    under it (issue 17: the outcome recorder and the replica held the lock across their
    reads, stalling every publish meanwhile; and a read under the lock missed states
    submitted but not yet committed).

    Submissions are counted in submit order (``GroupCommitter`` commits them in that
    order, so ``durable(n)`` says the first ``n`` are in the store). A reader calls
    ``pin()`` before its store read and ``unpin`` after using it. A state is kept until
    it is durable *and* older than every pinned read (each read then saw it or a later
    one), so under the lock ``current(rows, ids)`` = the store rows joined with the kept
    states is at least as new as any submission. Memory: the states of submissions not
    yet durable or younger than the oldest pinned read (a few commits' worth).
    """

    def __init__(self) -> None:
        self._submits = 0  # submissions so far (their sequence numbers are 1..)
        self._durable = 0  # how many of them are durable
        self._states: dict[str, tuple[int, Delivery]] = {}  # id -> (submission, state)
        self._order: deque[tuple[int, list[str]]] = deque()  # (submission, ids), in order
        self._pins: dict[int, int] = {}  # durable count when a read began -> readers

    def __len__(self) -> int:
        return len(self._states)

    def submitted(self, deliveries: Sequence[Delivery]) -> None:
        """One submission, carrying ``deliveries`` (full states; may be empty)."""
        self._submits += 1
        if deliveries:
            n = self._submits
            for d in deliveries:
                self._states[d.id] = (n, d)
            self._order.append((n, [d.id for d in deliveries]))

    def durable(self, submissions: int) -> None:
        """The first ``submissions`` submissions are committed."""
        self._durable = submissions
        self._sweep()

    def failed(self) -> None:
        """A commit failed: it and every submission queued behind it are dropped (the
        store holds what is durable); counting resumes at the durable count."""
        self._submits = self._durable
        self._states.clear()
        self._order.clear()

    def pin(self) -> int:
        """Before a store read of deliveries: returns the mark to ``unpin`` with."""
        mark = self._durable
        self._pins[mark] = self._pins.get(mark, 0) + 1
        return mark

    def unpin(self, mark: int) -> None:
        """The read pinned at ``mark`` is used (or abandoned)."""
        left = self._pins[mark] - 1
        if left:
            self._pins[mark] = left
        else:
            del self._pins[mark]
            self._sweep()

    def current(self, rows: dict[str, Delivery], ids: Iterable[str]) -> dict[str, Delivery]:
        """``rows`` (a pinned store read of ``ids``) with each id joined with its kept
        submitted state (``delivery_join``: the newer one, also if another process wrote
        the row); updates and returns ``rows``."""
        for i in ids:
            kept = self._states.get(i)
            if kept is not None:
                row = rows.get(i)
                rows[i] = kept[1] if row is None else delivery_join(row, kept[1])
        return rows

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """``with unsettled.pinned():`` around a store read of deliveries that is not by
        id (a page); under the write lock, ``current(rows, ids)`` brings it up to date."""
        mark = self.pin()
        try:
            yield
        finally:
            self.unpin(mark)

    def read(self, store: Store, ids: Sequence[str]) -> DeliveryRead:
        """``async with unsettled.read(store, ids) as read:`` reads ``ids`` pinned, outside
        the write lock; under it, ``read.current()`` (see ``DeliveryRead``)."""
        return DeliveryRead(self, store, list(ids))

    def _sweep(self) -> None:
        horizon = min(self._durable, min(self._pins, default=self._durable))
        order, states = self._order, self._states
        while order and order[0][0] <= horizon:
            n, ids = order.popleft()
            for i in ids:
                kept = states.get(i)
                if kept is not None and kept[0] == n:
                    del states[i]


class DeliveryRead:
    """One pinned store read of deliveries (``UnsettledDeliveries.read``): entering reads
    ``ids`` (one query), leaving unpins. Under the write lock, ``current()`` gives the rows
    brought up to date; ``more(ids)`` reads ids found only then (an extra query under the
    lock: for rare cases)."""

    def __init__(self, unsettled: UnsettledDeliveries, store: Store, ids: list[str]):
        self._unsettled, self._store, self.ids = unsettled, store, ids
        self._mark: int | None = None
        self.rows: dict[str, Delivery] = {}

    async def __aenter__(self) -> DeliveryRead:
        self._mark = self._unsettled.pin()
        try:
            if self.ids:
                self.rows = await self._store.get_deliveries(self.ids)
        except BaseException:
            self._unsettled.unpin(self._mark)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._mark is not None
        self._unsettled.unpin(self._mark)

    def current(self) -> dict[str, Delivery]:
        """The rows read, each joined with its state submitted since (by id)."""
        return self._unsettled.current(self.rows, self.ids)

    async def more(self, ids: list[str]) -> dict[str, Delivery]:
        """Read ``ids`` too and return them up to date (also kept in ``rows``)."""
        rows = self._unsettled.current(await self._store.get_deliveries(ids), ids)
        self.rows.update(rows)
        self.ids.extend(ids)
        return rows
