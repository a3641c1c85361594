"""The replica: merging records from peers in per-origin order, and the log's truncation.

Records of one origin are applied in sequence order; a record whose predecessors are
missing is held back (``held``) until they arrive. A malformed one is refused and never
merged, but it does not block its successors (issue 41): it is kept opaque in the log (so
regions that can read it still get it through this one), the version vector moves past it
and the refusal is noted per origin (``refusals``); anti-entropy carries its state when
the digests differ. A stamp far ahead is merged; it moves this node's HLC only so far.
Owns the log floor (what truncation removed). Never writes an own record: replicated
state is committed as it came.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from ..config import Settings
from ..core.model import AuditEntry, Delivery, Record, WriteBatch, delivery_join
from ..core.records import Decoded, decode_body
from ..errors import MalformedRecord
from .ports import Clock, Store
from .state import Catalog, IdempotencyKeys, PeerStatus
from .writepath import WritePath

__all__ = ["RefusalNote", "Replica"]

log = logging.getLogger("regionsync.node")

_MAX_HELD = 100_000  # out-of-order records buffered per node before dropping


@dataclass(slots=True)
class RefusalNote:
    """The records of one origin this node refused: how many (``skipped``: moved past),
    the last one's seq and reason, wall ms of the first and the last. In memory: what a
    skip decided is durable (the version vector and the record kept in the log)."""

    first_ms: int
    last_ms: int = 0
    count: int = 0
    skipped: int = 0
    last_seq: int = 0
    last_reason: str = ""


class Replica:
    """Applies peers' records and truncates the log. ``counters`` is the node's shared
    counter table (``records_rejected``, ``clock_drift``, ``log_truncated``)."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        writer: WritePath,
        idempotency: IdempotencyKeys,
        peers: Mapping[str, PeerStatus],
        counters: dict[str, int],
        *,
        store: Store,
        clock: Clock,
    ):
        self.settings, self.catalog, self.writer = settings, catalog, writer
        self.idempotency, self.peers, self.counters = idempotency, peers, counters
        self.store, self.clock = store, clock
        self.held: dict[str, dict[int, Record]] = {}
        self.log_floor: dict[str, int] = {}  # origin -> highest seq truncated from the log
        self.refusals: dict[str, RefusalNote] = {}  # origin -> what this node refused of it
        # origins pruned here (runtime/pruning.py): their records are dropped as duplicates
        self.pruned: Callable[[str], bool] = lambda origin: False

    async def apply_records(self, records: list[Record]) -> list[MalformedRecord]:
        """Merge records from a peer, in per-origin sequence order, in one commit.

        A record whose predecessors from its origin are missing is held back until they
        arrive (causal delivery per origin); duplicates are ignored. A record that fails to
        decode is rejected, logged, never merged and skipped (kept opaque in the log, the
        version vector past it); an HLC stamp past ``max_drift_ms`` is merged and counted
        as ``clock_drift``. Returns the rejects once what was merged is durable.
        """
        rejected, durable = await self.apply_records_nowait(records)
        if durable is not None:
            await durable
        return rejected

    async def apply_records_nowait(
        self, records: list[Record]
    ) -> tuple[list[MalformedRecord], asyncio.Future[None] | None]:
        """``apply_records`` without waiting for the commit: ``(rejects, durable)`` where
        ``durable`` resolves once the merged records are durable (None: nothing merged).
        The caller must not acknowledge the records before it resolves.

        Bodies are decoded, and the stored deliveries they carry read (one query), before
        the write lock is taken: the lock is held for no I/O (issue 17); what was
        submitted meanwhile comes from ``WritePath.unsettled``."""
        rejected: list[MalformedRecord] = []
        # keyed by the record object (kept alive here, so its id is unique): under the
        # lock, the held copy of an (origin, seq) may be another one, from a concurrent call
        reads = self.writer.capabilities.reads
        pre = {id(r): (r, _decode(r, reads)) for r in self._next_in_order(records)}
        ids = [i for _r, d in pre.values() if not isinstance(d, str) for i in d.delivery_ids()]
        async with self.writer.unsettled.read(self.store, ids) as read:
            async with self.writer.lock:
                stored = read.current()
                touched: set[str] = set()
                for r in records:
                    if r.origin == self.writer.actor or r.seq <= self.writer.version_vector.get(
                        r.origin, 0
                    ):
                        continue
                    if self.pruned(r.origin):  # retired and pruned: every region had it
                        continue
                    held = self.held.setdefault(r.origin, {})
                    if len(held) < _MAX_HELD:
                        held[r.seq] = r
                        touched.add(r.origin)
                batch = WriteBatch()
                vv = dict(self.writer.version_vector)
                deliveries: dict[str, Delivery] = {}
                for origin in sorted(touched):
                    held = self.held[origin]
                    newest = None
                    while (r := held.get(vv.get(origin, 0) + 1)) is not None:
                        got = pre.get(id(r))
                        dec = None if got is None else got[1]
                        if dec is None:  # reached through records held meanwhile: rare
                            dec = _decode(r, reads)
                            if not isinstance(dec, str) and (more := dec.delivery_ids()):
                                stored.update(await read.more(more))
                        try:
                            self._apply_one(r, dec, batch, deliveries, stored)
                            newest = r
                        except MalformedRecord as exc:
                            rejected.append(exc)
                            if not self._refuse(exc):
                                break  # held with its successors (the simulator's StallingNode)
                        else:
                            if dec.unknown:  # type: ignore[union-attr]  # decoded once applied
                                self.counters["unknown_fields"] += dec.unknown  # type: ignore[union-attr]
                        del held[r.seq]
                        vv[origin] = r.seq
                        batch.records.append(r)  # a refused one too: opaque, forwarded
                        batch.version_vector[origin] = r.seq
                    if newest is not None:  # once per origin and call: dear per record
                        self.writer.telemetry.observe_lag(
                            origin, self.clock.wall_ms(), newest.hlc[0]
                        )
                    if not held:
                        del self.held[origin]
                if not batch:
                    return rejected, None
                batch.deliveries.extend(deliveries.values())
                self.writer.version_vector = vv
                durable = self.writer.submit(batch)
        return rejected, durable

    def _refuse(self, exc: MalformedRecord) -> bool:
        """Count and note a refused record; True: its successors pass it (always here;
        never merged: ``_apply_one`` raised before merging anything)."""
        log.warning("rejected record: %s", exc)
        self.counters["records_rejected"] += 1
        note = self.refusals.get(exc.origin)
        now = self.clock.wall_ms()
        if note is None:
            note = self.refusals[exc.origin] = RefusalNote(first_ms=now)
        note.count, note.last_seq, note.last_reason, note.last_ms = (
            note.count + 1, exc.seq, exc.reason, now,
        )  # fmt: skip
        note.skipped += 1
        return True

    def refusals_view(self) -> dict[str, dict[str, int | str]]:
        """origin -> what this node refused of it (``/v1/cluster`` ``refused``)."""
        return {o: asdict(n) for o, n in sorted(self.refusals.items())}

    def _next_in_order(self, records: list[Record]) -> list[Record]:
        """Of ``records`` and the held ones, those that would apply now: per origin, the
        run of consecutive sequence numbers after what this node holds (read before
        taking the lock; re-checked under it)."""
        incoming: dict[str, dict[int, Record]] = {}
        for r in records:
            if r.origin != self.writer.actor and not self.pruned(r.origin):
                incoming.setdefault(r.origin, {})[r.seq] = r
        out: list[Record] = []
        for origin, mine in incoming.items():
            held = self.held.get(origin, {})
            seq = self.writer.version_vector.get(origin, 0) + 1
            while (r := mine.get(seq) or held.get(seq)) is not None:
                out.append(r)
                seq += 1
        return out

    def _apply_one(
        self,
        r: Record,
        decoded: Decoded | str,
        batch: WriteBatch,
        deliveries: dict[str, Delivery],
        stored: dict[str, Delivery],
    ) -> None:
        if isinstance(decoded, str):
            raise MalformedRecord(r.origin, r.seq, decoded)
        now = self.writer.physical_ms()  # corrected if this node's clock is suspect
        try:  # a stamp far ahead is applied; the clamp keeps it from moving our HLC past
            self.writer.hlc.observe_parts(*r.hlc, now, clamp=True)  # now + hlc_bound_ms
            if r.hlc[0] - now > self.settings.replication.max_drift_ms:
                self.counters["clock_drift"] += 1
                self.writer.stamp_ahead(r.origin, r.hlc[0] - now)
        except ValueError as exc:  # a stamp outside crdt's ranges (WALL_MS_MAX)
            raise MalformedRecord(r.origin, r.seq, str(exc)) from None
        self.merge(decoded, batch, deliveries, stored)
        if decoded.audit is not None:  # every region answers for every change
            batch.audit.append(AuditEntry(r.origin, r.seq, *r.hlc, **decoded.audit))

    def merge(
        self,
        decoded: Decoded,
        batch: WriteBatch,
        deliveries: dict[str, Delivery],
        stored: Mapping[str, Delivery],
    ) -> None:
        """Merge validated state into memory and ``batch`` (write lock held); ``stored``:
        the current states of the deliveries ``decoded`` carries (a ``DeliveryRead``)."""
        if decoded.registry:
            changed = self.catalog.apply(decoded.registry)
            batch.registry.update({k: v.to_bytes() for k, v in changed.items()})
        if decoded.event is not None:
            batch.events.append(decoded.event)
        if decoded.attempt is not None:  # every region shows every attempt
            batch.attempts.append(decoded.attempt)
        if decoded.idempotency is not None:
            self.idempotency.merge(decoded.idempotency)
            batch.idempotency.append(decoded.idempotency)
        for d in [*decoded.deliveries, *([decoded.delivery] if decoded.delivery else [])]:
            old = deliveries.get(d.id) or stored.get(d.id)  # this batch's, else the store's
            if old is not None:
                d = delivery_join(old, d)
            deliveries[d.id] = d

    # -- log truncation ------------------------------------------------------------------

    async def run_truncation(self) -> None:
        while True:
            await self.clock.sleep(self.settings.replication.truncate_interval_s)
            try:
                await self.truncate_log()
            except Exception:
                log.exception("log truncation failed; retrying later")

    def truncation_point(self) -> dict[str, int]:
        """origin -> seq up to which the log may be truncated now (only origins that move).

        A record goes once every configured peer acknowledged it: the min over peers of
        their acked seq (a peer never heard from has acked nothing, so it blocks
        truncation), capped by what this node holds. The last own record is kept (it
        resumes the HLC after a restart). If the log holds more than
        ``replication.max_log_records``, the oldest records of each origin go anyway, down
        to an equal share per origin; a peer left behind is repaired by anti-entropy.
        """
        opts = self.settings.replication
        held = {o: s - self.log_floor.get(o, 0) for o, s in self.writer.durable_vv.items()}
        share = opts.max_log_records // max(len(held), 1)
        forced = sum(held.values()) > opts.max_log_records
        out: dict[str, int] = {}
        for origin, have in self.writer.durable_vv.items():
            acked = min((p.acked.get(origin, 0) for p in self.peers.values()), default=have)
            upto = min(acked, have)
            if origin == self.writer.actor:
                upto = min(upto, have - 1)
            if forced:
                upto = max(upto, have - share)
            if upto > self.log_floor.get(origin, 0):
                out[origin] = upto
        return out

    async def truncate_log(self) -> int:
        """Delete log records per ``truncation_point``; returns how many were deleted."""
        upto = self.truncation_point()
        if not upto:
            return 0
        n = await self.store.truncate_log(upto)
        for origin, seq in upto.items():
            self.log_floor[origin] = max(self.log_floor.get(origin, 0), seq)
        self.counters["log_truncated"] += n
        return n

    def behind_floor(self, vv: Mapping[str, int]) -> list[str]:
        """Origins whose records a holder of ``vv`` lacks that the log no longer has."""
        return sorted(o for o, f in self.log_floor.items() if vv.get(o, 0) < f)


def _decode(r: Record, reads: frozenset[str]) -> Decoded | str:
    """``decode_body`` of ``r`` as a node reading ``reads``, or why it is malformed."""
    try:
        return decode_body(r.kind, r.body, reads)
    except ValueError as exc:
        return str(exc)
