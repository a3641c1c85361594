"""The Sender with its HTTP attempts in a child process (issue 17).

A node's event loop holds the GIL for everything it does; the aiohttp client path was
about half of the loop's time during a delivery backlog. ``ProcessSender`` runs an
``AiohttpSender`` (the same pinned connector, SSRF guard, redirect refusal, deadline and
capture bounds) in a child Python process and talks to it over its stdin/stdout pipes:
one msgpack array per request and per outcome, many attempts in flight at once. The node
then spends a pack, a pipe write and an unpack per attempt, and the attempts' HTTP work
runs on the other core.

Failure handling: if the child exits (crash, kill) every attempt in flight becomes an
``INDETERMINATE`` outcome (``network``: it may or may not have been sent; the retry
schedule re-sends it, and ``webhook-id`` lets receivers deduplicate) and the next attempt
starts a new child; an attempt unanswered ``WATCHDOG_GRACE_S`` past its own deadline does
the same (a wedged child is killed). The child exits when its stdin closes, so it never
outlives the node (also after a SIGKILL of the node).

Run as ``python -m regionsync.adapters.process_sender FORMAT LEVEL REGION [CIDR ...]``
(the node's ``log_format``, ``log_level``, ``region`` and the allow-list of
``delivery.allow_private_networks``) only by ``ProcessSender``: the child logs as the node
does (``jsonlog.configure``), tagged ``[<region> sender]`` in text.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import msgpack

from ..core.retry import AttemptOutcome, OutcomeKind
from ..core.sending import Failure, failure_outcome
from ..core.urlguard import parse_networks
from ..runtime.ports import OutboundRequest
from .jsonlog import configure as configure_logging

__all__ = ["WATCHDOG_GRACE_S", "ProcessSender"]

log = logging.getLogger("regionsync.delivery")

WATCHDOG_GRACE_S = 10.0  # an attempt unanswered this long past its deadline: child killed
RESPAWN_MIN_S = 1.0  # a child that died is not replaced sooner than this after the last
STOP_WAIT_S = 5.0  # after stdin closes, how long the child gets to exit before a kill


_FIELDS = tuple(f.name for f in dataclasses.fields(AttemptOutcome))  # ``kind`` first


def _outcome_fields(o: AttemptOutcome) -> list[Any]:
    """``o`` as a msgpack-able list, in ``AttemptOutcome``'s field order."""
    return [o.kind.value, *(getattr(o, name) for name in _FIELDS[1:])]


def _outcome(fields: list[Any]) -> AttemptOutcome:
    return AttemptOutcome(OutcomeKind(fields[0]), *fields[1:])


def _lost(why: str | Exception) -> AttemptOutcome:
    """An attempt whose answer was lost: it may or may not have been sent."""
    return failure_outcome(Failure.NETWORK, why, 0.0)


class _ChildPipes(asyncio.SubprocessProtocol):
    """The parent's end: outcomes read from the child's stdout resolve their futures."""

    def __init__(self, sender: ProcessSender):
        self.sender = sender
        self.unpacker = msgpack.Unpacker(raw=False)
        self.exited = asyncio.get_running_loop().create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1:
            return
        self.unpacker.feed(data)
        pending = self.sender._pending
        for rid, fields in self.unpacker:
            entry = pending.pop(rid, None)
            if entry is not None and not entry[1].done():
                entry[1].set_result(_outcome(fields))

    def process_exited(self) -> None:
        self.sender._child_gone(self)
        if not self.exited.done():
            self.exited.set_result(None)


