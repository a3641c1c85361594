"""core.sending over its inputs: every outcome class, the guard's verdicts, the capture
bounds. The adapters' own tests (tests/delivery) run the same decisions over sockets."""

from __future__ import annotations

import pytest

from regionsync.core.retry import OutcomeKind
from regionsync.core.sending import (
    EXCERPT_BYTES,
    HEADERS_BYTES,
    MAX_TIMEOUT_S,
    DestinationRefused,
    Failure,
    ResolutionFailed,
    ResponseBudget,
    ResponseHeadTooLarge,
    SendError,
    Stage,
    attempt_deadline,
    failure_outcome,
    head_text,
    literal_destination,
    resolved_destination,
    response_outcome,
    timeout_outcome,
)
from regionsync.core.urlguard import parse_networks

NOW = 1_700_000_000.0  # wall seconds for HTTP-date Retry-After values
HTTP_DATE_PLUS_120 = "Tue, 14 Nov 2023 22:15:20 GMT"  # NOW + 120 s

# (status, Retry-After, kind, reason, retry_after_s)
RESPONSES = [
    (200, None, OutcomeKind.SUCCEEDED, None, None),
    (204, "30", OutcomeKind.SUCCEEDED, None, None),
    (299, None, OutcomeKind.SUCCEEDED, None, None),
    (100, None, OutcomeKind.FAILED, "http_100", None),
    (301, "30", OutcomeKind.FAILED, "redirect", None),  # never followed
    (308, None, OutcomeKind.FAILED, "redirect", None),
    (404, "30", OutcomeKind.FAILED, "http_404", None),  # Retry-After only for 429 and 5xx
    (410, None, OutcomeKind.FAILED, "http_410", None),
    (429, "30", OutcomeKind.FAILED, "http_429", 30.0),
    (429, None, OutcomeKind.FAILED, "http_429", None),
    (500, " 7 ", OutcomeKind.FAILED, "http_500", 7.0),
    (503, HTTP_DATE_PLUS_120, OutcomeKind.FAILED, "http_503", 120.0),
    (503, "Tue, 14 Nov 2023 20:00:00 GMT", OutcomeKind.FAILED, "http_503", 0.0),  # past
    (503, "Tue, 14 Nov 2023 22:15:20", OutcomeKind.FAILED, "http_503", None),  # no zone
    (503, "soon", OutcomeKind.FAILED, "http_503", None),
    (503, "-5", OutcomeKind.FAILED, "http_503", None),
]


@pytest.mark.parametrize(("status", "header", "kind", "reason", "delay"), RESPONSES)
def test_response_outcome(
    status: int, header: str | None, kind: OutcomeKind, reason: str | None, delay: float | None
) -> None:
    out = response_outcome(status, 12.5, b"a" * (EXCERPT_BYTES + 1), "x: y", header, NOW)
    assert (out.kind, out.status_code, out.reason) == (kind, status, reason)
    assert out.retry_after_s == delay
    assert (out.latency_ms, out.final, out.response_headers) == (12.5, False, "x: y")
    assert out.response_excerpt == "a" * EXCERPT_BYTES


def test_response_excerpt_is_text() -> None:
    out = response_outcome(200, 0.0, b"ok \xff", "", None, NOW)
    assert out.response_excerpt == "ok \ufffd"


# (failure, kind, final, excerpt of ValueError("boom"))
FAILURES = [
    (Failure.SSRF, OutcomeKind.FAILED, True, "boom"),
    (Failure.DNS, OutcomeKind.FAILED, False, "boom"),
    (Failure.CONNECT, OutcomeKind.FAILED, False, "boom"),
    (Failure.BAD_RESPONSE, OutcomeKind.FAILED, False, "boom"),
    (Failure.BAD_REQUEST, OutcomeKind.FAILED, True, "ValueError: boom"),
    (Failure.NETWORK, OutcomeKind.INDETERMINATE, False, "ValueError: boom"),
]


def test_failure_table_covers_every_failure() -> None:
    assert {row[0] for row in FAILURES} == set(Failure)


@pytest.mark.parametrize(("failure", "kind", "final", "excerpt"), FAILURES)
def test_failure_outcome(failure: Failure, kind: OutcomeKind, final: bool, excerpt: str) -> None:
    out = failure_outcome(failure, ValueError("boom"), 3.0)
    assert (out.kind, out.reason, out.final, out.response_excerpt) == (
        kind, failure.value, final, excerpt,
    )  # fmt: skip
    assert (out.status_code, out.latency_ms, out.retry_after_s) == (None, 3.0, None)
    assert failure_outcome(failure, "as given", 0.0).response_excerpt == "as given"


@pytest.mark.parametrize(
    ("error", "failure"),
    [
        (DestinationRefused("x"), Failure.SSRF),
        (ResolutionFailed("x"), Failure.DNS),
        (ResponseHeadTooLarge("x"), Failure.BAD_RESPONSE),
    ],
)
def test_send_errors_name_their_failure(error: SendError, failure: Failure) -> None:
    assert error.failure is failure


