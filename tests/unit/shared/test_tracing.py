"""Tracing is free when off and complete when on; each case runs in a fresh process (tracing is global)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.fakes.otlp_server import FakeCollector

REPO = Path(__file__).resolve().parents[3]

PROBE = """
import asyncio, json, sys
from shared import tracing
from shared.kafka.broker import make_broker
from shared.kafka.publish import send_keyed
from shared.settings import Settings

broker = make_broker("probe", Settings())
out = {
    "enabled": tracing.enabled(),
    "sdk_loaded": "opentelemetry.sdk.trace" in sys.modules,
    "middlewares": [type(m).__name__ for m in broker.middlewares],
}

class Producer:  # send_keyed's view of an AIOKafkaProducer: records what it is given
    def __init__(self): self.headers = None
    async def partitions_for(self, topic): return {0}
    def create_batch(self):
        producer = self
        class Batch:
            def append(self, *, key, value, timestamp, headers):
                producer.headers = headers
                return True
        return Batch()
    async def send_batch(self, batch, topic, partition):
        f = asyncio.get_running_loop().create_future(); f.set_result(None); return f

async def main():
    producer = Producer()
    if tracing.enabled():
        from opentelemetry import trace
        with trace.get_tracer("probe").start_as_current_span("embed batch") as span:
            await send_keyed(producer, "chunks.embedded", [(b"k", b"v")], [("evidentia-event", b"X")])
            out["span_trace_id"] = format(span.get_span_context().trace_id, "032x")
            out["current_trace_id"] = tracing.current_trace_id()
            from shared.events import new_trace_id
            out["event_trace_id"] = new_trace_id()
        tracing.shutdown()  # flush to the collector
    else:
        await send_keyed(producer, "chunks.embedded", [(b"k", b"v")], [("evidentia-event", b"X")])
    out["headers"] = {k: v.decode() for k, v in producer.headers}

asyncio.run(main())
print(json.dumps(out))
"""


def probe(env: dict[str, str]) -> dict[str, object]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("EVIDENTIA_", "OTEL_"))}
    base.update({"PYTHONPATH": str(REPO), **env})
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=base, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return data


def test_off_by_default_loads_nothing_and_adds_no_header() -> None:
    out = probe({})
    assert out["enabled"] is False and out["sdk_loaded"] is False
    assert "KafkaTelemetryMiddleware" not in out["middlewares"]
    assert out["headers"] == {"evidentia-event": "X"}


def test_on_it_traces_kafka_links_events_and_exports_to_the_collector() -> None:
    with FakeCollector() as collector:
        out = probe({"EVIDENTIA_TRACING_OTLP_ENDPOINT": collector.url})
        deadline = time.monotonic() + 10
        while not collector.spans and time.monotonic() < deadline:
            time.sleep(0.1)
    assert out["enabled"] is True and out["sdk_loaded"] is True
    assert out["middlewares"][0] == "KafkaTelemetryMiddleware"  # outermost: its span covers retries
    headers = out["headers"]
    assert isinstance(headers, dict) and headers["evidentia-event"] == "X"
    version, trace_id, _, flags = headers["traceparent"].split("-")
    assert version == "00" and trace_id == out["span_trace_id"] and int(flags, 16) & 1
    # Events made inside a span carry its trace id, so logs (trace_id) and traces meet.
    assert out["current_trace_id"] == out["event_trace_id"] == out["span_trace_id"]
    (span,) = [s for s in collector.spans if s.name == "embed batch"]
    assert span.service == "probe" and span.trace_id == out["span_trace_id"]


def test_the_standard_otel_variable_turns_it_on_too() -> None:
    with FakeCollector() as collector:
        out = probe({"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url})
    assert out["enabled"] is True
