"""Node configuration (``node.toml``, README.md "Running a node").

Every setting has a default that works for a single node on loopback. Precedence: values
passed in code, then environment variables ``REGIONSYNC_<SETTING>`` (nested with ``__``,
e.g. ``REGIONSYNC_DELIVERY__TIMEOUT_S``), then the TOML file. Validation errors raise
one ``pydantic.ValidationError`` naming every setting at fault at once (``describe_errors``
words it, one line each).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from .core.registry_state import DEFAULT_DECODED_KEYS
from .core.wire import ENVELOPE_BYTES, RECORD_OVERHEAD_BYTES, message_budget

__all__ = [
    "REGION_PATTERN",
    "DeliverySettings",
    "HttpSettings",
    "Peer",
    "SecretsSettings",
    "Settings",
    "OperationalWebhookSettings",
    "RegistrySettings",
    "TlsSettings",
    "Token",
    "TracingSettings",
    "describe_errors",
    "load_settings",
]

_REGION = r"^[a-z0-9][a-z0-9\-]{0,62}$"
REGION_PATTERN = _REGION  # a region name; `regionsync certs` checks --region with it too


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Peer(_Section):
    region: str = Field(pattern=_REGION)
    address: str  # host:port of the peer's gRPC listener
    # base URL of the peer's HTTP API (optional): /v1/cluster shows it, so `regionsync
    # status` and the console can reach every region from one node's answer
    http_url: str | None = Field(None, pattern=r"^https?://[^\s/]+$")


class DeliverySettings(_Section):
    allow_private_networks: list[str] = []  # CIDRs exempt from the SSRF guard
    timeout_s: float = Field(15.0, gt=0, le=60)  # total deadline of one attempt
    # delays before the 2nd, 3rd, ... attempt: at least one, each > 0 seconds
    retry_schedule_s: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        [5, 300, 1800, 7200, 18000, 36000, 36000], min_length=1
    )
    concurrency: int = Field(64, ge=1)  # attempts in flight per node
    # attempts in flight per tenant per node (a tenant's delivery_max_in_flight overrides
    # it): one tenant's flood leaves the rest of `concurrency` to the others
    tenant_max_in_flight: int = Field(32, ge=1)
    poll_interval_s: float = Field(1.0, gt=0)  # longest sleep of an idle worker
    failure_threshold: int = Field(5, ge=1)  # consecutive failures: active -> failing
    disable_after_s: float = Field(5 * 24 * 3600, gt=0)  # failing this long -> disabled
    probe_initial_s: float = Field(60.0, gt=0)  # failing: first probe backoff, doubling
    probe_max_s: float = Field(24 * 3600.0, gt=0)
    secret_overlap_s: float = Field(24 * 3600.0, ge=0)  # old secret still signs this long
    attempt_retention_s: float = Field(35 * 24 * 3600.0, gt=0)  # attempt log kept this long
    # events (with their payloads, deliveries and attempts) received longer ago than this,
    # once no delivery of theirs is pending, are deleted in this region (runtime/retention.py);
    # 0: kept forever
    event_retention_s: float = Field(90 * 24 * 3600.0, ge=0)
    # tenant id -> its own event retention (seconds; 0: forever), instead of the above
    event_retention_by_tenant_s: dict[
        Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")], Annotated[float, Field(ge=0)]
    ] = {}
    # several processes on one PostgreSQL database (issue 16): a due delivery claimed by a
    # process is not claimed by another for this long unless its outcome was recorded
    # (a claim of a process that died is taken over after it); must exceed timeout_s
    # plus the clock skew between the processes' machines
    claim_lease_s: float = Field(60.0, gt=0)
    # attempts made by a child process (adapters/process_sender.py: the HTTP client runs
    # beside the node's event loop, on another core); false: in the node's own loop
    sender_process: bool = True

    @field_validator("allow_private_networks")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        for c in v:
            ipaddress.ip_network(c, strict=False)
        return v


class ReplicationSettings(_Section):
    batch_records: int = Field(256, ge=1, le=10_000)  # records per Batch message
    linger_ms: float = Field(2.0, ge=0, le=100)  # wait this long to fill a partial batch
    window_batches: int = Field(8, ge=1)  # unacked batches in flight per peer
    # a remote HLC stamp further ahead of (corrected) physical time is applied, but moves
    # this node's HLC no further than this (crdt/_hlc.py clamp)
    max_drift_ms: int = Field(60_000, ge=0)
    # this node's clock further than this from the cluster's reference (the median of the
    # peers' clocks, core/clock_offset.py): "suspect"; stamps then use the reference
    clock_suspect_ms: int = Field(2_000, ge=0)
    reconnect_min_s: float = Field(0.1, gt=0)
    reconnect_max_s: float = Field(10.0, gt=0)
    call_timeout_s: float = Field(10.0, gt=0)  # deadline for a hello or an ack
    failover_after_s: float = Field(60.0, gt=0)  # unheard this long: custody moves on
    custody_interval_s: float = Field(5.0, gt=0)  # how often custody (and jobs) are re-decided
    # a region that heard no peer for failover_after_s - fence_margin_s starts no attempt
    # (core/fence.py); keep it at least delivery.timeout_s + heartbeat_s so its attempts
    # end before a survivor adopts. Default (None): failover_after_s / 2
    fence_margin_s: float | None = Field(None, gt=0)
    # a fence held this long with still no peer lapses (the region may be the last one
    # alive): it delivers its own again. Default (None): failover_after_s
    fence_hold_s: float | None = Field(None, gt=0)
    # an idle link sends an empty Batch this often (the peer acks it): contact stays fresh;
    # must stay well below failover_after_s, or idle peers would look dead
    heartbeat_s: float = Field(10.0, gt=0, le=3600)
    # a pruned actor's retired counter entries (~retired:<actor>) are compacted into the
    # shared sink this long after it was pruned here: every process of the region has
    # read the pruned rows by then (runtime/pruning.py; Akka's pruning marker TTL); on
    # PostgreSQL at least MIN_PG_COMPACT_S (its half is the store's fence)
    retired_compact_s: float = Field(600.0, ge=0)
    # every sent Batch must be acked this soon, else the link is torn down and redialed
    ack_timeout_s: float = Field(10.0, gt=0)
    # idle links compare state-tree root hashes this often (at equal version vectors);
    # a mismatch runs an anti-entropy pass (issue 12 item 3)
    digest_interval_s: float = Field(30.0, gt=0)
    # a restarted node holds its local writes until every peer's Hello showed it has not
    # seen more of this node's actor than the store holds (a restored old copy), at most
    # this long; then, if some peer was not heard, it takes a new incarnation
    actor_check_s: float = Field(5.0, ge=0)
    # log truncation: every truncate_interval_s, records every configured peer acked are
    # deleted (a peer never heard from blocks it), unless the log holds more than
    # max_log_records: then the oldest go anyway and lagging peers get anti-entropy
    truncate_interval_s: float = Field(30.0, gt=0)
    max_log_records: int = Field(1_000_000, ge=1)
    tree_depth: int = Field(4, ge=1, le=8)  # anti-entropy hash tree: 16**depth leaf buckets
    leaf_items: int = Field(16, ge=1)  # a differing bucket this small is sent, not split
    state_chunk_bytes: int = Field(512 * 1024, ge=1024)  # StateChunk size bound
    # a snapshot or repair stream sends at most this many bytes of state per second, so
    # the serving side keeps answering while a region joins (issue 42); 0: unbounded
    repair_bytes_per_s: int = Field(16 * 1024 * 1024, ge=0)
    # gRPC max send/receive message length on both ends; Batches and StateChunks are cut
    # below it (core/wire.py) and ingest.max_payload_bytes must leave a record room in it
    max_message_bytes: int = Field(64 * 1024 * 1024, ge=256 * 1024, le=2**31 - 1)

    @property
    def fence_margin(self) -> float:
        """fence_margin_s, or its default failover_after_s / 2."""
        m = self.fence_margin_s
        return self.failover_after_s / 2 if m is None else m

    @property
    def fence_hold(self) -> float:
        """fence_hold_s, or its default failover_after_s."""
        h = self.fence_hold_s
        return self.failover_after_s if h is None else h

    # several processes on one PostgreSQL database (issue 16): how often a process tries
    # for (or confirms) the region's replication role, and how often it reads the log
    # records of the region's other processes when no NOTIFY (sent by every commit that
    # writes the log) woke it: a safety net, capped at retired_compact_s / 8 (a cap of
    # 125 ms or more: retired_compact_s is at least MIN_PG_COMPACT_S there; runtime/cohort)
    leader_poll_s: float = Field(1.0, gt=0, le=60)
    follow_interval_ms: float = Field(1000.0, gt=0, le=10_000)
    # the cluster's feature set held below what this node reads (core.capabilities) this
    # long: one cluster.upgrade_held_back operational event naming the regions behind
    upgrade_held_back_after_s: float = Field(3600.0, gt=0)


class RegistrySettings(_Section):
    # registry states of cold keys kept decoded in memory (an LRU); every other state is
    # held as its stored bytes and decoded when read (core/registry_state.py, issue 42):
    # about 1.1 KB a decoded key against 0.1 KB as bytes
    decoded_cache_keys: int = Field(DEFAULT_DECODED_KEYS, ge=1000)


class IngestSettings(_Section):
    max_payload_bytes: int = Field(256 * 1024, ge=1024)
    idempotency_ttl_s: float = Field(24 * 3600, gt=0)  # Idempotency-Key lifetime
    # Idempotency-Keys live in the store; memory caches at most this many (LRU, issue 17)
    idempotency_cache_entries: int = Field(100_000, ge=1024)
    # a Bloom filter of the keys the store may hold, sized for this many keys per TTL
    # (about 2.4 MB per million: two generations): a new key skips the store read; 0: off
    idempotency_filter_entries: int = Field(2_000_000, ge=0, le=1_000_000_000)
    backlog_capacity: int = Field(100_000, ge=1)  # undelivered + queued writes at S = 1
    # the most of backlog_capacity one tenant's undelivered deliveries in this region may
    # take: at it, the tenant's publishes and inbound requests get 429 (the others' do
    # not), its recover/replay jobs wait, and retrying its finished deliveries gets 429;
    # 1: no share (one tenant may take the whole capacity)
    tenant_backlog_share: float = Field(0.5, gt=0, le=1)
    pressure_tau_s: float = Field(2.0, ge=0)  # smoothing time constant of S
    # event type pattern (exact, "prefix.*" or "*") -> critical | high | normal | low
    event_type_priorities: dict[str, Literal["critical", "high", "normal", "low"]] = {}
    one_remote_timeout_s: float = Field(5.0, gt=0)  # ack policy one-remote: wait this long
    one_remote_fallback_local: bool = False  # on timeout answer 202 anyway (else 503)
    # group commit: wait this long for company while commits are small (fewer than 8
    # writes in the previous one and queued; runtime/commit.py), 0: never wait; the
    # delivery outcome recorder waits the same for outcomes (runtime/outcomes.py)
    commit_linger_ms: float = Field(2.0, ge=0, le=50)
    commit_max_batches: int = Field(512, ge=1)  # group commit: writes per transaction
    # usage counter moves (publishes, outcomes) go into one own registry record at most
    # this often (in between they wait in the store, in the transactions of their
    # events; runtime/writepath.py); 0: with every commit (always so on PostgreSQL)
    usage_record_ms: float = Field(1000.0, ge=0, le=60_000)
    # publish API: events per second per tenant in this region (token bucket, burst =
    # max(1, rate)); 0 = unlimited. A tenant's publish_rate_per_s overrides it.
    tenant_rate_per_s: float = Field(0.0, ge=0, le=1_000_000)
    # while other tenants publish on this node, one tenant's publishes between admission
    # and durability (its share of the group commits); more wait for one of its own to
    # finish (core/ingest_share.py; a tenant alone is not held back); 0: no share
    tenant_publishes_in_flight: int = Field(4, ge=0, le=100_000)
    # a payload's validation against its event type's schema takes at most this many
    # steps (core.event_types.validate_payload; about 0.1 s to 1 s of one core), else 422
    schema_max_steps: int = Field(100_000, ge=100, le=100_000_000)
    # schema checks and validations, and filters applied to payloads, run on these
    # threads (runtime/offload.py), off the event loop and the write lock; a tenant one
    # at a time, with at most offload_queue_per_tenant waiting (else 429 cpu_busy)
    offload_threads: int = Field(2, ge=1, le=64)
    offload_queue_per_tenant: int = Field(64, ge=1, le=100_000)


class HttpSettings(_Section):
    """The HTTP server's limits against slow and malformed clients (adapters/http_server.py)."""

    # a request must arrive whole (head and body) within this many seconds of its first
    # byte (of the connection's accept for the first request), else 408 and close
    read_timeout_s: float = Field(30.0, gt=0, le=3600)
    max_header_bytes: int = Field(16 * 1024, ge=1024)  # request line + headers, else 431
    # open connections served at once; a request on one beyond it gets 503 and close.
    # Keep it below the open-file limit (ulimit -n) minus delivery's connections.
    max_connections: int = Field(512, ge=1)
    keep_alive_s: float = Field(5.0, gt=0)  # an idle keep-alive connection is closed after


