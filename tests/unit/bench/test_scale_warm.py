"""bench/scale.py times the gateway only once the retriever holds its doc values (a warm replica)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from tests.unit.bench.test_scale_generator import _scale


def _exposition(held: float) -> str:
    """The gauge as a retriever's /metrics shows it (the name shared/metrics.py gives it)."""
    from shared.metrics import DOC_VALUES_BYTES

    registry = CollectorRegistry()
    gauge = Gauge(DOC_VALUES_BYTES._name, DOC_VALUES_BYTES._documentation, registry=registry)
    gauge.set(held)
    return generate_latest(registry).decode()


def test_the_gauge_is_read_off_the_retrievers_metrics() -> None:
    scale = _scale()
    found = scale.DOC_VALUES_GAUGE.search(_exposition(57_017_323))
    assert found is not None and float(found.group(1)) == 57_017_323
    assert float(scale.DOC_VALUES_GAUGE.search(_exposition(0)).group(1)) == 0


@pytest.fixture
def metrics_server() -> Iterator[tuple[Any, list[float]]]:
    """A /metrics endpoint whose gauge reads each value of ``held`` in turn (the last one from then on)."""
    held: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            value = held.pop(0) if len(held) > 1 else held[0]
            body = _exposition(value).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stack = SimpleNamespace(processes={"retriever": SimpleNamespace(port=server.server_address[1])})
    try:
        yield stack, held
    finally:
        server.shutdown()


def test_the_bench_waits_until_the_doc_values_are_held(metrics_server: tuple[Any, list[float]]) -> None:
    stack, held = metrics_server
    held.extend([0, 0, 0, 1024])
    waited = _scale().await_doc_values(stack, timeout_s=30)
    assert waited is not None and waited >= 1.0  # three reads at 0, half a second apart
    assert held == [1024]


def test_a_retriever_that_never_holds_them_is_reported_not_waited_for_forever(
    metrics_server: tuple[Any, list[float]],
) -> None:
    stack, held = metrics_server
    held.append(0)
    assert _scale().await_doc_values(stack, timeout_s=1.2) is None
