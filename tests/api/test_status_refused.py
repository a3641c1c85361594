"""``regionsync status`` shows refusals on both sides of a link (issue 41): the asked
node's row what it refused per origin, a peer's row what that peer refused of ours."""

from __future__ import annotations

from regionsync.manage.status import status_rows


def test_refusals_show_on_the_asked_row_and_on_the_peer_row() -> None:
    refused = {"count": 3, "skipped": 3, "last_seq": 9, "last_reason": "unknown section 'x'"}
    cluster = {
        "region": "eu", "registry_hash": "ab" * 16, "custody": {},
        "refused": {"us:1": refused},
        "peers": [
            {"region": "us", "connected": True, "records_behind": 0, "seconds_since_contact": 1,
             "refused": {"eu:1": {"count": 2, "last_seq": 7, "last_reason": "x" * 60}}},
            {"region": "ap", "connected": True, "records_behind": 0, "seconds_since_contact": 1,
             "refused": {}},
        ],
    }  # fmt: skip
    rows = {r["region"]: r["refused"] for r in status_rows(cluster)}
    assert rows == {
        "eu": "us:1: 3 (#9 unknown section 'x')",
        "us": "eu:1: 2 (#7 " + "x" * 39 + "…)",
        "ap": "none",
    }
