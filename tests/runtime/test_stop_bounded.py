"""Node's stop and a role change wait for their cancelled tasks at most STOP_TIMEOUT_S:
a task that ignores its cancellation is named in the log and left, never awaited forever
(``runtime/node.py`` ``_cancelled``, used by ``Node.stop`` and ``Node._stop_role``)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from regionsync.runtime import node as node_mod


async def test_a_task_that_ignores_its_cancellation_is_named_and_left(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(node_mod, "STOP_TIMEOUT_S", 0.2)
    free = asyncio.Event()

    async def stubborn() -> None:
        while not free.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue  # the bug the bound is for

    async def polite() -> None:
        await asyncio.sleep(10)

    tasks = [asyncio.create_task(stubborn(), name="stuck-part"),
             asyncio.create_task(polite(), name="polite-part")]  # fmt: skip
    await asyncio.sleep(0)
    with caplog.at_level(logging.ERROR, logger="regionsync.node"):
        async with asyncio.timeout(5):
            await node_mod._cancelled(tasks, "giving up the replication role")
    assert tasks[1].cancelled() and not tasks[0].done()
    assert "giving up the replication role: tasks ['stuck-part'] did not end" in caplog.text
    free.set()
    tasks[0].cancel()
    await asyncio.wait([tasks[0]], timeout=5)


async def test_no_tasks_return_at_once() -> None:
    async with asyncio.timeout(1):
        await node_mod._cancelled([], "stopping")