# (stage, kind, reason, final): a timeout before the request went out is a failure
TIMEOUTS = [
    (Stage.RESOLVING, OutcomeKind.FAILED, "dns"),
    (Stage.CONNECTING, OutcomeKind.FAILED, "connect"),
    (Stage.SENDING, OutcomeKind.INDETERMINATE, "timeout"),
    (Stage.UNKNOWN, OutcomeKind.INDETERMINATE, "timeout"),  # it may have gone out
]


def test_timeout_table_covers_every_stage() -> None:
    assert {row[0] for row in TIMEOUTS} == set(Stage)


@pytest.mark.parametrize(("stage", "kind", "reason"), TIMEOUTS)
def test_timeout_outcome(stage: Stage, kind: OutcomeKind, reason: str) -> None:
    out = timeout_outcome(stage, 5000.0)
    assert (out.kind, out.reason, out.final, out.latency_ms) == (kind, reason, False, 5000.0)


def test_attempt_deadline_is_capped() -> None:
    assert attempt_deadline(5.0) == 5.0
    assert attempt_deadline(3600.0) == MAX_TIMEOUT_S


# -- the destination guard ---------------------------------------------------------------

LOOPBACK = parse_networks(["127.0.0.0/8"])


@pytest.mark.parametrize(
    ("host", "allow", "pinned"),
    [
        ("hooks.example", (), None),  # a name: resolve it
        ("93.184.216.34", (), "93.184.216.34"),
        ("[2606:4700:4700::1111]", (), "2606:4700:4700::1111"),
        ("127.1", LOOPBACK, "127.0.0.1"),  # short form, allow-listed: canonical address
        ("0x7f000001", LOOPBACK, "127.0.0.1"),
    ],
)
def test_literal_destination_allows(host: str, allow: tuple, pinned: str | None) -> None:
    got = literal_destination(host, allow)
    assert (None if got is None else str(got)) == pinned


@pytest.mark.parametrize("host", ["127.0.0.1", "0x7f.1", "10.0.0.1", "[::1]", "1.2.3.999",
                                  "[fe80::1%25eth0]", "169.254.169.254"])  # fmt: skip
def test_literal_destination_refuses(host: str) -> None:
    with pytest.raises(DestinationRefused):
        literal_destination(host)


@pytest.mark.parametrize(
    ("found", "allow", "outcome"),
    [
        (["93.184.216.34", "2606:4700:4700::1111"], (), "93.184.216.34"),  # the first
        (["127.0.0.1"], LOOPBACK, "127.0.0.1"),
        (["127.0.0.1"], (), DestinationRefused),
        (["93.184.216.34", "10.0.0.1"], (), DestinationRefused),  # any bad one refuses
        (["::ffff:127.0.0.1"], (), DestinationRefused),
        (["not-an-address"], (), DestinationRefused),
        ([], (), ResolutionFailed),
    ],
)
def test_resolved_destination(found: list[str], allow: tuple, outcome: object) -> None:
    if isinstance(outcome, str):
        assert str(resolved_destination("hooks.example", found, allow)) == outcome
    else:
        with pytest.raises(outcome):  # type: ignore[call-overload]
            resolved_destination("hooks.example", found, allow)


# -- the capture bounds ------------------------------------------------------------------

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 99999\r\n\r\n"


def test_budget_keeps_the_body_bound_across_reads() -> None:
    budget = ResponseBudget(head_limit=100, body_limit=10)
    assert budget.want(4096) == 11  # head phase: at most body_limit + 1 per read
    assert budget.feed(HEAD[:20]) == 20
    assert budget.feed(HEAD[20:] + b"abc") == len(HEAD) - 20 + 3  # 3 body bytes kept
    assert (budget.want(4096), budget.spent) == (8, False)
    assert budget.feed(b"0123456789") == 8  # the rest is past the bound
    assert (budget.want(4096), budget.spent) == (0, True)
    assert budget.feed(b"more") == 0
    budget.reset()  # the next response
    assert (budget.want(4096), budget.spent) == (11, False)


def test_budget_cuts_body_bytes_that_came_with_the_head() -> None:
    budget = ResponseBudget(head_limit=100, body_limit=10)
    assert budget.feed(HEAD + b"x" * 50) == len(HEAD) + 11
    assert budget.spent


def test_budget_skips_interim_heads() -> None:
    budget = ResponseBudget(head_limit=60, body_limit=10)
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    assert budget.feed(interim + interim) == 2 * len(interim)  # each within head_limit
    assert budget.feed(HEAD + b"ab") == len(HEAD) + 2
    assert budget.want(100) == 9


@pytest.mark.parametrize(
    "chunks", [[b"x" * 101], [b"HTTP/1.1 200 OK\r\n" + b"h" * 90, b"\r\n\r\n"]]
)
def test_budget_refuses_a_head_over_the_limit(chunks: list[bytes]) -> None:
    budget = ResponseBudget(head_limit=100, body_limit=10)
    with pytest.raises(ResponseHeadTooLarge):
        for chunk in chunks:
            budget.feed(chunk)


def test_budget_defaults_and_head_text_bound() -> None:
    budget = ResponseBudget()
    assert (budget.head_limit, budget.body_limit) == (HEADERS_BYTES, EXCERPT_BYTES)
    raw = [(b"x-long", b"v" * HEADERS_BYTES), (b"x-more", b"w")]
    assert head_text(raw[1:]) == "x-more: w"
    assert len(head_text(raw)) == HEADERS_BYTES
