"""core.jsontext: the one JSON policy (issue 11 item 1) and core.numtext (item 2)."""

from __future__ import annotations

import json
import sys

import pytest

from regionsync.core.jsontext import MAX_DEPTH, decode_utf8, embed, loads, loads_members
from regionsync.core.numtext import INT64_MAX, parse_uint
from regionsync.errors import BadRequest, ClientError, Unprocessable


@pytest.mark.parametrize(
    ("text", "error", "code"),
    [
        ('{"v": NaN}', BadRequest, "bad_json"),
        ("[Infinity]", BadRequest, "bad_json"),
        ("[-Infinity]", BadRequest, "bad_json"),
        ("[1e400]", Unprocessable, "number_range"),
        ("[-1e309]", Unprocessable, "number_range"),
        ("[" + "9" * 5000 + "]", Unprocessable, "number_range"),
        # an integer beyond a double (trial of 2026-12-06: 401 digits were accepted)
        ("[1" + "0" * 400 + "]", Unprocessable, "number_range"),
        ("[-" + str(int(sys.float_info.max) + 1) + "]", Unprocessable, "number_range"),
        ('{"a": 1, "a": 1}', Unprocessable, "duplicate_key"),
        ('[{"a": {"b": 1, "b": 2}}]', Unprocessable, "duplicate_key"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), Unprocessable, "too_deep"),
        ('{"a":' * 965 + "1" + "}" * 965, Unprocessable, "too_deep"),
        ("[" * 100_000, Unprocessable, "too_deep"),
        ("{nope", BadRequest, "bad_json"),
        ("[1,]", BadRequest, "bad_json"),
    ],
)
def test_loads_refuses(text: str, error: type[ClientError], code: str) -> None:
    with pytest.raises(error) as exc:
        loads(text)
    assert exc.value.code == code


def test_depth_limit_is_inclusive_and_brackets_in_strings_do_not_count() -> None:
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert loads('["' + "[" * 500 + '"]') == ["[" * 500]
    assert loads('["\\"[[[", ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "]")


@pytest.mark.parametrize(
    "text", ['"\\ud83d"', '"\\udc00"', '["\\ud83d\\ud83d"]', '{"\\ud800": 1}', '"\\ude00\\ud83d"']
)
def test_lone_surrogates_accepted_or_refused_by_choice(text: str) -> None:
    assert loads(text) is not None
    with pytest.raises(BadRequest):
        loads(text, surrogates=False)


@pytest.mark.parametrize("text", ['"\\ud83d\\ude00"', '"\\\\ud83d"', '"\\u00e9"', '"plain"'])
def test_pairs_and_escaped_backslashes_are_not_lone(text: str) -> None:
    assert loads(text, surrogates=False) == json.loads(text)


def test_member_texts_are_exact() -> None:
    payload = '{"amount": 12345678901234567.89, "p": 1.10, "e": 1E2, "z": -0, "s": "\\ud83d"}'
    values, texts = loads_members(f'\n{{ "payload" :{payload} , "event_type":"a"}} ')
    assert texts == {"payload": payload, "event_type": '"a"'}
    assert values["payload"]["p"] == 1.1 and values["event_type"] == "a"


@pytest.mark.parametrize(
    ("text", "error", "field"),
    [
        ('{"a": 1, "a": 2}', Unprocessable, "a"),
        ('{"a": 1, "p": {"x": 1e400}}', Unprocessable, "p"),
        ('{"a": 1, "p": NaN}', BadRequest, "body"),
        ('{"a": 1, "p": [' + "9" * 5000 + "]}", Unprocessable, "p"),  # the strict rescan
        ('{"a": 1, "p": 1' + "0" * 309 + "}", Unprocessable, "p"),
        ('{"a": 1, "p": [' + "9" * 5000 + ",]}", Unprocessable, "p"),  # range before syntax
        ('{"a": 1, "p": [1,, ' + "9" * 5000 + "]}", BadRequest, "body"),  # syntax first
        ('{"a": [1], "p": ' + "[" * 65 + "]" * 65 + "}", Unprocessable, "p"),
        ('{"a": 1, "p": ' + "[" * 2000 + "]" * 2000 + "}", Unprocessable, "p"),
        ("[]", Unprocessable, "body"),
        ("{", BadRequest, "body"),
        ('{"a" 1}', BadRequest, "body"),
        ('{"a": 1,}', BadRequest, "body"),
        ('{"a": 1} 2', BadRequest, "body"),
        ('{"a": }', BadRequest, "body"),
    ],
)
def test_loads_members_names_the_member(text: str, error: type[ClientError], field: str) -> None:
    with pytest.raises(error) as exc:
        loads_members(text)
    assert exc.value.field == field


def test_integers_read_are_the_same_as_int() -> None:
    # every integer is checked for its range: the largest a double holds is accepted, and
    # so are long digit runs inside strings
    top = str(int(sys.float_info.max))
    for text in ("[-0, 0, 12345678901234567890, -98765432109876543210, 9" + "9" * 300 + "]",
                 f"[{top}, -{top}]", '["' + "9" * 5000 + '", 1]'):  # fmt: skip
        assert loads(text) == json.loads(text)
        assert loads_members('{"n": ' + text + "}")[0]["n"] == json.loads(text)


def test_embed_keeps_the_text_and_is_json() -> None:
    out = embed({"id": "e", "n": [1]}, "payload", ' {"p": 1.10}\n')
    assert '"payload":{"p": 1.10}' in out
    assert json.loads(out) == {"id": "e", "n": [1], "payload": {"p": 1.1}}
    assert json.loads(embed({}, "payload", "1")) == {"payload": 1}


def test_decode_utf8() -> None:
    assert decode_utf8("é".encode()) == "é"
    with pytest.raises(BadRequest) as exc:
        decode_utf8(b"\xff")
    assert exc.value.code == "bad_encoding"


@pytest.mark.parametrize("text", ["0", "1", "42", str(INT64_MAX), "0000000000000000001"])
def test_parse_uint_accepts_ascii_digits(text: str) -> None:
    assert parse_uint(text, "f") == int(text)


@pytest.mark.parametrize(
    "text",
    ["", "\u00b2", "1\u00b2", "\u0661", "\uff11", "-1", "+1", " 1", "1 ", "1_000", "0x1", "1.0",
     str(INT64_MAX + 1), "9" * 20, "9" * 5000],
)  # fmt: skip
def test_parse_uint_refuses(text: str) -> None:
    with pytest.raises(Unprocessable) as exc:
        parse_uint(text, "cursor", error=Unprocessable)
    assert exc.value.field == "cursor"


def test_parse_uint_range() -> None:
    assert parse_uint("5", "f", lo=5, hi=5) == 5
    with pytest.raises(BadRequest):
        parse_uint("6", "f", hi=5)


@pytest.mark.parametrize("text", ["9" * 20, "99999999999999999999", "0" * 20 + "1"])
def test_parse_uint_says_out_of_range_for_too_many_digits(text: str) -> None:
    """QA 2026-12-02: a 20-digit timestamp was refused as "not ASCII digits"."""
    with pytest.raises(BadRequest, match=r"in \[0, ") as exc:
        parse_uint(text, "webhook-timestamp")
    assert exc.value.field == "webhook-timestamp"