class ProcessSender:
    """A ``Sender`` whose attempts an ``AiohttpSender`` makes in a child process; see the
    module docstring. ``allow``: CIDR strings exempt from the SSRF guard. The child is
    started on the first ``send`` (inside the running loop); ``aclose`` stops it.
    ``logs``: the node's ``(log_format, log_level, region)``, for the child's logging.
    ``children`` counts the children started (tests)."""

    def __init__(
        self,
        allow: Sequence[str] = (),
        *,
        python: str | None = None,
        logs: tuple[str, str, str] = ("text", "warning", ""),
    ):
        self.allow = [str(net) for net in parse_networks(list(allow))]
        self.logs = logs
        self.python = python or sys.executable
        self.children = 0
        self._transport: asyncio.SubprocessTransport | None = None
        self._pipes: _ChildPipes | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._pending: dict[int, tuple[float, asyncio.Future[AttemptOutcome]]] = {}
        self._next_id = 0
        self._starting: asyncio.Lock | None = None
        self._started_at = -RESPAWN_MIN_S
        self._watchdog: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The running child's process id (None when none runs)."""
        return self._transport.get_pid() if self._transport is not None else None

    async def start(self) -> None:
        """Start the child now rather than at the first attempt (``serve`` does, before
        gRPC runs: a fork while gRPC threads are busy makes gRPC log a warning)."""
        await self._start()

    async def send(self, request: OutboundRequest) -> AttemptOutcome:
        """One attempt, made by the child (started here if none runs). Returns its outcome
        as ``AiohttpSender.send`` does; an attempt the child could not answer (it died, or
        none could be started) is ``INDETERMINATE``/``network``. Never raises for network
        or process failures."""
        stdin = self._stdin if self._transport is not None else await self._start()
        if stdin is None:
            return _lost("the sender process is not running (restarting)")
        self._next_id += 1
        rid = self._next_id
        fut: asyncio.Future[AttemptOutcome] = asyncio.get_running_loop().create_future()
        self._pending[rid] = (time.monotonic() + request.timeout_s + WATCHDOG_GRACE_S, fut)
        stdin.write(msgpack.packb(
            [rid, request.url, list(request.headers.items()), request.body, request.timeout_s]
        ))  # fmt: skip
        try:
            return await fut
        finally:
            self._pending.pop(rid, None)

    async def _start(self) -> asyncio.WriteTransport | None:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._transport is not None or self._closed:
                return self._stdin
            if time.monotonic() - self._started_at < RESPAWN_MIN_S:
                return None  # died right after starting: not in a tight loop
            self._started_at = time.monotonic()
            loop = asyncio.get_running_loop()
            try:
                transport, pipes = await loop.subprocess_exec(
                    lambda: _ChildPipes(self), self.python, "-m", __name__, *self.logs,
                    *self.allow,
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
                )  # fmt: skip
            except OSError as exc:
                log.error("cannot start the delivery sender process: %s", exc)
                return None
            self._transport, self._pipes = transport, pipes
            self._stdin = transport.get_pipe_transport(0)  # type: ignore[assignment]
            self.children += 1
            if self._watchdog is None:
                self._watchdog = asyncio.create_task(self._watch())
            return self._stdin

    def _child_gone(self, pipes: _ChildPipes) -> None:
        if pipes is not self._pipes or self._transport is None:
            return
        code = self._transport.get_returncode()
        self._transport.close()
        self._transport, self._pipes, self._stdin = None, None, None
        lost, self._pending = self._pending, {}
        if not self._closed:
            log.error("delivery sender process exited (code %s); %d attempts in flight "
                      "become indeterminate", code, len(lost))  # fmt: skip
        for _, fut in lost.values():
            if not fut.done():
                fut.set_result(_lost(f"the sender process exited (code {code})"))

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            late = [rid for rid, (deadline, _) in self._pending.items() if deadline < now]
            if late and self._transport is not None:
                log.error("delivery sender process %s did not answer %d attempts in time; "
                          "killing it", self._transport.get_pid(), len(late))  # fmt: skip
                with contextlib.suppress(ProcessLookupError):
                    self._transport.kill()

    async def aclose(self) -> None:
        """Stop the child (stdin closed, then killed after ``STOP_WAIT_S``)."""
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
            self._watchdog = None
        transport, pipes = self._transport, self._pipes
        if transport is None or pipes is None:
            return
        if self._stdin is not None:
            self._stdin.close()
        try:
            await asyncio.wait_for(asyncio.shield(pipes.exited), STOP_WAIT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                transport.kill()
            await pipes.exited
        transport.close()


# -- the child ---------------------------------------------------------------------------


class _Requests(asyncio.Protocol):
    """The child's stdin: each request is sent as its own task; EOF ends the child."""

    def __init__(self, sender: Any, out: asyncio.WriteTransport, done: asyncio.Future[None]):
        self.sender, self.out, self.done = sender, out, done
        self.unpacker = msgpack.Unpacker(raw=False)
        self.tasks: set[asyncio.Task[None]] = set()

    def data_received(self, data: bytes) -> None:
        self.unpacker.feed(data)
        for rid, url, headers, body, timeout_s in self.unpacker:
            request = OutboundRequest(url, dict(headers), body, timeout_s)
            task = asyncio.ensure_future(self._one(rid, request))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _one(self, rid: int, request: OutboundRequest) -> None:
        try:
            outcome = await self.sender.send(request)
        except Exception as exc:  # a programming error: the attempt is not lost silently
            log.exception("sender process: attempt crashed")
            outcome = _lost(exc)
        self.out.write(msgpack.packb([rid, _outcome_fields(outcome)]))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _child_main(allow: list[str]) -> None:
    from .aiohttp_sender import AiohttpSender
    from .system import SystemResolver

    loop = asyncio.get_running_loop()
    sender = AiohttpSender(SystemResolver(), parse_networks(allow))
    out, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout.buffer)
    done: asyncio.Future[None] = loop.create_future()
    _, requests = await loop.connect_read_pipe(
        lambda: _Requests(sender, out, done),
        sys.stdin.buffer,  # type: ignore[arg-type]
    )
    try:
        await done  # stdin closed: the node stopped or died
    finally:
        for task in list(requests.tasks):
            task.cancel()
        await asyncio.gather(*requests.tasks, return_exceptions=True)
        await sender.aclose()


def main(argv: list[str]) -> None:
    """The child process: ``argv`` is the log format, level and region, then the
    allow-listed CIDRs."""
    log_format, level, region, *allow = argv
    configure_logging(log_format, level, region, " sender")
    log.info("delivery sender process %d started", os.getpid())
    try:
        import uvloop

        uvloop.run(_child_main(allow))
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(_child_main(allow))


if __name__ == "__main__":
    main(sys.argv[1:])
