"""Event ids: the node's form, time first, and the bits given."""

from __future__ import annotations

from regionsync_client.ulid import EVENT_ID_RE, new_event_id


def test_ids_have_the_node_form_and_sort_by_time() -> None:
    ids = [new_event_id(ms, 0) for ms in (1, 2, 10**12, 2**48 - 1)]
    assert all(EVENT_ID_RE.fullmatch(i) for i in ids) and ids == sorted(ids)
    assert new_event_id(0, 0) == "evt_" + "0" * 26
    assert new_event_id(0, 1) == "evt_" + "0" * 25 + "1"
    assert new_event_id(2**48 - 1, 2**80 - 1) == "evt_7" + "Z" * 25
    assert len({new_event_id() for _ in range(1000)}) == 1000