class TracingSettings(_Section):
    """OpenTelemetry traces, off unless this section is present; needs the ``otel`` extra
    (``pip install 'regionsync[otel]'``)."""

    otlp_endpoint: str  # OTLP/HTTP traces URL, e.g. http://collector:4318/v1/traces
    service_name: str = "regionsync"  # resource attribute service.name
    sample_ratio: float = Field(1.0, ge=0, le=1)  # parent-based ratio sampling


class OperationalWebhookSettings(_Section):
    """Operational webhooks (endpoint failing/disabled/recovered, delivery dead, region
    unreachable/reachable, backpressure entered/left): published as events of ``tenant``,
    whose endpoints (created by an admin through the API) receive them; off when unset."""

    tenant: str | None = Field(None, pattern=r"^[A-Za-z0-9_.\-]{1,64}$")


class TlsSettings(_Section):
    cert: Path
    key: Path
    ca: Path


class SecretsSettings(_Section):
    """The node key ring that encrypts signing secrets at rest (adapters/secretbox.py).

    ``keys`` (normally from the environment, ``REGIONSYNC_SECRETS__KEYS``) wins over
    ``key_file``; both hold entries ``<key id>:<base64 of 32 random bytes>`` (commas or
    lines), the first one current. With neither, the node creates
    ``<data_dir>/<region>.key`` (mode 0600) on first start. Rotation: put a new key first
    and keep the old ones after it (rows stay readable; new writes use the new key).
    """

    key_file: Path | None = None  # relative: to the configuration file
    keys: str | None = None


