"""OpenTelemetry tracing for a production node (``[tracing]`` in node.toml).

Needs the ``otel`` extra (opentelemetry-sdk and the OTLP/HTTP exporter); without it a
configured ``[tracing]`` raises OtelMissing (a RuntimeError) at start, naming the extra;
``regionsync serve`` checks it first (``require_otel``) and exits 2 with one line. Spans themselves
are made by runtime/telemetry.py: ``regionsync.ingest`` (publish or inbound call),
``regionsync.commit`` (waiting for the group commit holding the event) and
``regionsync.attempt`` (one delivery attempt, a child of the event's ingest span when it
was accepted in this process), each with ``regionsync.event_id``.
"""

from __future__ import annotations

from typing import Any

from ..config import TracingSettings

__all__ = ["OtelMissing", "otlp_tracer_provider", "require_otel"]


class OtelMissing(RuntimeError):
    """``[tracing]`` is configured but the ``otel`` extra is not installed."""


def require_otel() -> None:
    """Raise OtelMissing (naming ``pip install 'regionsync[otel]'``) unless the OTLP/HTTP
    exporter and the SDK can be imported."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise OtelMissing(
            f"[tracing] needs the otel extra: pip install 'regionsync[otel]' ({exc})"
        ) from None


def otlp_tracer_provider(opts: TracingSettings, region: str) -> Any:
    """A TracerProvider exporting in batches over OTLP/HTTP to ``opts.otlp_endpoint``.
    Raises OtelMissing without the otel extra."""
    require_otel()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError as exc:  # pragma: no cover - require_otel imported them
        raise OtelMissing(f"[tracing] needs the otel extra ({exc})") from None
    provider = TracerProvider(
        resource=Resource.create({"service.name": opts.service_name, "cloud.region": region}),
        sampler=ParentBased(TraceIdRatioBased(opts.sample_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=opts.otlp_endpoint)))
    return provider
