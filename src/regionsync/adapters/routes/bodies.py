"""The JSON request bodies, each declared once as a pydantic model that judges it at the
edge and documents it in ``/openapi.json`` (docs/api.md is generated from that).

A model's fields are the body's members: name, type, default, whether it is required,
and the constraints the document shows, read from the constants of the core rules. The
values are judged by those core rule functions (``rules``), never by pydantic's own
checks, so a 422 carries the detail and ``field`` of the rule, as the runtime operation
that applies the same rule would give them. The handler reads the body first (size
limit, content coding, JSON policy: ``common.read_object``), then ``Model.check(body)``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator
from pydantic.json_schema import SkipJsonSchema
from pydantic_core.core_schema import ValidationInfo, ValidatorFunctionWrapHandler

from ...core.envelope import PAYLOAD_FORMATS
from ...core.event_types import MAX_DESCRIPTION, NAME_RE
from ...core.matching import EVENT_PATTERN_RE
from ...core.registry import ID_RE
from ...core.signing import SECRET_PREFIX
from ...core.sources import ACK_POLICIES, KINDS, LOOKUPS, PRIORITIES, check_source_fields
from ...core.tokens import SCOPE_RE
from ...core.urlguard import URL_MAX
from ...core.validate import (
    DESCRIPTION_MAX,
    EVENT_ID_RE,
    EVENT_TYPE_RE,
    HEADER_NAME_RE,
    HEADER_VALUE_MAX,
    HEADER_VALUE_RE,
    MAX_EVENT_TYPES,
    MAX_HEADERS,
    MAX_IN_FLIGHT,
    RATE_LIMIT_PER_S,
    TENANT_MAX_IN_FLIGHT,
    TENANT_NAME_MAX,
    TENANT_RATE_PER_S,
    check_endpoint_fields,
    check_event_id,
    check_new_tenant,
    check_tenant_fields,
    endpoint_defaults,
)
from ...errors import Forbidden, Unprocessable
from ..openapi_docs import TIME_DOC
from .paging import parse_time

__all__ = [
    "Body",
    "EndpointIn",
    "EndpointPatch",
    "EventIn",
    "EventTypeIn",
    "EventTypePatch",
    "SampleIn",
    "SinceIn",
    "SourceIn",
    "TenantIn",
    "TenantPatch",
    "TokenIn",
]


def _whole(regex: Any, alternatives: bool = False) -> str:
    """The JSON Schema ``pattern`` of a core rule's ``fullmatch`` regex."""
    return f"^({regex.pattern})$" if alternatives else f"^{regex.pattern}$"


_ID = _whole(ID_RE)
_EVENT_TYPE = _whole(EVENT_TYPE_RE)
_EVENT_PATTERN = _whole(EVENT_PATTERN_RE, True)  # "*", "<prefix>.*" or an exact type
_SECRET = f"^{SECRET_PREFIX}"  # then base64 of 24..64 bytes (core.signing.parse_secret)
_LOOKUP = f"^(({'|'.join(LOOKUPS)}).*)?$"
_ENDPOINT = endpoint_defaults()


class Body(BaseModel):
    """A JSON request body. ``check`` judges one: a ``refused`` member first, then an
    unknown member (the first in name order), then a missing required one (in field
    order; unless ``members_required`` is False: its rules check that), then ``rules``
    on the members given (defaults filled in). Raises ``ClientError``s (422 naming the
    field), which the app turns into problem bodies."""

    model_config = ConfigDict(extra="forbid")  # documented: additionalProperties false
    refused: ClassVar[dict[str, str]] = {}  # member -> detail of its 422
    unknown_detail: ClassVar[str] = "unknown field"
    required_detail: ClassVar[str] = "is required"
    members_required: ClassVar[bool] = True

    _known: ClassVar[frozenset[str]] = frozenset()  # member names (set per model)
    _required: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        fields = {f.alias or name: f for name, f in cls.model_fields.items()}
        cls._known = frozenset(fields)
        cls._required = tuple(n for n, f in fields.items() if f.is_required())

    @model_validator(mode="wrap")
    @classmethod
    def _judge(cls, data: Any, _: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        for name, detail in cls.refused.items():
            if name in data:
                raise Unprocessable(detail, field=name)
        unknown = sorted(data.keys() - cls._known)
        if unknown:
            raise Unprocessable(cls.unknown_detail, field=unknown[0])
        for name in cls._required if cls.members_required else ():
            if name not in data:
                raise Unprocessable(cls.required_detail, field=name)
        body = cls.model_construct(**data)  # values as sent: the rules judge them
        body.rules(info.context or {})
        return body

    def rules(self, context: dict[str, Any]) -> None:
        """The core rules over the members' values (none: the runtime judges them)."""

    def given(self) -> dict[str, Any]:
        """The members the body sent, by their JSON names."""
        fields = type(self).model_fields
        return {fields[n].alias or n: getattr(self, n) for n in self.model_fields_set}

    @classmethod
    def check(cls, data: dict[str, Any], **context: Any) -> Self:
        """``data`` judged (``context``: what some ``rules`` need, e.g. the time)."""
        return cls.model_validate(data, context=context)

    @classmethod
    def openapi(cls) -> dict[str, Any]:
        """``openapi_extra`` documenting this body as the operation's request body."""
        schema = cls.model_json_schema()
        return {
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}
        }