class Token(_Section):
    token: str = Field(min_length=16)  # at least 16 characters (README, "Running a node")
    # admin | tenant:<id>:manage | tenant:<id>:publish | tenant:<id>:read (GET only)
    scope: str = Field(pattern=r"^(admin|tenant:[A-Za-z0-9_.\-]{1,64}:(manage|publish|read))$")


class Settings(BaseSettings):
    """One node's settings. Durations in seconds (``*_s``) or milliseconds (``*_ms``)."""

    model_config = SettingsConfigDict(
        env_prefix="REGIONSYNC_", env_nested_delimiter="__", extra="forbid"
    )

    region: str = Field("local", pattern=_REGION)
    data_dir: Path = Path("./regionsync-data")
    # "sqlite" (one file <data_dir>/<region>.db, the default) or a PostgreSQL URL
    # "postgresql://user@host:5432/db" (one database per region; adapters/postgres_store.py)
    store: str = "sqlite"
    store_pool_max: int = Field(10, ge=1, le=1000)  # PostgreSQL connections per process
    http_listen: str = "127.0.0.1:8080"
    grpc_listen: str = "127.0.0.1:7070"
    peers: list[Peer] = []
    tokens: list[Token] = []
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"  # json: one object per line (wiring.py)
    # /metrics requires "Authorization: Bearer <metrics_token>" when set (else it is open)
    metrics_token: str | None = Field(None, min_length=16)
    tracing: TracingSettings | None = None
    delivery: DeliverySettings = DeliverySettings()
    replication: ReplicationSettings = ReplicationSettings()
    ingest: IngestSettings = IngestSettings()
    registry: RegistrySettings = RegistrySettings()
    http: HttpSettings = HttpSettings()
    operational_webhooks: OperationalWebhookSettings = OperationalWebhookSettings()
    tls: TlsSettings | None = None
    secrets: SecretsSettings = SecretsSettings()

    toml_file: ClassVar[Path | None] = None

    @field_validator("store")
    @classmethod
    def _store(cls, v: str) -> str:
        if v != "sqlite" and not v.startswith(("postgresql://", "postgres://")):
            raise ValueError('must be "sqlite" or a URL starting with postgresql://')
        return v

    @field_validator("http_listen", "grpc_listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be host:port with a port in 0..65535")
        return v

    @model_validator(mode="wrap")
    @classmethod
    def _every_error_at_once(cls, data: object, handler: ValidatorFunctionWrapHandler) -> object:
        """Every error of a configuration in one pass (issue 43: they came in two): the
        settings' own errors, then the contradictions between settings (``_CROSS_CHECKS``)
        among the settings that are valid themselves. Raises one ValidationError."""
        errors: list = []
        failed: set = set()
        try:
            return _cross_checked(handler(data), failed, errors, cls.__name__)
        except ValidationError as exc:
            if errors:  # raised by _cross_checked itself
                raise
            errors = exc.errors()
            failed = {e["loc"][0] for e in errors if e["loc"]}
        if isinstance(data, dict) and "" not in failed:
            rest = {k: v for k, v in data.items() if k not in failed}
            try:
                _cross_checked(handler(rest), failed, errors, cls.__name__)
            except ValidationError:
                pass  # what the rest still gets wrong is among ``errors`` already
        raise ValidationError.from_exception_data(cls.__name__, errors)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: tuple[PydanticBaseSettingsSource, ...] = (init_settings, env_settings)
        if cls.toml_file is not None:
            sources += (TomlConfigSettingsSource(settings_cls, toml_file=cls.toml_file),)
        return sources


