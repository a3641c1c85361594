"""Helpers of the console's browser tests (imported by conftest.py and the tests)."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response

from regionsync.demo import Receiver

__all__ = ["SwitchableReceiver"]


@dataclass
class SwitchableReceiver(Receiver):
    """demo.Receiver (signature-verifying) whose paths in ``broken`` answer 500 with a
    JSON body, as a receiver with a bug would, and those in ``gone`` 410 Gone."""

    broken: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    refused: int = 0

    async def _hook(self, request: Request) -> Response:
        if request.path_params["name"] in self.gone:
            await request.body()
            return Response(status_code=410)
        if request.path_params["name"] in self.broken:
            await request.body()
            self.refused += 1
            return Response(b'{"error": "receiver bug: NullPointerException in handler"}',
                            status_code=500, media_type="application/json")  # fmt: skip
        return await super()._hook(request)
