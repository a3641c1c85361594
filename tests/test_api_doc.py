"""docs/api.md is what ``python -m regionsync.docs`` generates from /openapi.json."""

from __future__ import annotations

from regionsync.docs import DOC_PATH, openapi_document, render_markdown


def test_committed_api_reference_is_up_to_date() -> None:
    doc = openapi_document()
    text = render_markdown(doc)
    assert DOC_PATH.read_text() == text, "docs/api.md is stale: run python -m regionsync.docs"
    for route in ("`GET /v1/tenants`", "`GET /v1/tenants/{tenant}/events`", "bearerAuth"):
        assert route in text


def test_help_and_unknown_flags_never_write(capsys, monkeypatch, tmp_path) -> None:  # noqa: ANN001
    import pytest

    from regionsync import docs

    target = tmp_path / "api.md"
    monkeypatch.setattr(docs, "DOC_PATH", target)
    for argv, code in ((["--help"], 0), (["-h"], 0), (["--bogus"], 2), (["x"], 2),
                       (["--check", "--json"], 2)):  # fmt: skip
        with pytest.raises(SystemExit) as done:
            docs.main(argv)
        assert done.value.code == code, argv
        assert not target.exists(), argv
    out = capsys.readouterr()
    assert "usage: python -m regionsync.docs" in out.out and "--check" in out.out
    assert "unrecognized arguments: --bogus" in out.err
    assert docs.main(["--check"]) == 1 and not target.exists()
    assert docs.main([]) == 0 and target.read_text() == DOC_PATH.read_text()
    assert docs.main(["--check"]) == 0
