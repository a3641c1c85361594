"""core.capabilities: the effective feature set over every configured region's last
announcement, raised only once all have a feature, lowered by a rollback, never by
silence; and the record decoders restricted to the baseline refuse what e5ef9b5 refuses."""

from __future__ import annotations

import msgpack
import pytest

from crdt import LWWRegister, Timestamp
from regionsync.core import capabilities as caps
from regionsync.core.capabilities import ALL, BASELINE, Negotiation, announced
from regionsync.core.model import Event
from regionsync.core.records import decode_body, encode_body

NEW = sorted(ALL - BASELINE)  # this release's features


def test_baseline_is_what_0_1_0_reads_and_new_features_name_their_release() -> None:
    assert "optional-fields" in NEW
    assert {"registry", "event", "delivery", "deliveries", "attempt", "idempotency",
            "audit", "owner-gen", "request-headers", "registry-keys",
            "log-payload-cut"} == BASELINE  # fmt: skip
    for f in caps.FEATURES:
        assert (f.name in BASELINE) == (f.since == caps.BASELINE_RELEASE)
    assert announced(BASELINE) == [] and announced(ALL) == NEW


# (announcements in order: (region, version, features)) -> effective beyond the baseline
CASES = [
    ("nobody heard: baseline", [], []),
    ("one of two peers heard", [("b", "0.2.0", NEW)], []),
    ("both peers heard", [("b", "0.2.0", NEW), ("c", "0.2.0", NEW)], NEW),
    ("an old peer (no version)", [("b", "0.2.0", NEW), ("c", "", [])], []),
    (
        "rolled back: c announces less",
        [("b", "0.2.0", NEW), ("c", "0.2.0", NEW), ("c", "", [])],
        [],
    ),  # fmt: skip
    ("upgraded again", [("b", "0.2.0", NEW), ("c", "", []), ("c", "0.2.0", NEW)], NEW),
    (
        "a newer peer's unknown feature is dropped",
        [("b", "0.3.0", [*NEW, "from-the-future"]), ("c", "0.2.0", NEW)],
        NEW,
    ),
    ("not a configured peer is ignored", [("x", "0.2.0", NEW), ("b", "0.2.0", NEW)], []),
]


@pytest.mark.parametrize("name,hellos,expected", CASES, ids=[c[0] for c in CASES])
def test_effective_set(name: str, hellos: list, expected: list) -> None:
    n = Negotiation(ALL, ("b", "c"))
    for t, (region, version, features) in enumerate(hellos):
        n.announce(region, version, features, now_ms=1000 * t)
    assert announced(n.effective) == expected
    assert n.enabled("optional-fields") == ("optional-fields" in expected)


def test_silence_never_lowers_and_change_is_reported() -> None:
    n = Negotiation(ALL, ("b",))
    assert n.announce("b", "0.2.0", NEW, 0) == (BASELINE, ALL)
    assert n.announce("b", "0.2.0", NEW, 1) is None  # the same again: no change
    # nothing heard for a long time: the last announcement stands
    assert n.effective == ALL and n.holding_back() == {}
    assert n.announce("b", "", [], 2) == (ALL, BASELINE)  # rolled back


def test_a_restricted_node_announces_and_uses_the_baseline_only() -> None:
    n = Negotiation(BASELINE, ("b",))
    n.announce("b", "0.2.0", NEW, 0)
    assert n.effective == BASELINE and n.holding_back() == {}
    with pytest.raises(KeyError):
        n.enabled("no-such-feature")
    with pytest.raises(ValueError):
        Negotiation(frozenset({"optional-fields"}), ())  # the baseline is always read


def test_held_back_is_reported_once_per_episode_after_the_delay() -> None:
    n = Negotiation(ALL, ("b", "c"))
    n.start(0)
    n.announce("b", "0.2.0", NEW, 10)
    assert n.held_back_due(59_999, 60_000) is None
    assert n.held_back_due(60_000, 60_000) == {"c": NEW}
    assert n.held_back_due(120_000, 60_000) is None  # once per episode
    n.announce("c", "0.2.0", NEW, 130_000)  # the last one upgraded: nothing held back
    assert n.held_back_due(500_000, 60_000) is None
    n.announce("c", "", [], 600_000)  # rolled back: a new episode, timed from now
    assert n.held_back_due(630_000, 60_000) is None
    assert n.held_back_due(660_000, 60_000) == {"c": NEW}


def test_view_lists_each_peer_and_the_regions_behind() -> None:
    n = Negotiation(ALL, ("b", "c"))
    n.announce("b", "", [], 5)
    v = n.view()
    assert v["effective"] == [] and v["features"] == NEW and v["held_back_by"] == ["b", "c"]
    assert v["peers"] == {
        "b": {"version": "", "features": [], "heard_at_ms": 5},
        "c": {"version": None, "features": None, "heard_at_ms": None},
    }


def _event_body(**extra: object) -> bytes:
    ev = Event("evt_1", "t1", "a.b", b"{}", "eu", 1)
    obj = msgpack.unpackb(encode_body(event=ev), raw=False)
    for k, v in extra.items():
        if k.startswith("event."):
            obj["event"][k[6:]] = v
        else:
            obj[k] = v
    return msgpack.packb(obj, use_bin_type=True)


