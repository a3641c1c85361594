"""A node's telemetry: Prometheus histograms and (when configured) OpenTelemetry spans.

One ``Telemetry`` per node (several nodes share a process in tests and the simulator, so
nothing is registered globally); ``/metrics`` collects it. Durations are measured on the
node's clock (``Clock.monotonic``, the simulator's virtual one there), in seconds:

| metric | observed |
|---|---|
| ``regionsync_publish_latency_seconds{path}`` | publish API / inbound source: call to durable ack |
| ``regionsync_commit_latency_seconds`` | one group commit (``Store.commit``) |
| ``regionsync_attempt_latency_seconds{outcome}`` | one delivery attempt (the sender's timing) |
| ``regionsync_replication_lag_seconds{origin}`` | a peer's records applied: now - newest HLC |

Tracing is off (``tracer`` None) unless a tracer provider is set (``use_tracer_provider``,
done by the composition root when ``[tracing]`` is configured, or by a test).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from prometheus_client import Histogram

__all__ = ["METRIC_NAMES", "Telemetry"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_MAX_TRACKED = 10_000  # events whose ingest span context is kept for their attempts

METRIC_NAMES = (
    "regionsync_publish_latency_seconds",
    "regionsync_commit_latency_seconds",
    "regionsync_attempt_latency_seconds",
    "regionsync_replication_lag_seconds",
)


class Telemetry:
    """Histograms of one node and its optional tracer."""

    def __init__(self) -> None:
        self.publish = Histogram(
            METRIC_NAMES[0], "Publish/inbound call to durable acknowledgement (s)",
            ["path"], registry=None, buckets=_LATENCY_BUCKETS,
        )  # fmt: skip
        self.commit = Histogram(
            METRIC_NAMES[1], "Group commit duration, one Store transaction (s)",
            registry=None, buckets=_LATENCY_BUCKETS,
        )  # fmt: skip
        self.attempt = Histogram(
            METRIC_NAMES[2], "Delivery attempt duration (s)",
            ["outcome"], registry=None, buckets=_LATENCY_BUCKETS,
        )  # fmt: skip
        self.replication_lag = Histogram(
            METRIC_NAMES[3], "Record applied here minus its origin HLC wall time (s)",
            ["origin"], registry=None, buckets=_LAG_BUCKETS,
        )  # fmt: skip
        self.tracer: Any = None  # an opentelemetry Tracer when tracing is on
        self._contexts: OrderedDict[str, Any] = OrderedDict()  # event id -> SpanContext
        # (id of a histogram, key) -> its labelled child (``_labelled``)
        self._children: dict[tuple[int, str], Any] = {}

    def collect(self) -> Iterator[Any]:
        """Prometheus collector protocol: every histogram's metric family."""
        for h in (self.publish, self.commit, self.attempt, self.replication_lag):
            yield from h.collect()

    def _labelled(self, histogram: Histogram, key: str, label: str) -> Any:
        """``histogram.labels(label)``, looked up once per ``key`` (``labels()`` takes a
        lock and builds a key: too dear once per attempt or record)."""
        child = self._children.get((id(histogram), key))
        if child is None:
            child = self._children[(id(histogram), key)] = histogram.labels(label)
        return child

    def observe_attempt(self, outcome: str, seconds: float) -> None:
        """An attempt's duration (seconds) under its outcome kind (``OutcomeKind`` value)."""
        self._labelled(self.attempt, outcome, outcome).observe(seconds)

    def observe_lag(self, origin_actor: str, now_ms: int, hlc_wall_ms: int) -> None:
        """Replication lag of ``origin_actor`` (``region:incarnation``) as of one of its
        records applied here (the replica observes the newest of each applied run, not
        every record: a histogram observation is about 1 us); negative lags (clock skew)
        count as 0."""
        lag = max(now_ms - hlc_wall_ms, 0) / 1000
        region = origin_actor.partition(":")[0]
        self._labelled(self.replication_lag, origin_actor, region).observe(lag)

    # -- tracing -------------------------------------------------------------------------

    def use_tracer_provider(self, provider: Any) -> None:
        """Turn tracing on with an opentelemetry ``TracerProvider`` (None: off)."""
        if provider is None:
            self.tracer = None
            return
        from opentelemetry import trace

        self.tracer = trace.get_tracer("regionsync", tracer_provider=provider)

    def span(self, name: str, parent: Any = None, **attributes: Any) -> Any:
        """A context manager: a started span (tracing on) or a no-op one. ``parent`` is a
        SpanContext to continue (another task's span) or None for the current context."""
        if self.tracer is None:
            return _NoSpan()
        context = None
        if parent is not None:
            from opentelemetry import trace

            context = trace.set_span_in_context(trace.NonRecordingSpan(parent))
        return self.tracer.start_as_current_span(name, context=context, attributes=attributes)

    def remember(self, event_id: str, span: Any) -> None:
        """Keep ``span``'s context as the parent of ``event_id``'s delivery attempts
        (in memory, the newest ``_MAX_TRACKED`` events; another region starts new traces)."""
        if self.tracer is None or not span.get_span_context().is_valid:
            return
        self._contexts[event_id] = span.get_span_context()
        if len(self._contexts) > _MAX_TRACKED:
            self._contexts.popitem(last=False)

    def remember_current(self, event_id: str) -> None:
        """``remember`` the current span (the ingest span of the running call)."""
        if self.tracer is not None:
            from opentelemetry import trace

            self.remember(event_id, trace.get_current_span())

    def context_of(self, event_id: str) -> Any:
        """The remembered SpanContext of an event's ingest, or None."""
        return self._contexts.get(event_id)


class _NoSpan:
    """A span that records nothing (tracing off)."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def get_span_context(self) -> Any:
        return None
