"""A stand-in OpenTelemetry collector: OTLP/HTTP (protobuf or JSON) on 127.0.0.1, spans kept in memory.

    with FakeCollector() as collector:
        env["EVIDENTIA_TRACING_OTLP_ENDPOINT"] = collector.url    # each service exports here
        ...
        spans = collector.spans_of(trace_id)

An in-memory span exporter sees only the spans of its own process; the services are separate processes,
so the test needs what production has: a collector they all export to. ``POST /v1/traces`` decodes an
``ExportTraceServiceRequest`` with the real OTLP protobuf classes (``opentelemetry-proto``) and answers
as a collector does (an empty ``ExportTraceServiceResponse``).
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from google.protobuf.json_format import Parse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.fakes.http import LocalHttpServer, QuietHandler

SPAN_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class ExportedSpan:
    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any] = field(default_factory=dict)


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    return getattr(v, which) if which in ("string_value", "int_value", "bool_value", "double_value") else str(v)


class FakeCollector(LocalHttpServer):
    thread_name = "fake-otlp"

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[ExportedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()

    def _take(self, request: ExportTraceServiceRequest) -> None:
        found: list[ExportedSpan] = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        ExportedSpan(
                            service=service,
                            name=span.name,
                            kind=SPAN_KINDS.get(span.kind, str(span.kind)),
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(found)

    def spans_of(self, trace_id: str) -> list[ExportedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        collector = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if (self.headers.get("content-encoding") or "").lower() == "gzip":
                    body = gzip.decompress(body)
                if self.path.rstrip("/") != "/v1/traces":
                    self.send_error(404)
                    return
                request = ExportTraceServiceRequest()
                try:
                    if "json" in (self.headers.get("content-type") or ""):
                        Parse(body.decode(), request)
                    else:
                        request.ParseFromString(body)
                except Exception:
                    self.send_error(400, "not an ExportTraceServiceRequest")
                    return
                collector._take(request)
                data = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