Problem = tuple[tuple[str | int, ...], str]  # (setting path, message)


def _token_problems(s: Settings) -> list[Problem]:
    """Each token once (the same secret with two scopes would give whichever came last)."""
    seen: dict[str, int] = {}
    found: list[Problem] = []
    for i, t in enumerate(s.tokens):
        if t.token in seen:
            found.append(
                (
                    ("tokens", i, "token"),
                    f"the same token as tokens[{seen[t.token]}] "
                    "(give each [[tokens]] entry its own token)",
                )
            )
        seen.setdefault(t.token, i)
    return found


def _peer_problems(s: Settings) -> list[Problem]:
    """No peer with this node's region; each peer region once."""
    regions: dict[str, int] = {}
    found: list[Problem] = []
    for i, p in enumerate(s.peers):
        if p.region == s.region:
            found.append(
                (
                    ("peers", i, "region"),
                    f"{p.region!r} is this node's own region (list the other regions only)",
                )
            )
        elif p.region in regions:
            found.append(
                (
                    ("peers", i, "region"),
                    f"{p.region!r} is already "
                    f"peers[{regions[p.region]}] (one [[peers]] entry per region)",
                )
            )
        regions.setdefault(p.region, i)
    return found


def _lease_problems(s: Settings) -> list[Problem]:
    """A delivery claim's lease longer than an attempt on PostgreSQL (several processes)."""
    d = s.delivery
    if s.store != "sqlite" and d.claim_lease_s <= d.timeout_s:
        return [
            (
                ("delivery", "claim_lease_s"),
                f"{d.claim_lease_s} must exceed "
                f"delivery.timeout_s {d.timeout_s} (a claim must outlast an attempt)",
            )
        ]
    return []