_ACK = Literal[ACK_POLICIES]  # type: ignore[valid-type]


class TenantIn(Body):
    id: Annotated[str, Field(pattern=_ID)] | SkipJsonSchema[None] = Field(
        None, description="default: generated"
    )
    name: str = Field(min_length=1, max_length=TENANT_NAME_MAX)
    ack_policy: _ACK = "local"
    publish_rate_per_s: float | None = Field(
        None,
        ge=TENANT_RATE_PER_S[0],
        le=TENANT_RATE_PER_S[1],
        description="events/s per region; null: node default",
    )
    delivery_max_in_flight: int | None = Field(
        None,
        ge=TENANT_MAX_IN_FLIGHT[0],
        le=TENANT_MAX_IN_FLIGHT[1],
        description="attempts in flight per region; null: node default",
    )
    strict_event_types: bool = Field(
        False,
        description="only event types in the tenant's catalog may be published and subscribed to",
    )

    def rules(self, context: dict[str, Any]) -> None:
        check_new_tenant(self.id, self.name, self.ack_policy, self.publish_rate_per_s,
                         self.strict_event_types, self.delivery_max_in_flight)  # fmt: skip


# (The models' comments are not docstrings: a docstring would be the schema's description.)


class TenantPatch(Body):
    # context ``admin``: whether the caller holds an admin token (else setting an
    # ``admin_only`` member is 403 naming it, before any value is judged)

    admin_only: ClassVar[tuple[str, ...]] = ("ack_policy", "publish_rate_per_s")

    name: str | None = Field(None, min_length=1, max_length=TENANT_NAME_MAX)
    strict_event_types: bool | None = None
    ack_policy: _ACK | None = Field(None, description="admin only")
    publish_rate_per_s: float | None = Field(
        None,
        ge=TENANT_RATE_PER_S[0],
        le=TENANT_RATE_PER_S[1],
        description="admin only; null: node default",
    )

    def rules(self, context: dict[str, Any]) -> None:
        given = self.given()
        if not context.get("admin"):
            for name in self.admin_only:
                if name in given:
                    raise Forbidden(f"setting {name} takes an admin token", field=name)
        check_tenant_fields(given)


class EventTypeIn(Body):
    # values judged by the runtime (core.event_types.check_event_type_fields, on an
    # offload thread when the body carries a schema)

    name: str = Field(pattern=_whole(NAME_RE))
    description: str = Field("", max_length=MAX_DESCRIPTION)
    schema_: dict[str, Any] | bool | None = Field(
        None, alias="schema", description="JSON Schema (Draft 2020-12) of the payload"
    )
    deprecated: bool = False


class EventTypePatch(Body):
    # values judged by the runtime, as for EventTypeIn

    description: str | None = Field(None, max_length=MAX_DESCRIPTION)
    schema_: dict[str, Any] | bool | None = Field(
        None, alias="schema", description="JSON Schema (Draft 2020-12); null: none"
    )
    deprecated: bool | None = None


