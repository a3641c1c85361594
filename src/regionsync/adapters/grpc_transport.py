"""PeerTransport over gRPC (grpc.aio): the ``Replication.Sync`` bidirectional stream.

gRPC errors are translated to ``ConnectionError`` here, in one place. Keepalive values are
chosen so the server accepts the client's pings on an idle stream (client ping interval
above the server's ``min_ping_interval_without_data``), and mutual TLS is used when a
``[tls]`` section is configured (a peer without a valid client certificate is refused).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grpc

from ..config import TlsSettings
from ..runtime.ports import PeerStream
from ..v1 import replication_pb2 as pb
from ..v1 import replication_pb2_grpc as pb_grpc

__all__ = ["GrpcTransport"]

log = logging.getLogger("regionsync.grpc")

_MAX_MESSAGE = 64 * 1024 * 1024  # replication.max_message_bytes' default


def _message_limits(max_message_bytes: int) -> list[tuple[str, int]]:
    # the same limit both ways, on both ends: what one side may send the other accepts
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


_SERVER_OPTIONS = [
    # a second server on the same port must fail to start, not silently share the
    # replication traffic (gRPC sets SO_REUSEPORT by default)
    ("grpc.so_reuseport", 0),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
]
_CLIENT_OPTIONS = [
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]


class _ServerStream:
    def __init__(self, context: grpc.aio.ServicerContext):
        self._ctx = context

    async def send(self, msg: pb.SyncMessage) -> None:
        try:
            await self._ctx.write(msg)
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, RuntimeError) as exc:
            raise ConnectionError(f"sync stream write failed: {exc}") from exc

    async def recv(self) -> pb.SyncMessage | None:
        try:
            msg = await self._ctx.read()
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, RuntimeError) as exc:
            raise ConnectionError(f"sync stream read failed: {exc}") from exc
        return None if msg is grpc.aio.EOF else msg

    async def close(self) -> None:
        return None


class _ClientStream:
    def __init__(self, channel: grpc.aio.Channel, call: grpc.aio.StreamStreamCall):
        self._channel, self._call = channel, call

    async def send(self, msg: pb.SyncMessage) -> None:
        try:
            await self._call.write(msg)
        except grpc.aio.AioRpcError as exc:
            raise ConnectionError(f"{exc.code().name}: {exc.details()}") from exc
        except (grpc.aio.UsageError, asyncio.InvalidStateError, RuntimeError) as exc:
            # writing to a call that already ended (the peer went away)
            raise ConnectionError(f"sync stream closed: {exc!r}") from exc

    async def recv(self) -> pb.SyncMessage | None:
        try:
            msg = await self._call.read()
        except grpc.aio.AioRpcError as exc:
            raise ConnectionError(f"{exc.code().name}: {exc.details()}") from exc
        except (grpc.aio.UsageError, asyncio.InvalidStateError, RuntimeError) as exc:
            raise ConnectionError(f"sync stream closed: {exc!r}") from exc
        return None if msg is grpc.aio.EOF else msg

    async def close(self) -> None:
        self._call.cancel()
        await self._channel.close()


class _Servicer(pb_grpc.ReplicationServicer):
    def __init__(self, handler: Callable[[PeerStream], Awaitable[None]]):
        self._handler = handler

    async def Sync(self, request_iterator, context):  # noqa: N802 (generated name)
        await self._handler(_ServerStream(context))


class GrpcTransport:
    """Listens on ``listen`` (``host:port``; port 0 picks one, see ``port``).

    ``max_message_bytes`` (``replication.max_message_bytes``) is the max send and receive
    message length of the server and of every channel it dials.
    """

    def __init__(
        self, listen: str, tls: TlsSettings | None = None, max_message_bytes: int = _MAX_MESSAGE
    ):
        self.listen = listen
        self.tls = tls
        self.max_message_bytes = max_message_bytes
        self.port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._client_creds: grpc.ChannelCredentials | None = None
        if tls is not None:
            self._client_creds = grpc.ssl_channel_credentials(
                root_certificates=tls.ca.read_bytes(),
                private_key=tls.key.read_bytes(),
                certificate_chain=tls.cert.read_bytes(),
            )

    async def serve(self, handler: Callable[[PeerStream], Awaitable[None]]) -> None:
        server = grpc.aio.server(options=_SERVER_OPTIONS + _message_limits(self.max_message_bytes))
        pb_grpc.add_ReplicationServicer_to_server(_Servicer(handler), server)
        try:
            if self.tls is None:
                self.port = server.add_insecure_port(self.listen)
            else:
                creds = grpc.ssl_server_credentials(
                    [(self.tls.key.read_bytes(), self.tls.cert.read_bytes())],
                    root_certificates=self.tls.ca.read_bytes(),
                    require_client_auth=True,
                )
                self.port = server.add_secure_port(self.listen, creds)
        except RuntimeError as exc:  # grpcio raises this when the bind fails
            raise OSError(f"cannot listen on {self.listen} for gRPC: {exc}") from None
        if not self.port:
            raise OSError(f"cannot listen on {self.listen} for gRPC")
        await server.start()
        self._server = server
        log.info("replication listening on %s", self.listen)

    async def connect(self, address: str, timeout_s: float) -> PeerStream:
        options = _CLIENT_OPTIONS + _message_limits(self.max_message_bytes)
        if self._client_creds is None:
            channel = grpc.aio.insecure_channel(address, options=options)
        else:
            channel = grpc.aio.secure_channel(address, self._client_creds, options=options)
        try:
            async with asyncio.timeout(timeout_s):
                await channel.channel_ready()
        except TimeoutError:
            await channel.close()
            raise ConnectionError(f"peer {address} not reachable within {timeout_s}s") from None
        call = pb_grpc.ReplicationStub(channel).Sync()
        return _ClientStream(channel, call)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=1.0)
            self._server = None
