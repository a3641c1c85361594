"""Issue 42: a registry loaded from the store keeps every state as its stored bytes and
decodes it at its first read (a restart over 1M keys decoded every state: 77 s, 1.8 GB).
Reads decode what they read, decoded cold keys stay within ``decoded_keys``, whatever
needs only bytes decodes nothing, and a row that does not decode is found, counted and
read as absent, never an exception of the reader."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crdt import DecodeError, LWWRegister, ORSet, PNCounter, Timestamp
from regionsync.core import registry_state
from regionsync.core.registry import Registry

A = "r:1"
FIELDS = {"url": "https://hooks.example.com/x", "secret": "whsec_" + "A" * 44}


def _registry(tenants: int, per: int) -> Registry:
    reg, stamp = Registry(), Timestamp(1, 0)
    for t in range(tenants):
        reg.apply(reg.create_tenant(f"t{t}", "T", 1, A, stamp))
        for e in range(per):
            eid = f"e{t}x{e}"
            reg.apply(reg.create_endpoint(eid, f"t{t}", FIELDS, ["a"], 1, A, stamp))
        reg.apply(reg.count(f"t{t}", "events_published", 3, A))
    return reg


def _rows(reg: Registry) -> dict[str, bytes]:
    return {k: v.to_bytes() for k, v in reg._states.items()}


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every ``crdt.decode`` the registry makes, from now on."""
    calls: list[bytes] = []
    real = registry_state.decode

    def counted(data: bytes) -> Any:
        calls.append(data)
        return real(data)

    monkeypatch.setattr(registry_state, "decode", counted)
    return calls


def _reference(states: dict[str, bytes]) -> tuple[str, str]:
    """(state_hash, digest) by their documented rules, from scratch, over stored bytes."""
    empties = {cls.empty().to_bytes() for cls in (LWWRegister, ORSet, PNCounter)}
    h, total = hashlib.sha256(), 0
    for key in sorted(states):
        data = states[key]
        if data in empties:
            continue
        raw = key.encode()
        framed = len(raw).to_bytes(4, "big") + raw + len(data).to_bytes(4, "big") + data
        h.update(framed)
        total += int.from_bytes(hashlib.sha256(framed).digest(), "big")
    digest = hashlib.sha256((total % (1 << 256)).to_bytes(32, "big")).hexdigest()
    return h.hexdigest(), digest


def test_a_loaded_store_decodes_none_of_its_states(monkeypatch: pytest.MonkeyPatch) -> None:
    eager = _registry(20, 5)
    rows = _rows(eager)
    calls = _counting(monkeypatch)
    reg = Registry.from_bytes(rows)
    assert calls == [] and reg.decodes == 0  # was: one decode per row (len(rows))
    assert len(reg) == len(rows)
    # what needs only bytes decodes nothing either
    assert (reg.state_hash(), reg.digest()) == _reference(rows)
    assert dict(reg.non_empty_bytes()) == {k: v.to_bytes() for k, v in eager.states().items()}
    assert reg.state_bytes("e/e3x1/url") == rows["e/e3x1/url"]
    assert sorted(reg.keys()) == sorted(rows)
    assert calls == []


def test_a_read_decodes_only_what_it_reads() -> None:
    reg = Registry.from_bytes(_rows(_registry(20, 5)))
    view = reg.endpoint("e7x2")
    assert view is not None and view.url == FIELDS["url"] and view.tenant == "t7"
    decoded = set(reg._hot) | set(reg._cold)
    assert decoded <= {"tenants", "t/t7/endpoints"} | {
        k for k in reg._raw if k.startswith("e/e7x2/")
    }
    assert reg.decodes == len(decoded)
    before = reg.decodes
    assert reg.endpoint("e7x2") is view and reg.tenant("t7") is not None
    own = [k for k in reg._raw if k.startswith("t/t7/") and k != "t/t7/endpoints"]
    assert reg.decodes == before + len(own)  # the tenant's fields and counters only


def test_the_decoded_part_stays_within_its_bound() -> None:
    eager = _registry(30, 4)
    rows = _rows(eager)
    reg = Registry.from_bytes(rows, decoded_keys=40)
    for key in sorted(rows):  # every key read, some twice
        assert reg.state(key) == eager.state(key)
        assert reg.get(key, type(eager._states[key])) == eager._states[key]
    for t in range(30):
        for e in range(4):
            assert reg.endpoint(f"e{t}x{e}") == eager.endpoint(f"e{t}x{e}")
    assert len(reg._cold) <= 40 and len(reg._views) <= reg.views_max
    assert set(reg._hot) == {"tenants"}  # hot keys stay decoded, whatever the bound
    reg.set_decoded_keys(5)
    assert len(reg._cold) == 5
    # a change of a key dropped back to bytes decodes it again and merges right
    stamp = Timestamp(9, 0)
    changed = reg.apply(reg.patch_endpoint("e0x0", {"paused": True}, (), (), 9, A, stamp))
    eager.apply(eager.patch_endpoint("e0x0", {"paused": True}, (), (), 9, A, stamp))
    assert changed and reg.endpoint("e0x0") == eager.endpoint("e0x0")
    assert (reg.state_hash(), reg.digest()) == (eager.state_hash(), eager.digest())


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["tenant", "endpoint", "patch", "delete_endpoint", "count", "delete"]),
        st.integers(0, 3),
        st.integers(0, 3),
        st.booleans(),
    ),
    max_size=25,
)


