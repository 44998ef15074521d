"""OpenTelemetry tracing: HTTP -> Kafka -> PostgreSQL -> Anthropic, one trace per request.

Off unless ``EVIDENTIA_TRACING_OTLP_ENDPOINT`` (or the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``) is set:
then :func:`setup_tracing` installs the SDK's tracer provider (as the global one) with an OTLP/HTTP exporter
and instruments asyncpg and httpx (the NCBI, Bookshelf and RxNav clients); the Anthropic SDK traces each of
its API calls itself with the global provider (a CLIENT span in the GenAI conventions, with the W3C context
sent along); :func:`kafka_middlewares` gives
``make_broker`` FastStream's ``KafkaTelemetryMiddleware``, which writes and reads the W3C ``traceparent``
header of every message; the gateway adds the FastAPI instrumentation (``services.gateway.app``).
Off, nothing is imported or installed, and :func:`enabled` is a module flag read.
"""

from __future__ import annotations

import logging
from collections.abc import MutableSequence
from typing import TYPE_CHECKING, Any

from shared.settings import TracingSettings, mask_url

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger(__name__)

_provider: TracerProvider | None = None


def enabled() -> bool:
    """True once :func:`setup_tracing` installed an exporting tracer provider in this process."""
    return _provider is not None


def provider() -> TracerProvider | None:
    return _provider


def _headers(settings: TracingSettings) -> dict[str, str]:
    raw = settings.otlp_headers.get_secret_value() if settings.otlp_headers else ""
    out: dict[str, str] = {}
    for item in raw.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector base URL (a URL already ending in ``/v1/traces`` is kept)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"


def setup_tracing(service: str, settings: TracingSettings) -> bool:
    """Install tracing for ``service`` when an OTLP endpoint is configured; return whether it is on.

    Idempotent. Spans are batched and exported in the background; the provider flushes at exit.
    """
    global _provider
    if _provider is not None:
        return True
    if not settings.otlp_endpoint:
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    resource = Resource.create({"service.name": service, "service.namespace": settings.service_namespace})
    tracer_provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
    exporter = OTLPSpanExporter(
        endpoint=traces_url(settings.otlp_endpoint), headers=_headers(settings), timeout=settings.export_timeout_s
    )
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(tracer_provider)
    AsyncPGInstrumentor().instrument(tracer_provider=tracer_provider)  # type: ignore[no-untyped-call]
    HTTPXClientInstrumentor().instrument(tracer_provider=tracer_provider)
    _provider = tracer_provider
    log.info("tracing on", extra={"otlp_endpoint": mask_url(traces_url(settings.otlp_endpoint))})
    return True


def shutdown() -> None:
    """Flush and stop the exporter (also done at interpreter exit)."""
    if _provider is not None:
        _provider.shutdown()


def kafka_middlewares() -> tuple[Any, ...]:
    """FastStream's Kafka telemetry middleware when tracing is on, else nothing."""
    if _provider is None:
        return ()
    from faststream.kafka.opentelemetry import KafkaTelemetryMiddleware

    return (KafkaTelemetryMiddleware(tracer_provider=_provider, include_messages_counters=False),)


def inject_headers(headers: MutableSequence[tuple[str, bytes]]) -> None:
    """Add the current span's W3C ``traceparent`` (and ``tracestate``) to Kafka record headers."""
    if _provider is None:
        return
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    headers.extend((key, value.encode()) for key, value in carrier.items())


def current_trace_id() -> str | None:
    """The current span's trace id (32 hex digits) when tracing is on and a span is active."""
    if _provider is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def response_headers() -> dict[str, str]:
    """``traceparent`` and ``X-Trace-Id`` of the current (server) span, for an HTTP response; {} when off."""
    if _provider is None:
        return {}
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    trace_id = format(context.trace_id, "032x")
    traceparent = f"00-{trace_id}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    return {"traceparent": traceparent, "X-Trace-Id": trace_id}
