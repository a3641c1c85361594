"""Delivery claims of several processes on one PostgreSQL database (issue 16): each
``PostgresStore`` object here has its own connection pool, as a process would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from regionsync.adapters.postgres_store import PostgresStore
from regionsync.core.model import Delivery, DeliveryStatus, WriteBatch

REGION = "eu-central-1"


def _d(i: int, at: int = 100, ep: str = "ep_1") -> Delivery:
    return Delivery(f"dlv_{i:04}", f"evt_{i:04}", ep, "acme", DeliveryStatus.PENDING, 0, at,
                    REGION, i, i)  # fmt: skip


@pytest.fixture
async def procs(pg_url: str) -> AsyncIterator[list[PostgresStore]]:
    stores = [PostgresStore(pg_url, pool_max=4) for _ in range(3)]
    for s in stores:
        await s.open(REGION, 1)
    yield stores
    for s in stores:
        await s.close()


async def test_concurrent_claims_are_disjoint_and_cover_every_due_delivery(procs) -> None:
    await procs[0].commit(WriteBatch(deliveries=[_d(i, at=i % 17) for i in range(300)]))
    got: dict[str, list[str]] = {}

    async def claimer(k: int) -> None:
        mine = got.setdefault(f"p{k}", [])
        while batch := await procs[k].claim_due(REGION, 1000, 7, f"p{k}", 60_000):
            mine.extend(d.id for d in batch)
            await asyncio.sleep(0)

    await asyncio.gather(*(claimer(k) for k in range(3)))
    every = [i for ids in got.values() for i in ids]
    assert len(every) == len(set(every)) == 300
    rows = await procs[0]._fetch("SELECT id, claimed_by FROM deliveries")
    assert {i: h for i, h in rows} == {i: h for h, ids in got.items() for i in ids}


async def test_claim_order_lanes_and_region(procs) -> None:
    a = procs[0]
    ds = [_d(1, at=300), _d(2, at=100, ep="ep_full"), _d(3, at=200), _d(4, at=5000)]
    await a.commit(WriteBatch(deliveries=ds))
    got = await a.claim_due(REGION, 1000, 10, "p0", 1000, exclude_endpoints=["ep_full"])
    assert [d.id for d in got] == ["dlv_0003", "dlv_0001"]
    assert await a.claim_due("us-east-1", 1000, 10, "p0", 1000) == []
    # a claimed delivery still reads as pending everywhere (the claim is no state change)
    assert await procs[1].get_delivery("dlv_0003") == ds[2]


async def test_a_dead_holders_claim_is_taken_over_after_the_lease(procs) -> None:
    a, b = procs[0], procs[1]
    await a.commit(WriteBatch(deliveries=[_d(1)]))
    assert [d.id for d in await a.claim_due(REGION, 1000, 10, "p0", 500)] == ["dlv_0001"]
    await a.close()  # p0 dies holding the claim
    assert await b.claim_due(REGION, 1499, 10, "p1", 500) == []
    assert [d.id for d in await b.claim_due(REGION, 1500, 10, "p1", 500)] == ["dlv_0001"]
    await a.open(REGION, 1)  # (reopened for the fixture's close)


async def test_a_write_of_the_delivery_or_a_release_ends_the_claim(procs) -> None:
    a, b = procs[0], procs[1]
    await a.commit(WriteBatch(deliveries=[_d(1), _d(2)]))
    assert len(await a.claim_due(REGION, 1000, 10, "p0", 60_000)) == 2
    # p0's attempt of dlv_0001 failed: the retry is due at 2000 and free for anyone
    retry = Delivery("dlv_0001", "evt_0001", "ep_1", "acme", DeliveryStatus.PENDING, 1, 2000,
                     REGION, 1, 1500)  # fmt: skip
    await a.commit(WriteBatch(deliveries=[retry]))
    assert [d for d in await b.claim_due(REGION, 2000, 10, "p1", 60_000)] == [retry]
    assert await a.release_claims("p0") == 1
    assert [d.id for d in await b.claim_due(REGION, 2000, 10, "p1", 60_000)] == ["dlv_0002"]


async def test_a_stale_state_neither_undoes_an_outcome_nor_ends_a_claim(procs) -> None:
    # process 0 read the delivery (pending) before process 1 recorded its outcome; its
    # later write of that stale state (a record echoed back by a peer) must change
    # nothing; and a state equal to the stored one keeps the claim of an attempt running
    a, b = procs[0], procs[1]
    stale = _d(1)
    await a.commit(WriteBatch(deliveries=[stale]))
    (claimed,) = await b.claim_due(REGION, 1000, 10, "p1", 60_000)
    await a.commit(WriteBatch(deliveries=[stale]))  # equal: the claim stays
    assert await a.claim_due(REGION, 1000, 10, "p0", 60_000) == []
    done = Delivery("dlv_0001", "evt_0001", "ep_1", "acme", DeliveryStatus.DELIVERED, 1, None,
                    REGION, 1, 5)  # fmt: skip
    await b.commit(WriteBatch(deliveries=[done]))
    batch = WriteBatch(deliveries=[stale])
    await a.commit(batch)  # lower in the join order: ignored
    assert await a.get_delivery("dlv_0001") == done
    assert batch.deliveries == [done]  # the batch says what is stored (commit observers)
    assert await a.claim_due(REGION, 1000, 10, "p0", 60_000) == []


async def test_claim_ids_whatever_their_due_time_but_not_anothers_claim(procs) -> None:
    """claim_ids (a schedule written by a clock that ran ahead, judged due by the caller):
    its ids whatever their due time, only the region's pending rows, never a row another
    process holds, and afterwards claim_due passes over the claimed rows."""
    a, b = procs[0], procs[1]
    done = Delivery("dlv_0009", "evt_0009", "ep_1", "acme", DeliveryStatus.DELIVERED, 1, None,
                    REGION, 9, 9)  # fmt: skip
    await a.commit(WriteBatch(deliveries=[_d(1, at=600_000), _d(2, at=600_000), done]))
    assert [d.id for d in await b.claim_ids(REGION, ["dlv_0002"], 1000, "p1", 10**6)] == [
        "dlv_0002"
    ]
    got = await a.claim_ids(REGION, ["dlv_0001", "dlv_0002", "dlv_0009"], 1000, "p0", 10**6)
    assert [d.id for d in got] == ["dlv_0001"]  # 2 is p1's, 9 is not pending
    assert await a.claim_ids("us-east-1", ["dlv_0001"], 1000, "p0", 60_000) == []
    assert await b.claim_due(REGION, 700_000, 10, "p1", 60_000) == []  # both held
