"""The management CLI's body options (``manage/fields.py``) against the API's declared
bodies (``adapters/routes/bodies.py``): every option names a member of its body, every
member has an option (or is left out here on purpose), every choice list is the body's."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel

from regionsync.adapters.routes import bodies
from regionsync.manage import fields

# (table, body model, members the command leaves out on purpose: why)
CASES = [
    (fields.ENDPOINT_CREATE, bodies.EndpointIn, {
        "destination": "--destination-type and the broker options (manage/endpoints.py)",
    }),
    (fields.ENDPOINT_UPDATE, bodies.EndpointPatch, {
        "destination": "--destination-type and the broker options (manage/endpoints.py)",
        "secret": "endpoints rotate-secret",
        "paused": "endpoints pause / resume",
    }),
    (fields.SOURCE_CREATE, bodies.SourceIn, {}),
    (fields.EVENT_TYPE_CREATE, bodies.EventTypeIn, {}),
    (fields.EVENT_TYPE_UPDATE, bodies.EventTypePatch, {}),
    (fields.TENANT_CREATE, bodies.TenantIn, {}),
]  # fmt: skip


def _members(model: type[BaseModel]) -> dict[str, typing.Any]:
    return {f.alias or name: f for name, f in model.model_fields.items()}


def _literal_args(annotation: typing.Any) -> set[str]:
    """The strings of every Literal inside ``annotation`` (through Optional/Annotated)."""
    if typing.get_origin(annotation) is typing.Literal:
        return set(typing.get_args(annotation))
    found: set[str] = set()
    for arg in typing.get_args(annotation):
        found |= _literal_args(arg)
    return found


@pytest.mark.parametrize(("table", "model", "left_out"), CASES)
def test_options_match_the_declared_body(table: tuple, model: type, left_out: dict) -> None:
    members = _members(model)
    named = {m.name for m in table}
    assert named <= set(members), named - set(members)
    assert set(members) - named == set(left_out), set(members) - named
    for m in table:
        declared = _literal_args(members[m.name].annotation)
        assert set(m.choices) == declared, (m.name, m.choices, declared)
        # a source's rules judge which members are required, after the kind's defaults;
        # the three without a default are required on the command line
        assert m.required == (m.name in model._required), m.name
    dests = [m.dest for m in table]
    assert len(dests) == len(set(dests))


def test_every_management_command_takes_json_after_it() -> None:
    from regionsync.cli import main

    management = set(main.commands) - {"serve", "demo", "certs", "sim"}

    def leaves(cmd, path):  # noqa: ANN001, ANN202
        subs = getattr(cmd, "commands", None)
        if subs is None:
            yield path, cmd
        else:
            for name, sub in subs.items():
                yield from leaves(sub, (*path, name))

    found = [p for n in sorted(management) for p, c in leaves(main.commands[n], (n,))
             if not any("--json" in o.opts for o in c.params)]  # fmt: skip
    assert found == [], found
    assert {"publish", "event-types", "attempts", "audit", "jobs"} <= management