@pytest.mark.parametrize(
    "extra",
    [{"_trace": "00-ab"}, {"event._hops": 3}, {"_trace": {"x": 1}, "event._hops": 3}],
)
def test_unknown_optional_parts_are_skipped_and_counted_unless_baseline(extra: dict) -> None:
    body = _event_body(**extra)
    d = decode_body("event", body)
    assert d.event is not None and d.event.id == "evt_1" and d.unknown == len(extra)
    with pytest.raises(ValueError):  # e5ef9b5 refuses any part it does not know
        decode_body("event", body, BASELINE)


@pytest.mark.parametrize("extra", [{"trace": "x"}, {"event.hops": 3}])
def test_unknown_parts_without_the_optional_mark_are_refused(extra: dict) -> None:
    with pytest.raises(ValueError):
        decode_body("event", _event_body(**extra))


def test_writer_section_is_written_only_when_asked_and_read_by_this_release() -> None:
    reg = {"t/t1/name": LWWRegister().set("x", actor="eu:1", stamp=Timestamp(1, 0))}
    plain = encode_body(registry=reg)
    marked = encode_body(registry=reg, writer="0.2.0")
    assert b"_writer" not in plain and decode_body("registry", plain, BASELINE).registry
    d = decode_body("registry", marked)
    assert d.writer == "0.2.0" and d.unknown == 0 and list(d.registry) == ["t/t1/name"]
    with pytest.raises(ValueError, match="map of registry"):
        decode_body("registry", marked, BASELINE)  # what e5ef9b5 says


def test_a_gated_registry_key_kind_is_refused_by_a_reader_without_its_feature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import re

    from regionsync.core import registry_keys

    monkeypatch.setattr(registry_keys, "KEY_FEATURES", [(re.compile(r"c/.*"), "optional-fields")])
    state = LWWRegister().set("x", actor="eu:1", stamp=Timestamp(1, 0))
    body = encode_body(registry={"c/eu": state})
    assert "c/eu" in decode_body("registry", body).registry
    with pytest.raises(ValueError, match="unknown key"):
        decode_body("registry", body, BASELINE)


def test_downgrade_strips_optional_parts_for_a_baseline_reader_only() -> None:
    from regionsync.core.records import downgrade

    body = _event_body(_trace="x", **{"event._hops": 3})
    old = downgrade(body, BASELINE)
    assert decode_body("event", old, BASELINE).event == decode_body("event", body).event
    assert downgrade(body, ALL) is body
    plain = _event_body()
    assert downgrade(plain, BASELINE) is plain  # nothing optional: the same bytes


def test_status_prints_versions_and_the_features_in_use() -> None:
    from regionsync.manage.status import features_line, status_rows

    cluster = {
        "region": "a", "registry_hash": "h" * 64, "custody": {},
        "capabilities": {"release": "0.2.0", "features": NEW, "effective": [],
                         "held_back_by": ["c"]},
        "peers": [{"region": "c", "connected": True, "records_behind": 0,
                   "seconds_since_contact": 1.0, "version": "", "features": []}],
    }  # fmt: skip
    rows = status_rows(cluster)
    assert [r["version"] for r in rows] == ["0.2.0", "<0.2.0"]
    assert features_line(cluster) == (
        f"features in use: baseline; held back by c (lacking {', '.join(NEW)})"
    )


def test_other_processes_of_the_region_bound_what_it_announces_and_writes() -> None:
    n = Negotiation(ALL, ("b",))
    n.announce("b", "0.2.0", NEW, 0)
    assert n.effective == ALL and n.region_reads == ALL
    n.set_local(BASELINE)  # a process that cannot know its siblings' release
    assert n.effective == BASELINE and n.region_reads == BASELINE
    n.set_local(ALL)
    assert n.effective == ALL
    n.set_local(None)
    assert n.view()["region_features"] == NEW


def test_release_is_the_package_version() -> None:
    """The Hello's version and the package's (``regionsync --version``, pyproject.toml)
    are one release."""
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    assert tomllib.loads(pyproject.read_text())["project"]["version"] == caps.RELEASE


def test_a_portal_key_is_read_only_with_portal_sessions() -> None:
    """``pk/<region>/secret`` (issue 43) is gated by ``portal-sessions``: a reader of
    0.1.0, or of this release restricted to what a peer without it reads, refuses it."""
    from regionsync.core.capabilities import ALL
    from regionsync.core.registry_keys import is_secret_key, key_feature

    assert key_feature("pk/eu-central-1/secret") == "portal-sessions"
    assert is_secret_key("pk/eu-central-1/secret")  # encrypted at rest
    assert key_feature("pn/acme") == "portal-sessions" and not is_secret_key("pn/acme")
    for key, value in (("pk/eu-central-1/secret", "ab" * 32), ("pn/acme", 1000)):
        state = LWWRegister().set(value, actor="eu:1", stamp=Timestamp(1, 0))
        body = encode_body(registry={key: state})
        assert key in decode_body("registry", body).registry
        for reads in (BASELINE, ALL - {"portal-sessions"}):
            with pytest.raises(ValueError, match="unknown key"):
                decode_body("registry", body, reads)
