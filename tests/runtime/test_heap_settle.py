"""runtime/heap.py: a large registry's objects leave the collector's generations."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from regionsync.runtime import heap


@pytest.fixture
def unfrozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(heap, "_sizes", {})
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_a_small_registry_leaves_the_collector_alone(unfrozen: None) -> None:
    assert heap.settle(heap.LARGE) is False
    assert gc.get_freeze_count() == 0


def test_a_large_registry_is_frozen_after_its_young_cycles_are_collected(
    unfrozen: None,
) -> None:
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # type: ignore[attr-defined]
    del a, b  # a cycle, garbage: collected before the freeze, not kept forever
    kept = [Node() for _ in range(1_000)]
    assert heap.settle(heap.LARGE + 1) is True
    assert gc.get_freeze_count() >= len(kept)
    assert not [o for o in gc.get_objects() if isinstance(o, Node) and hasattr(o, "other")]
    assert not any(o is kept[0] for o in gc.get_objects())  # frozen: not walked


def test_it_settles_again_only_after_a_tenth_more(unfrozen: None) -> None:
    n = heap.LARGE * 2
    assert heap.settle(n) is True
    assert heap.settle(n + n // 20) is False  # 5 % more
    assert heap.settle(n + n // 20, "tree") is True  # another measure: its own
    assert heap.settle(n + n // 10) is True