# on PostgreSQL, the least replication.retired_compact_s: its half is how long a process
# may go without a follow round before its registry writes are refused (the store's
# fence, adapters/postgres_commit.py), and rounds come every retired_compact_s / 8 at most
MIN_PG_COMPACT_S = 1.0


def _compaction_problems(s: Settings) -> list[Problem]:
    """On PostgreSQL the store's fence (half of retired_compact_s) outlasts follow rounds."""
    r = s.replication
    if s.store != "sqlite" and r.retired_compact_s < MIN_PG_COMPACT_S:
        return [
            (
                ("replication", "retired_compact_s"),
                f"{r.retired_compact_s} must be at least {MIN_PG_COMPACT_S} on PostgreSQL (a "
                "process that has not read its region's records for half of it has its "
                "registry writes refused)",
            )
        ]
    return []


def _retention_problems(s: Settings) -> list[Problem]:
    """Events outlive their Idempotency-Keys (a key names its event)."""
    ttl = s.ingest.idempotency_ttl_s
    where: list[tuple[tuple[str | int, ...], float]] = [
        (("delivery", "event_retention_s"), s.delivery.event_retention_s)
    ]
    for tenant, keep in s.delivery.event_retention_by_tenant_s.items():
        where.append((("delivery", "event_retention_by_tenant_s", tenant), keep))
    return [
        (loc, f"{keep} must be 0 (forever) or at least ingest.idempotency_ttl_s {ttl}")
        for loc, keep in where
        if 0 < keep < ttl
    ]