_HEADERS = Field(
    {},
    max_length=MAX_HEADERS,
    description="extra request headers: RFC 9110 token names (not reserved ones such as "
    "webhook-*, content-type, host, user-agent; unique ignoring case), visible ASCII values",
    json_schema_extra={
        "propertyNames": {"pattern": _whole(HEADER_NAME_RE)},
        "additionalProperties": {
            "type": "string",
            "maxLength": HEADER_VALUE_MAX,
            "pattern": _whole(HEADER_VALUE_RE),
        },
    },
)
_URL_DOC = (
    "http(s) URL resolving to a public address (or one in delivery.allow_private_networks); "
    "no credentials, no fragment"
)
_TYPES = list[Annotated[str, Field(pattern=_EVENT_PATTERN)]]
_FORMAT = Literal[PAYLOAD_FORMATS]  # type: ignore[valid-type]
_RATE = Field(ge=RATE_LIMIT_PER_S[0], le=RATE_LIMIT_PER_S[1])
_IN_FLIGHT = Field(ge=MAX_IN_FLIGHT[0], le=MAX_IN_FLIGHT[1])


class EndpointIn(Body):
    # endpoint ids are generated (registry keys are global: an id a caller chose could
    # be chosen by another tenant in another region at the same time)

    refused = {"id": "endpoint ids are generated by the server (globally unique); leave id out"}

    url: str = Field(max_length=URL_MAX, description=_URL_DOC)
    event_types: _TYPES = Field(
        [], max_length=MAX_EVENT_TYPES, description="exact types, 'prefix.*' or '*'; empty: "
        "every type"
    )  # fmt: skip
    filter: dict[str, Any] | None = Field(None, description="payload filter ($eq, $in, ...)")
    secret: Annotated[str, Field(pattern=_SECRET)] | SkipJsonSchema[None] = Field(
        None, description="whsec_ + base64 of 24..64 bytes; default: generated"
    )
    description: Annotated[str, Field(max_length=DESCRIPTION_MAX)] | None = _ENDPOINT["description"]
    rate_limit_per_s: Annotated[float, _RATE] = _ENDPOINT["rate_limit_per_s"]
    max_in_flight: Annotated[int, _IN_FLIGHT] = _ENDPOINT["max_in_flight"]
    headers: dict[str, str] | None = _HEADERS
    paused: bool = _ENDPOINT["paused"]
    payload_format: _FORMAT = Field(
        PAYLOAD_FORMATS[0],
        description="raw: the payload as sent; standard-webhooks: {type, timestamp, data}",
    )

    def rules(self, context: dict[str, Any]) -> None:
        check_endpoint_fields(self.given())


class EndpointPatch(Body):
    url: Annotated[str, Field(max_length=URL_MAX)] | SkipJsonSchema[None] = None
    event_types: Annotated[_TYPES, Field(max_length=MAX_EVENT_TYPES)] | SkipJsonSchema[None] = (
        Field(None, description="replaces the whole set")
    )
    event_types_add: _TYPES = Field([], max_length=MAX_EVENT_TYPES, description="OR-Set add")
    event_types_remove: _TYPES = Field(
        [], max_length=MAX_EVENT_TYPES, description="OR-Set remove (not a type also added)"
    )
    filter: dict[str, Any] | None = None
    secret: Annotated[str, Field(pattern=_SECRET)] | None = Field(
        None, description="new secret (null: generate)"
    )
    description: Annotated[str, Field(max_length=DESCRIPTION_MAX)] | None = None
    rate_limit_per_s: Annotated[float, _RATE] | SkipJsonSchema[None] = None
    max_in_flight: Annotated[int, _IN_FLIGHT] | SkipJsonSchema[None] = None
    headers: dict[str, str] | None = _HEADERS
    paused: bool | SkipJsonSchema[None] = None
    disabled: bool | SkipJsonSchema[None] = Field(
        None, description="false re-enables a disabled endpoint"
    )
    payload_format: _FORMAT | SkipJsonSchema[None] = None

    def rules(self, context: dict[str, Any]) -> None:
        given = self.given()
        if given.get("secret", "") is None:  # a generated one: nothing to judge
            del given["secret"]
        check_endpoint_fields(given)


