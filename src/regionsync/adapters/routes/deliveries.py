"""Routes of deliveries: listing, retry, attempts, recovery jobs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ...core.model import DeliveryQuery
from ...core.numtext import parse_uint
from ...core.registry import ID_RE
from ...errors import Unprocessable
from .bodies import SinceIn
from .common import (
    ApiContext,
    attempt_json,
    decode_cursor,
    delivery_json,
    delivery_status,
    encode_cursor,
    hidden_values,
    job_json,
    open_cursor,
    page_params,
    read_no_body,
    read_object,
    seal_cursor,
)
from .paging import parse_order

__all__ = ["build"]


def build(ctx: ApiContext) -> APIRouter:
    """Deliveries of an endpoint, one delivery's retry and attempts, recovery jobs."""
    router, node = APIRouter(), ctx.node

    @router.get("/v1/tenants/{tenant}/endpoints/{endpoint}/deliveries")
    async def list_deliveries(
        request: Request,
        tenant: str,
        endpoint: str,
        status: str | None = None,
        since: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        ctx.auth.check(request, tenant)
        node.catalog.endpoint(tenant, endpoint)
        since_ms = page_params(limit, since)
        st = delivery_status(status)
        after = open_cursor(cursor)
        if after is not None and not ID_RE.fullmatch(after):
            raise Unprocessable("not a cursor this API returned", field="cursor")
        rows, nxt = await node.recovery.deliveries_page(
            tenant, endpoint, st, since_ms, after, limit
        )
        return {
            "items": [delivery_json(node, d) for d in rows],
            "next": None if nxt is None else seal_cursor(nxt),
        }

    @router.get("/v1/tenants/{tenant}/deliveries")
    async def list_tenant_deliveries(
        request: Request,
        tenant: str,
        status: str | None = None,
        endpoint: str | None = None,
        since: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """The tenant's deliveries across endpoints, newest first (created time);
        ``status``, ``endpoint`` and ``since`` (RFC 3339) filter. 422 names the bad
        parameter."""
        ctx.auth.check(request, tenant)
        q = DeliveryQuery(tenant, endpoint, delivery_status(status), page_params(limit, since))
        rows, nxt = await node.listing.deliveries(q, decode_cursor(cursor), limit)
        return {
            "items": [delivery_json(node, d) for d in rows],
            "next": encode_cursor(nxt),
        }

    @router.get("/v1/tenants/{tenant}/jobs")
    async def list_jobs(
        request: Request, tenant: str, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """Recovery jobs started in this region, newest first (jobs are not replicated
        and not kept across a restart)."""
        ctx.auth.check(request, tenant)
        page_params(limit, None)
        rows, nxt = node.listing.jobs_of(tenant, decode_cursor(cursor), limit)
        return {"items": [job_json(j) for j in rows], "next": encode_cursor(nxt)}

    _jobs(router, ctx)
    _one_delivery(router, ctx)
    return router


def _jobs(router: APIRouter, ctx: ApiContext) -> None:
    """Recovery jobs: recover, replay-missing and one job's state."""
    node = ctx.node

    async def _job_body(request: Request) -> int:
        """``since`` of a recover/replay body in ms (``SinceIn``)."""
        body = await read_object(request, ctx.max_body)
        return SinceIn.check(body, now_ms=node.cluster_clock.wall_ms()).since_ms

    @router.post(
        "/v1/tenants/{tenant}/endpoints/{endpoint}/recover",
        status_code=202,
        openapi_extra=SinceIn.openapi(),
    )
    async def recover(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        """Re-send every dead delivery of the endpoint since a time (a background job)."""
        ctx.auth.check(request, tenant)
        since = await _job_body(request)
        return job_json(await node.recovery.start_job(tenant, endpoint, "recover", since))

    @router.post(
        "/v1/tenants/{tenant}/endpoints/{endpoint}/replay-missing",
        status_code=202,
        openapi_extra=SinceIn.openapi(),
    )
    async def replay_missing(request: Request, tenant: str, endpoint: str) -> dict[str, Any]:
        """Send what was skipped while the endpoint was paused or disabled (a job)."""
        ctx.auth.check(request, tenant)
        since = await _job_body(request)
        return job_json(await node.recovery.start_job(tenant, endpoint, "replay-missing", since))

    @router.get("/v1/tenants/{tenant}/jobs/{job}")
    async def get_job(request: Request, tenant: str, job: str) -> dict[str, Any]:
        ctx.auth.check(request, tenant)
        node.catalog.tenant(tenant)
        return job_json(node.recovery.job(tenant, job))


def _one_delivery(router: APIRouter, ctx: ApiContext) -> None:
    """One delivery, its retry and attempts."""
    node = ctx.node

    @router.get("/v1/tenants/{tenant}/deliveries/{delivery}")
    async def get_delivery(request: Request, tenant: str, delivery: str) -> dict[str, Any]:
        """One delivery by id (its event, endpoint and status): the console's search by
        delivery id. 404 (field ``delivery``) if the tenant has none of this id."""
        ctx.auth.check(request, tenant)
        return delivery_json(node, await node.recovery.delivery(tenant, delivery))

    @router.post("/v1/tenants/{tenant}/deliveries/{delivery}/retry", status_code=202)
    async def retry(request: Request, tenant: str, delivery: str) -> dict[str, Any]:
        """Re-send one delivery now (a new generation, the same webhook-id; audited as
        ``delivery.retry``). No body (or ``{}``)."""
        ctx.auth.check(request, tenant)
        await read_no_body(request, ctx.max_body)
        d = await node.recovery.retry_delivery(tenant, delivery)
        return delivery_json(node, d)

    @router.get("/v1/tenants/{tenant}/deliveries/{delivery}/attempts")
    async def list_attempts(
        request: Request,
        tenant: str,
        delivery: str,
        limit: int = 50,
        cursor: str | None = None,
        order: str = "desc",
    ) -> dict[str, Any]:
        """One delivery's attempts (every generation), newest first unless ``order=asc``;
        ``{items, next}`` (``next`` continues in the order asked). Each says what it sent
        (``request_headers``: ``name: value`` lines, the ``webhook-*`` ones first,
        endpoint headers named like a credential redacted, at most 4 KiB; ``""`` for
        attempts recorded before) and what came back. A ``read`` token sees the
        endpoint's header values masked (``…``) wherever they appear."""
        caller = ctx.auth.check(request, tenant)
        page_params(limit, None)
        newest = parse_order(order)
        after: tuple[int, int, int] | None = None
        if cursor is not None:
            parts = (open_cursor(cursor) or "").split(":")
            if len(parts) != 3:
                raise Unprocessable("not a cursor this API returned", field="cursor")
            at, gen, n = (parse_uint(v, "cursor", error=Unprocessable) for v in parts)
            after = (at, gen, n)
        d = await node.recovery.delivery(tenant, delivery)
        hidden = hidden_values(node, caller, tenant, d.endpoint_id)
        attempts = await node.store.attempts_of(delivery)  # oldest first
        if newest:
            attempts.reverse()
        if after is not None:
            attempts = [a for a in attempts
                        if ((a.at_ms, a.generation, a.n) < after) == newest
                        and (a.at_ms, a.generation, a.n) != after]  # fmt: skip
        page = attempts[:limit]
        nxt = None
        if len(attempts) > limit:
            last = page[-1]
            nxt = seal_cursor(f"{last.at_ms}:{last.generation}:{last.n}")
        return {"items": [attempt_json(a, hidden) for a in page], "next": nxt}