def _message_problems(s: Settings) -> list[Problem]:
    """Every record and every chunk fits replication.max_message_bytes (core/wire.py)."""
    limit = s.replication.max_message_bytes
    found: list[Problem] = []
    if s.ingest.max_payload_bytes + RECORD_OVERHEAD_BYTES + ENVELOPE_BYTES > limit:
        found.append(
            (
                ("ingest", "max_payload_bytes"),
                f"{s.ingest.max_payload_bytes} + record "
                f"overhead {RECORD_OVERHEAD_BYTES} + envelope {ENVELOPE_BYTES} exceeds "
                f"replication.max_message_bytes {limit}",
            )
        )
    if s.replication.state_chunk_bytes > message_budget(limit):
        found.append(
            (
                ("replication", "state_chunk_bytes"),
                f"{s.replication.state_chunk_bytes}"
                f" exceeds replication.max_message_bytes {limit} - envelope "
                f"{ENVELOPE_BYTES}",
            )
        )
    return found


def _contact_problems(s: Settings) -> list[Problem]:
    """Contact refreshed several times per failover window; the fence's lease outlasts
    the silence of a healthy idle link."""
    r = s.replication
    found: list[Problem] = []
    if r.heartbeat_s * 2 >= r.failover_after_s:
        found.append(
            (
                ("replication", "heartbeat_s"),
                f"{r.heartbeat_s} must be under half "
                f"of replication.failover_after_s {r.failover_after_s}",
            )
        )
    if r.failover_after_s - r.fence_margin <= r.heartbeat_s:
        found.append(
            (
                ("replication", "fence_margin_s"),
                f"{r.fence_margin} must leave "
                f"replication.failover_after_s {r.failover_after_s} - fence_margin_s "
                f"above replication.heartbeat_s {r.heartbeat_s}",
            )
        )
    return found


# (the top-level settings a check reads, the check): a check is skipped when one of them
# is invalid itself (its value would be the default, not what the file says)
_CROSS_CHECKS = (
    (("tokens",), _token_problems),
    (("region", "peers"), _peer_problems),
    (("store", "delivery"), _lease_problems),
    (("store", "replication"), _compaction_problems),
    (("ingest", "replication"), _message_problems),
    (("delivery", "ingest"), _retention_problems),
    (("replication",), _contact_problems),
)


def _cross_checked(s: Settings, failed: set, errors: list, title: str) -> Settings:
    """``s`` if no check of ``_CROSS_CHECKS`` over valid settings finds a problem; else
    raises ``errors`` and every problem as one ValidationError."""
    for reads, check in _CROSS_CHECKS:
        if failed.isdisjoint(reads):
            errors.extend(
                {"type": PydanticCustomError("config", msg), "loc": loc, "input": None}
                for loc, msg in check(s)
            )
    if errors:
        raise ValidationError.from_exception_data(title, errors)
    return s


def load_settings(path: str | Path | None = None, **overrides: object) -> Settings:
    """Settings from ``path`` (TOML, optional), the environment and ``overrides``.

    Raises FileNotFoundError for a missing file, ``tomllib.TOMLDecodeError`` for bad TOML
    and ``pydantic.ValidationError`` for bad values (``describe_errors`` words it).
    """
    if path is not None and not Path(path).is_file():
        raise FileNotFoundError(f"config file not found: {path}")

    class _Loaded(Settings):
        toml_file = Path(path) if path is not None else None

    loaded = _Loaded(**overrides)
    settings = Settings.model_validate(loaded.model_dump())
    if path is not None and settings.tls is not None:
        # relative TLS paths are relative to the configuration file, not the working dir
        base = Path(path).resolve().parent
        settings.tls = TlsSettings(
            **{k: base / getattr(settings.tls, k) for k in ("cert", "key", "ca")}
        )
    if path is not None and settings.secrets.key_file is not None:
        base = Path(path).resolve().parent
        settings.secrets = SecretsSettings(
            key_file=base / settings.secrets.key_file, keys=settings.secrets.keys
        )
    return settings


def describe_errors(exc: ValidationError, source: str) -> list[str]:
    """One line per error of ``exc``: ``<source>: <setting path>: <message>``, e.g.
    ``node.toml: tokens[1].token: String should have at least 16 characters``. The path
    uses TOML's names (``peers[0].region``); no pydantic type tags, input values or
    documentation URLs, which would echo secrets and read as internals."""
    lines = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ""
        for part in err["loc"]:
            if isinstance(part, int):
                loc += f"[{part}]"
            elif isinstance(part, str) and (part.isidentifier() or not loc):
                loc += f".{part}" if loc else part
        msg = err["msg"]
        for prefix in ("Value error, ", "Assertion failed, "):
            msg = msg.removeprefix(prefix)
        lines.append(f"{source}: {loc}: {msg}" if loc else f"{source}: {msg}")
    return lines