class EventIn(Body):
    # values judged by the runtime (the type after the Idempotency-Key, runtime.ingest)

    event_type: str = Field(pattern=_EVENT_TYPE)
    payload: Any = Field(description="any JSON (RFC 8259, at most 64 levels deep)")
    id: Annotated[str, Field(pattern=_whole(EVENT_ID_RE))] | SkipJsonSchema[None] = Field(
        None,
        description="the event id, chosen by the client (a ULID); a repeat with the same id "
        "answers the event accepted first, in any region (README, Client-chosen event ids)",
    )

    def rules(self, context: dict[str, Any]) -> None:
        if "id" in self.model_fields_set:
            check_event_id(self.id)


class SourceIn(Body):
    """An inbound source; its id is generated (an ``id`` member is 422)."""

    # the id is the public /in/{source} URL, global across tenants; values, and which
    # members are required, are judged by core.sources.check_source_fields (after the
    # settings another kind reads)

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            # core.sources: a standard-webhooks source's secret is a whsec_ secret
            "if": {"properties": {"kind": {"const": "standard-webhooks"}}},
            "then": {"properties": {"secret": {"pattern": _SECRET}}},
        },
    )
    refused = {"id": "source ids are generated by the server; leave id out"}
    members_required = False

    tenant: str = Field(pattern=_ID)
    kind: Literal[KINDS]  # type: ignore[valid-type]
    secret: str = Field(min_length=1, max_length=512)
    priority: Literal[PRIORITIES] | SkipJsonSchema[None] = None  # type: ignore[valid-type]
    ack_policy: _ACK = "local"
    header: str = Field("x-signature", max_length=256)
    algorithm: Literal["sha1", "sha256", "sha512"] = "sha256"
    encoding: Literal["hex", "base64"] = "hex"
    prefix: str = Field("", max_length=256)
    event_type_from: str = Field(
        "payload:type", max_length=256, pattern=_LOOKUP, description="header:<name> or "
        "payload:<path>"
    )  # fmt: skip
    id_from: str = Field(
        "", max_length=256, pattern=_LOOKUP, description="header:<name> or payload:<path>; "
        "empty: body hash"
    )  # fmt: skip
    default_event_type: str = Field(
        "webhook",
        pattern=_EVENT_TYPE,
        description="standard-webhooks, hmac: the event type of a verified request whose "
        "event_type_from finds no usable type (never refused for it)",
    )

    def rules(self, context: dict[str, Any]) -> None:
        check_source_fields(self.given())


class TokenIn(Body):
    # the scope, the name and an expiry in the future are judged by runtime.tokens;
    # expires_ms is the parsed expires_at

    scope: str = Field(
        pattern=_whole(SCOPE_RE, True),
        description="admin, or tenant:<id>:manage|publish|read (read: GET only)",
    )
    name: str = Field(min_length=1, max_length=128)
    expires_at: str | None = Field(
        None, json_schema_extra={"format": "date-time"},
        description=f"{TIME_DOC}, in the future; null: never",
    )  # fmt: skip
    _ms: int | None = PrivateAttr(None)

    def rules(self, context: dict[str, Any]) -> None:
        if self.expires_at is not None:
            if not isinstance(self.expires_at, str):
                raise Unprocessable("must be an RFC 3339 time or null", field="expires_at")
            self._ms = parse_time(self.expires_at, "expires_at")

    @property
    def expires_ms(self) -> int | None:
        return self._ms


class SinceIn(Body):
    # of a recovery job: context ``now_ms`` (nothing after it could match); since_ms is
    # the parsed time

    required_detail = "is required: an RFC 3339 time"

    since: str = Field(json_schema_extra={"format": "date-time"}, description=TIME_DOC)
    _ms: int = PrivateAttr(0)

    def rules(self, context: dict[str, Any]) -> None:
        if not isinstance(self.since, str):
            raise Unprocessable("must be an RFC 3339 time (a JSON string)", field="since")
        self._ms = parse_time(self.since, "since")
        if self._ms > context["now_ms"]:
            raise Unprocessable("must not be in the future", field="since")

    @property
    def since_ms(self) -> int:
        return self._ms


class SampleIn(Body):
    # a sample payload for an endpoint's filter

    unknown_detail = 'unknown field (body must be {"payload": ...})'
    required_detail = 'is required (body must be {"payload": ...})'

    payload: Any
