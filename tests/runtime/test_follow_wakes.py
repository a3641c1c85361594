"""Follow rounds (runtime/cohort.py), without a database. Which commit notifications
wake a round (``Cohort._listen``): one that carries a record this process does not
hold, or one whose version vector is unknown; never a commit it holds already (its own,
or records the replication holder applied itself), which woke a round that read the
version vector for nothing (issue 44: at one process, every commit). And a round whose
version vector moved back while it read reads again instead of seeing a gap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from regionsync.core.model import Record
from regionsync.runtime.cohort import Cohort

OWN, OTHER, PEER = "pg:1", "pg:2", "us:1"


def cohort_of(coordinator: Any, writer: Any) -> Cohort:
    """A Cohort of ``coordinator`` and ``writer`` alone (the rounds here touch nothing
    else)."""
    none: Any = None
    return Cohort(none, coordinator, writer, none, none, store=none, clock=none,
                  start_role=none, stop_role=none, tree_stale=none, tree_kept=none)  # fmt: skip


async def test_only_a_commit_with_a_record_not_held_wakes_a_round() -> None:
    writer = SimpleNamespace(version_vector={OWN: 5, OTHER: 3, PEER: 7})
    cases: list[tuple[dict[str, int], bool]] = [
        ({}, True),  # (re)connected, or a payload too large: read
        ({OWN: 5}, False),  # this process's commit
        ({PEER: 7, OWN: 4}, False),  # records the holder applied itself
        ({OTHER: 4}, True),  # another process's
        ({PEER: 8}, True),  # another process applied a peer's record
        ({"pg:3": 1}, True),  # a process never heard of
        ({OWN: 5, OTHER: 4}, True),
    ]
    woke: list[bool] = []
    cohort: Any = None

    class Coordinator:
        async def changes(self) -> AsyncIterator[dict[str, int]]:
            for vv, _ in cases:
                cohort._wake.clear()
                yield vv
                woke.append(cohort._wake.is_set())
            writer.version_vector = {OWN: 5}  # replaced by a reload: the current one counts
            cohort._wake.clear()
            yield {OTHER: 1}
            woke.append(cohort._wake.is_set())

    cohort = cohort_of(Coordinator(), writer)
    await cohort._listen()
    assert woke == [want for _, want in cases] + [True]


async def test_a_round_whose_version_vector_moved_back_meanwhile_reads_again() -> None:
    """The records are read past the version vector as it was when the round began; a
    reload (or a pruned origin) that moves it back meanwhile would make them look like a
    gap (a registry reload, their events and keys never merged): the round merges
    nothing and wakes the next, which reads from where the version vector is now."""
    writer = SimpleNamespace(actor=OWN, version_vector={OWN: 5, OTHER: 3})

    class Coordinator:
        async def follow_read(self, have: Any, own: str, limit: int) -> Any:
            assert dict(have) == {OWN: 5, OTHER: 3} and own == OWN
            writer.version_vector = {OWN: 5, OTHER: 2}  # a reload, during the read
            records = [Record(OTHER, n, "registry", b"", (n, 0)) for n in (4, 5)]
            return {OWN: 5, OTHER: 5}, records

    cohort = cohort_of(Coordinator(), writer)
    assert await cohort.follow_once() == 0
    assert cohort._wake.is_set() and cohort.reloads == 0