def _step(reg: Registry, op: tuple[str, int, int, bool], n: int) -> dict:
    kind, t, e, flag = op
    tid, eid, stamp = f"t{t}", f"e{e}", Timestamp(n, 0)
    actor = "r:1" if flag else "s:1"
    if kind == "tenant":
        return reg.create_tenant(tid, "T", n, actor, stamp)
    if kind == "endpoint":
        return reg.create_endpoint(eid, tid, FIELDS, ["a"] if flag else [], n, actor, stamp)
    if kind == "patch":
        return reg.patch_endpoint(eid, {"paused": flag}, ("b",), (), n, actor, stamp)
    if kind == "delete_endpoint":
        return reg.delete_endpoint(eid, tid)
    if kind == "count":
        return reg.count(tid, "backlog", 1 if flag else -1, actor)
    return reg.delete_tenant(tid)


@settings(max_examples=50, deadline=None, derandomize=True)
@given(_OPS, _OPS, st.integers(1, 8))
def test_lazy_and_eager_forms_agree(first: list, then: list, bound: int) -> None:
    """Over random registries: loaded lazily (a small bound), the digest, the hash, every
    state and the bytes equal the eager form's, before and after further changes."""
    eager = Registry()
    for n, op in enumerate(first):
        eager.apply(_step(eager, op, n))
    lazy = Registry.from_bytes(_rows(eager), decoded_keys=bound)
    for n, op in enumerate(then, start=len(first)):
        deltas = _step(eager, op, n)
        assert lazy.apply(deltas).keys() == eager.apply(deltas).keys()
        assert lazy.digest() == eager.digest()
    stored = {k: v.to_bytes() for k, v in eager._states.items()}
    assert (lazy.state_hash(), lazy.digest()) == (eager.state_hash(), eager.digest())
    assert (lazy.state_hash(), lazy.digest()) == _reference(stored)
    assert lazy.states() == eager.states()
    assert dict(lazy.non_empty_bytes()) == {k: v.to_bytes() for k, v in eager.states().items()}
    assert lazy.tenant_ids() == eager.tenant_ids()
    for e in range(4):
        assert lazy.endpoint(f"e{e}") == eager.endpoint(f"e{e}")


def test_a_row_framed_otherwise_fails_the_load() -> None:
    rows = _rows(_registry(2, 1))
    rows["e/e1x0/url"] = b"\x00not a state"
    with pytest.raises(DecodeError, match="e/e1x0/url"):
        Registry.from_bytes(rows)


def test_a_row_that_does_not_decode_reads_as_absent_until_merged() -> None:
    """Framed as a register but its body broken: found at its first read, counted and
    reported once, read as absent; the digest stays over the stored bytes (so it differs
    from the peers' and anti-entropy repairs it); a merge writes the key again."""
    eager = _registry(2, 2)
    rows = _rows(eager)
    good = rows["e/e1x0/url"]
    rows["e/e1x0/url"] = good[:6] + b"\x91\xc0"  # ["lww", 1, [nil]]
    reg = Registry.from_bytes(rows)
    found: list[tuple[str, str]] = []
    reg.on_decode_error = lambda key, reason: found.append((key, reason))
    assert reg.digest() == _reference(rows)[1] != eager.digest()
    view = reg.endpoint("e1x0")
    assert view is not None and view.url == ""  # the field reads as never written
    assert reg.state("e/e1x0/url") is None and reg.state_bytes("e/e1x0/url") is None
    assert reg.endpoint("e1x1") == eager.endpoint("e1x1")
    assert reg.get("e/e1x0/url", LWWRegister) == LWWRegister.empty()
    assert [k for k, _ in found] == ["e/e1x0/url"] and reg.decode_errors == 1
    assert reg.corrupt.keys() == {"e/e1x0/url"}
    # the peers' state, as a repair brings it, heals the key
    changed = reg.apply({"e/e1x0/url": eager.state("e/e1x0/url")})  # type: ignore[dict-item]
    assert "e/e1x0/url" in changed and not reg.corrupt
    assert (reg.state_hash(), reg.digest()) == (eager.state_hash(), eager.digest())
    assert reg.decode_errors == 1 and len(found) == 1


def test_a_row_of_another_type_than_its_key_is_corrupt() -> None:
    rows = _rows(_registry(1, 1))
    rows["e/e0x0/url"] = rows["t/t0/endpoints"]  # an OR-Set where a register belongs
    reg = Registry.from_bytes(rows)
    assert reg.endpoint("e0x0") is not None and reg.endpoint("e0x0").url == ""  # type: ignore[union-attr]
    assert "ORSet" in reg.corrupt["e/e0x0/url"]
